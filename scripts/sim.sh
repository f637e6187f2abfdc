#!/usr/bin/env bash
# The deterministic simulation (distlock-sim) on the in-memory backend, from a
# release build: 10,000 seeds across every lock kind (about 14 s on two cores), or
# with --soak a million (about 20 minutes). Any other arguments go to distlock-sim:
# `scripts/sim.sh --seed 29 --history` replays one seed and prints its history,
# `scripts/sim.sh --seeds 50000 --from 1000000` runs another range.
# Exits non-zero if a seed broke a promise; each failure prints its seed and how to
# replay it.
set -euo pipefail
cd "$(dirname "$0")/.."

args=("$@")
if [ "${1:-}" = --soak ]; then
  args=(--seeds 1000000)
elif [ $# -eq 0 ]; then
  args=(--seeds 10000)
fi
# tokio's seeded generator needs --cfg tokio_unstable, which .cargo/config.toml sets;
# a RUSTFLAGS variable would replace it.
if [ -n "${RUSTFLAGS:-}" ]; then
  export RUSTFLAGS="$RUSTFLAGS --cfg tokio_unstable"
fi
cargo build --release --locked --quiet -p distlock-sim
"${CARGO_TARGET_DIR:-target}/release/distlock-sim" "${args[@]}"
