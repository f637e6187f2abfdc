#!/usr/bin/env bash
# Runs every test of the workspace, as `cargo test --workspace --all-features` does,
# with the test binaries in two streams at once.
#
# Most of the tests' time is spent waiting: on servers paused, restarted or cut off,
# and on leases running out, one fault case at a time within each binary. One stream
# leaves a core idle through those waits; two overlap them. Each binary still runs its
# cases as its harness bounds them (four at once for a conformance suite), so that at
# most two binaries' servers run at once. The streams split the crates by what their
# tests took in CI last measured (about half each), and each stream runs its binaries one
# after another. A failing binary does not stop its stream: every failure is listed
# at the end, and the exit code is 1 if there was any.
#
# Each binary runs from its crate's directory, as cargo runs it; the doc tests run
# last, through cargo.
#
# With DISTLOCK_PACKAGED_RAN set to the file scripts/check-packaged-tests.sh wrote in
# the same run, the test targets listed there (they ran and passed from the packaged
# crates, the same sources) are built here but not run again, and each is named.
set -euo pipefail
cd "$(dirname "$0")/.."

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

# The first stream's crates; every other crate's binaries go to the second.
first="distlock-redis distlock-zookeeper distlock-mysql"
ran="${DISTLOCK_PACKAGED_RAN:-/dev/null}"

# Every test binary: its crate's directory, its target's name and kind, its path.
cargo test --workspace --all-features --locked --no-run \
  --message-format=json-render-diagnostics \
  | jq -r 'select(.reason == "compiler-artifact" and .executable != null and .profile.test)
      | [(.manifest_path | sub("/Cargo.toml$"; "")), .target.name, .target.kind[0], .executable]
      | @tsv' >"$out/binaries.tsv"
if [ ! -s "$out/binaries.tsv" ]; then
  echo "run-tests: cargo built no test binary" >&2
  exit 1
fi
: >"$out/stream-1.tsv"
: >"$out/stream-2.tsv"
: >"$out/skipped"
while IFS=$'\t' read -r dir target kind exe; do
  if grep -qxF "$(basename "$dir")"$'\t'"$target"$'\t'"$kind" "$ran"; then
    echo "$(basename "$dir") ($kind $target)" >>"$out/skipped"
    continue
  fi
  case " $first " in
    *" $(basename "$dir") "*) stream=1 ;;
    *) stream=2 ;;
  esac
  printf '%s\t%s\t%s\t%s\n' "$dir" "$target" "$kind" "$exe" >>"$out/stream-$stream.tsv"
done <"$out/binaries.tsv"

# Runs one stream's binaries in order; each one's output is printed whole when it
# ends (under a lock, so that the two streams' outputs do not mix), with its time.
run_stream() {
  local stream=$1
  local log="$out/output-$stream"
  while IFS=$'\t' read -r dir target kind exe; do
    local name started code
    name="$(basename "$dir") ($kind $target)"
    started=$SECONDS
    code=0
    (cd "$dir" && CARGO_MANIFEST_DIR="$dir" "$exe") >"$log" 2>&1 </dev/null || code=$?
    {
      echo "     Running $name [stream $stream]"
      cat "$log"
      echo "     Ended $name after $((SECONDS - started)) s, exit code $code [stream $stream]"
    } | flock "$out/print.lock" cat
    if [ "$code" != 0 ]; then
      echo "$name" >>"$out/failed"
      # Its failures again at the end, where a reader of the run's tail looks.
      { echo "== $name"; sed -n '/^failures:$/,$p' "$log"; } >>"$out/failures"
    fi
  done <"$out/stream-$stream.tsv"
}

run_stream 1 &
one=$!
run_stream 2 &
two=$!
# A stream itself fails only where the script does (its binaries' failures are listed).
wait "$one"
wait "$two"

# The doc tests of the crates whose tests ran from their packages ran there too.
mapfile -t excluded < <(cut -f1 "$ran" | sort -u | sed 's/^/--exclude\n/')
doc=0
cargo test --workspace "${excluded[@]}" --all-features --locked --doc || doc=$?
if [ "$doc" != 0 ]; then
  echo "the doc tests" >>"$out/failed"
fi
if [ -s "$out/failed" ]; then
  echo "run-tests: these tests failed:" >&2
  sed 's/^/  /' "$out/failed" >&2
  if [ -s "$out/failures" ]; then
    echo "run-tests: what they said:" >&2
    cat "$out/failures" >&2
    echo "run-tests: these tests failed (above):" >&2
    sed 's/^/  /' "$out/failed" >&2
  fi
  exit 1
fi
if [ -s "$out/skipped" ]; then
  echo "run-tests: not run again here, since they ran and passed from the packaged crates in this run:"
  sed 's/^/  /' "$out/skipped"
fi
echo "run-tests: every test binary and the doc tests passed"
