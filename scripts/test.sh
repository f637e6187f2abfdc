#!/usr/bin/env bash
# Runs every test of the workspace on a fresh machine: installs what is missing,
# makes the server images available, checks formatting and lints, then runs the tests.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/prepare-servers.sh

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# Container tests start their own servers; the harness bounds how many run at once.
cargo test --workspace --locked
