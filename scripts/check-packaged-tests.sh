#!/usr/bin/env bash
# Checks and tests the packaged crates (target/package/*.crate, made by `cargo
# package --workspace`) from their unpacked contents alone, outside this workspace:
# each crate's dependencies on the others are the packages, patched in as a registry
# would serve them. First the crates with their default features, checked together
# (`cargo publish` builds each alone); then what a packager running `cargo test` on
# the published source runs: every test target and the doc tests. The test binaries run three at once (their
# time is mostly spent waiting on leases to run out), each from its crate's
# directory, as cargo runs it; every failure is listed at the end.
#
# With DISTLOCK_PACKAGED_RAN set to a file's path, the test targets that ran and
# passed are written there, a line each (crate, target's name, target's kind, tab
# separated), so that scripts/test.sh does not run the same tests again from the
# workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

crates=(distlock-core distlock-conformance distlock-sim distlock-sql distlock-redis distlock-postgres distlock-mysql distlock-etcd distlock-zookeeper distlock distlock-cli)
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
dir="$(mktemp -d /tmp/distlock-packaged.XXXXXX)"
trap 'rm -rf "$dir"' EXIT
members="" patches=""
for crate in "${crates[@]}"; do
  tar xzf "target/package/$crate-$version.crate" -C "$dir"
  members+="\"$crate-$version\", "
  patches+="$crate = { path = \"$crate-$version\" }"$'\n'
done
cat >"$dir/Cargo.toml" <<TOML
[workspace]
resolver = "2"
members = [${members%, }]

[patch.crates-io]
$patches
# This workspace's build settings, so that the dependencies built for its own tests
# (into the same target directory) are built once.
$(sed -n '/^\[profile\./,$p' Cargo.toml)
TOML
# The versions this workspace is tested with, already fetched by its own build.
cp Cargo.lock "$dir/"
# The workspace's build flags (tokio's seeded generator, for the simulation), so that
# the packaged crates build on the same dependency artifacts as the workspace's.
cp -r .cargo "$dir/"
# The workspace's own target directory: the packaged crates are built apart from the
# workspace's (their sources are elsewhere), their dependencies are shared.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
test=(cargo test --workspace --all-features --offline --manifest-path "$dir/Cargo.toml")

# Every crate with its default features, as `cargo publish` verifies a package:
# checked, in one build of the packaged crates (their features unified, as in a
# user's build of several of them); the build with every feature follows.
cargo check --workspace --offline --quiet --manifest-path "$dir/Cargo.toml"
echo "check-packaged-tests: the packaged crates build with their default features"

# Every test binary, with its crate's directory.
"${test[@]}" --no-run --message-format=json-render-diagnostics \
  | jq -r 'select(.reason == "compiler-artifact" and .executable != null and .profile.test)
      | [(.manifest_path | sub("/Cargo.toml$"; "")), .executable, .target.name, .target.kind[0]]
      | @tsv' >"$dir/binaries.tsv"
if [ ! -s "$dir/binaries.tsv" ]; then
  echo "check-packaged-tests: cargo built no test binary" >&2
  exit 1
fi
mkdir "$dir/logs"
# One binary: its output printed whole when it ends, its name listed if it failed.
run_one() {
  local crate_dir=$1 exe=$2 target=$3 kind=$4 dir=$5 code=0
  local log="$dir/logs/$(basename "$exe")"
  (cd "$crate_dir" && CARGO_MANIFEST_DIR="$crate_dir" "$exe") >"$log" 2>&1 </dev/null || code=$?
  {
    echo "     Ran $(basename "$crate_dir") $(basename "$exe"), exit code $code"
    cat "$log"
  } | flock "$dir/print.lock" cat
  if [ "$code" != 0 ]; then
    echo "$(basename "$crate_dir") $(basename "$exe")" | flock "$dir/print.lock" tee -a "$dir/failed" >/dev/null
  else
    printf '%s\t%s\t%s\n' "$(basename "$crate_dir" "-$version")" "$target" "$kind" \
      | flock "$dir/print.lock" tee -a "$dir/passed" >/dev/null
  fi
}
export -f run_one
export version
tr '\t' '\n' <"$dir/binaries.tsv" | tr '\n' '\0' | xargs -0 -n 4 -P 3 bash -c 'run_one "$0" "$1" "$2" "$3" "'"$dir"'"'
"${test[@]}" --doc || echo "the doc tests" >>"$dir/failed"
if [ -s "$dir/failed" ]; then
  echo "check-packaged-tests: these tests of the packaged crates failed:" >&2
  sed 's/^/  /' "$dir/failed" >&2
  exit 1
fi
if [ -n "${DISTLOCK_PACKAGED_RAN:-}" ]; then
  cp "$dir/passed" "$DISTLOCK_PACKAGED_RAN"
fi
echo "check-packaged-tests: $(wc -l <"$dir/binaries.tsv") test binaries and the doc tests of the packaged crates passed"
