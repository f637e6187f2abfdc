#!/usr/bin/env bash
# Runs the tests of the packaged crates (target/package/*.crate, made by `cargo
# package --workspace`) from their unpacked contents alone, outside this workspace:
# each crate's dependencies on the others are the packages, patched in as a registry
# would serve them. What a packager running `cargo test` on the published source runs.
set -euo pipefail
cd "$(dirname "$0")/.."

crates=(distlock-core distlock-conformance distlock-sql distlock-redis distlock-postgres distlock-mysql distlock-etcd distlock-zookeeper distlock distlock-cli)
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
TOML
# The versions this workspace is tested with, already fetched by its own build.
cp Cargo.lock "$dir/"
CARGO_TARGET_DIR="$PWD/target/packaged" cargo test --workspace --all-features --offline --manifest-path "$dir/Cargo.toml" "$@"
