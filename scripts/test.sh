#!/usr/bin/env bash
# Runs every test of the workspace on a fresh machine: installs what is missing,
# makes the server images available, checks formatting and lints, then runs the tests.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step says when it starts and how long the run has taken, so that a slow run
# shows where its time went.
step() { echo "test: +${SECONDS}s $*"; }

# One build from scratch: incremental compilation's records only slow it down.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

# etcd-client's build compiles etcd's protocol with protoc; the test runner reads
# cargo's build messages with jq.
if ! command -v protoc >/dev/null 2>&1; then
  echo "test: installing protobuf-compiler (protoc)"
  bash scripts/apt-install.sh protobuf-compiler
fi
if ! command -v jq >/dev/null 2>&1; then
  echo "test: installing jq"
  bash scripts/apt-install.sh jq
fi

# The server images are made while the lints and the docs compile: on a fresh machine
# that is a debootstrap, mostly downloads and disk, where the compiler wants the cores.
# The tests wait for them.
images_log="$(mktemp)"
bash scripts/prepare-servers.sh >"$images_log" 2>&1 &
images=$!

step "formatting and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
bash scripts/check-packages.sh
step "docs"
# Every public item's docs build as docs.rs builds them, with no broken link, and each
# feature-gated item says which feature it needs.
bash scripts/check-docs.sh
step "packages"
# Every publishable crate packaged as it would be published, into target/package.
# Offline: the lints above fetched every dependency. Cargo's own verification (a
# build of each package with its default features, against the packages before it)
# is left to the next script, which checks the unpacked packages with their default
# features, then builds them with every feature for their tests.
cargo package --workspace --exclude distlock-testservers --exclude lockbench --locked --allow-dirty --offline --no-verify
# The check, then the tests, run from the unpacked packages alone, outside the
# workspace (the tests that start servers stay in the repository, and run below).
# The ones that ran and passed here are listed, and not run again below.
packaged_ran="$(mktemp)"
DISTLOCK_PACKAGED_RAN="$packaged_ran" bash scripts/check-packaged-tests.sh

if ! wait "$images"; then
  cat "$images_log" >&2
  echo "test: the server images could not be prepared" >&2
  exit 1
fi
cat "$images_log"
rm -f "$images_log"
step "tests"
# Every test of `cargo test --workspace --all-features` (the TLS builds and their
# tests too), the test binaries in two streams at once (scripts/run-tests.sh says why).
# Container tests start their own servers; each binary's harness bounds how many run
# at once. The tests that ran from the packages above, the same sources, are built
# but not run again.
DISTLOCK_PACKAGED_RAN="$packaged_ran" bash scripts/run-tests.sh
rm -f "$packaged_ran"
step "the simulation, 10,000 seeds"
# Every lock kind under every simulated fault, on the in-memory backend, from a release
# build (scripts/sim.sh; `scripts/sim.sh --soak` runs a million, about 20 minutes).
bash scripts/sim.sh
# And the proof that it finds bugs: the mutants of the client (scripts/sim-mutants.sh
# lists them), each built into a copy of distlock-core and caught within CI's 10,000
# seeds.
bash scripts/sim-mutants.sh
step "a user's crate outside the workspace"
# A user's crate on the packaged crates: with distlock's redis feature alone it builds
# without protoc; with every backend it builds and runs.
bash scripts/check-outside.sh
# The comparison run's quick mode, as a check that it runs on every backend: the
# binary `cargo test` built for lockbench's own tests (a debug build with the tests'
# features: its figures are not the point here; scripts/lockbench.sh measures).
# `cargo test` above ran every backend's conformance suite, so this run leaves it out
# and its report says so.
# The replicated rows (redis-sentinel, etcd-3, zookeeper-3) run in the main job
# (scripts/lockbench.sh), not here: their faults wait out failovers, and CI's time is
# kept for the tests (their suites, and the quorum cases by role, run above). Redlock
# runs on 3 masters here, on 5 in the main job and in its own suite above.
rows=memory,redis,postgres,mariadb,etcd,zookeeper,redlock-3,redis-cluster
step "the comparison run, quick"
lockbench="${CARGO_TARGET_DIR:-target}/debug/lockbench"
"$lockbench" --quick --skip-suite --require-all --backends "$rows" --out target/lockbench-quick
step "the torture run, quick"
# The torture run's quick mode: every fault once per backend, and the safety checks.
"$lockbench" torture --quick --require-all --backends "$rows" --out target/lockbench-quick
step "the semver check against 0.1.0"
# Every published crate's API and features against 0.1.0's: rustdoc's JSON of this
# tree and of the baseline's, on the dependencies the docs step compiled. On a fresh
# machine this first builds cargo-semver-checks (about five minutes). Built in the
# background, beside the tests, it made fault cases fail (a container that could not
# be paused, a server that did not answer in time), so it is built here, alone.
bash scripts/check-semver.sh
step "done"
