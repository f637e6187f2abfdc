#!/usr/bin/env bash
# The comparison run, distlock's main job: prepares the servers, then runs lockbench
# in release mode, then its torture run. Results go to results/ (report.md,
# results.json, latency.svg, handoff.svg, sweep.svg; torture.md, torture.json).
# Without flags, the standard run: every backend in both runs, the replicated rows
# too, in about 40 minutes on the project's 2-core machine, build included (42 min
# measured from a fresh checkout: the release build 5, the comparison 24, the
# torture run 13; distlock/guides/benchmarks.md). --quick for CI's short runs, --soak for the long run
# (at least 100,000 lock operations per backend under faults: over an hour),
# --backends to choose.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v protoc >/dev/null 2>&1; then
  echo "lockbench: installing protobuf-compiler (protoc)"
  bash scripts/apt-install.sh protobuf-compiler
fi
if ! bash scripts/prepare-servers.sh; then
  echo "lockbench: no servers could be prepared; running what can run without them" >&2
fi
cargo build --release --locked -p lockbench
# Both runs go ahead whatever the first found; the exit code is the graver of the two
# (distlock/guides/benchmarks.md's table): 1 a violated check, 3 the harness's outcome, 2 a usage error.
lockbench="${CARGO_TARGET_DIR:-target}/release/lockbench"
comparison=0
"$lockbench" "$@" || comparison=$?
torture=0
"$lockbench" torture "$@" || torture=$?
for code in 1 2 3; do
  if [ "$comparison" = "$code" ] || [ "$torture" = "$code" ]; then
    exit "$code"
  fi
done
if [ "$comparison" != 0 ]; then exit "$comparison"; fi
exit "$torture"
