#!/usr/bin/env bash
# Builds a crate outside the workspace that depends on distlock with the `redis`
# feature alone, as a user adding it would, with no protoc to be found: only the etcd
# backend needs it. Versions are pinned by a copy of the workspace's lock file.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/src"
cat > "$dir/Cargo.toml" <<EOF
[package]
name = "distlock-outside"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
distlock = { path = "$root/distlock", features = ["redis"] }

[workspace]
EOF
cat > "$dir/src/main.rs" <<'EOF'
//! A user's crate: the Redis backend and the client, nothing else.
use std::sync::Arc;

fn main() {
    let client = distlock::LockClient::new(Arc::new(distlock::MemoryBackend::new()));
    let _redis = distlock::redis::RedisBackend::connect;
    println!("{:?}", distlock::schemes());
    drop(client);
}
EOF
cp "$root/Cargo.lock" "$dir/Cargo.lock"
export CARGO_TARGET_DIR="$root/target/outside"
PROTOC=/nonexistent/protoc cargo build --offline --quiet --manifest-path "$dir/Cargo.toml"
if cargo tree --offline --manifest-path "$dir/Cargo.toml" -e normal -i etcd-client >/dev/null 2>&1; then
  echo "check-outside: etcd-client is in the tree of a crate that asked for redis only" >&2
  exit 1
fi
"$CARGO_TARGET_DIR/debug/distlock-outside"
echo "check-outside: a crate with distlock's redis feature alone builds without protoc"

# How many crates a user's crate pulls in with each backend alone (its normal
# dependency tree, itself and distlock's own crates included).
for feature in redis postgres etcd zookeeper; do
  sed -i "s/features = \[\"[a-z]*\"\]/features = [\"$feature\"]/" "$dir/Cargo.toml"
  count=$(cargo tree --offline --manifest-path "$dir/Cargo.toml" -e normal --prefix none 2>/dev/null \
    | sed 's/ (\*)$//' | sort -u | wc -l)
  echo "check-outside: distlock with \"$feature\" alone: $count crates in the dependency tree"
done

# The command line's lean install, as its README gives it: every backend but etcd,
# without protoc.
(cd "$root" && PROTOC=/nonexistent/protoc cargo build --offline --quiet --locked \
  -p distlock-cli --no-default-features --features redis,postgres,zookeeper)
"$CARGO_TARGET_DIR/debug/distlock" --version
echo "check-outside: distlock-cli without etcd builds without protoc"
