#!/usr/bin/env bash
# Builds a crate outside the workspace that depends on distlock as a user adding it
# would: on the packaged crates (target/package, made by `cargo package --workspace`,
# patched in as a registry would serve them) where they have been made, else on the
# workspace's folders. First with the `redis` feature alone, with no protoc to be
# found (only the etcd backend needs it); then with every backend, run. Versions are
# pinned by a copy of the workspace's lock file.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/src"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)
patches=""
if [ -f "$root/target/package/distlock-$version.crate" ]; then
  from="the packaged crates"
  packages="$dir/packages"
  mkdir -p "$packages"
  for crate in distlock-core distlock-sql distlock-redis distlock-postgres distlock-mysql distlock-etcd distlock-zookeeper distlock; do
    tar xzf "$root/target/package/$crate-$version.crate" -C "$packages"
    patches+="$crate = { path = \"$packages/$crate-$version\" }"$'\n'
  done
  distlock_dep="distlock = { version = \"$version\", features = [\"redis\"] }"
else
  from="the workspace's folders"
  distlock_dep="distlock = { path = \"$root/distlock\", features = [\"redis\"] }"
fi
cat > "$dir/Cargo.toml" <<EOF
[package]
name = "distlock-outside"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
$distlock_dep
tokio = { version = "1", features = ["rt", "macros"] }

[patch.crates-io]
$patches
[workspace]

$(sed -n '/^\[profile\./,$p' "$root/Cargo.toml")
EOF
echo "check-outside: a user's crate on $from"
cat > "$dir/src/main.rs" <<'EOF'
//! A user's crate: the Redis backend and the client, nothing else.
use std::sync::Arc;

fn main() {
    let client = distlock::LockClient::new(Arc::new(distlock::MemoryBackend::new()));
    let _redis = distlock::redis::RedisBackend::connect;
    // The schemes this build connects to: none that needs a feature it lacks.
    let schemes = distlock::schemes();
    println!("{schemes:?}");
    assert_eq!(schemes, ["memory", "redis", "redlock"], "{schemes:?}");
    assert_eq!(distlock::Connector::new().schemes(), schemes);
    drop(client);
    // Without the redis-cluster feature, a cluster URL is a configuration error that
    // names the feature, before anything is sent.
    let cluster = distlock::redis::RedisConfig::from_url("redis-cluster://a:7000,b:7001")
        .expect_err("a cluster without the redis-cluster feature");
    assert_eq!(cluster.kind(), distlock::ErrorKind::Configuration);
    assert!(cluster.to_string().contains("`redis-cluster` feature"), "{cluster}");
    println!("a cluster URL without the feature: {cluster}");
}
EOF
cp "$root/Cargo.lock" "$dir/Cargo.lock"
# The workspace's target directory and build settings (above): the dependencies its
# own builds made are built once.
export CARGO_TARGET_DIR="$root/target"
PROTOC=/nonexistent/protoc cargo build --offline --quiet --manifest-path "$dir/Cargo.toml"
if cargo tree --offline --manifest-path "$dir/Cargo.toml" -e normal -i etcd-client >/dev/null 2>&1; then
  echo "check-outside: etcd-client is in the tree of a crate that asked for redis only" >&2
  exit 1
fi
"$CARGO_TARGET_DIR/debug/distlock-outside"
echo "check-outside: a crate with distlock's redis feature alone builds without protoc"

# How many crates a user's crate pulls in with each backend alone (its normal
# dependency tree, itself and distlock's own crates included), beside a crate that
# depends on that backend's driver alone, with the workspace's own line for it (the
# features distlock uses): the difference is what distlock adds.
count_tree() {
  cargo tree --offline --manifest-path "$1/Cargo.toml" -e normal --prefix none 2>/dev/null \
    | sed 's/ (\*)$//' | sort -u | wc -l
}
bare="$(mktemp -d)"
trap 'rm -rf "$dir" "$bare"' EXIT
mkdir -p "$bare/src"
echo 'fn main() {}' > "$bare/src/main.rs"
for pair in redis:redis postgres:sqlx mysql:sqlx etcd:etcd-client zookeeper:zookeeper-client; do
  feature="${pair%%:*}"
  driver="${pair#*:}"
  sed -i "s/features = \[\"[a-z]*\"\]/features = [\"$feature\"]/" "$dir/Cargo.toml"
  count=$(count_tree "$dir")
  {
    printf '[package]\nname = "driver-alone"\nversion = "0.0.0"\nedition = "2021"\npublish = false\n\n[dependencies]\n'
    # The driver with the features the backend turns on (each SQL backend adds its
    # own database to sqlx's line in the workspace, which names none).
    case "$feature" in
      postgres | mysql)
        grep "^$driver = " "$root/Cargo.toml" | sed "s/\"runtime-tokio\"/\"runtime-tokio\", \"$feature\"/" ;;
      *) grep "^$driver = " "$root/Cargo.toml" ;;
    esac
    printf '\n[workspace]\n'
  } > "$bare/Cargo.toml"
  cp "$root/Cargo.lock" "$bare/Cargo.lock"
  alone=$(count_tree "$bare")
  echo "check-outside: distlock with \"$feature\" alone: $count crates in the dependency tree ($driver alone: $alone)"
  # The ceilings: 75 with redis alone and 95 with etcd alone; on every backend, at
  # most 12 crates over its driver's own tree. (sqlx's tree alone is over 110, so
  # PostgreSQL's ceiling is that margin.)
  ceiling=$((alone + 12))
  case "$feature" in
    redis) ceiling=$((ceiling < 75 ? ceiling : 75)) ;;
    etcd) ceiling=$((ceiling < 95 ? ceiling : 95)) ;;
  esac
  if [ "$count" -gt "$ceiling" ]; then
    echo "check-outside: distlock with \"$feature\" alone pulls $count crates, over its ceiling of $ceiling" >&2
    exit 1
  fi
done

# Every backend, built and run: each scheme connects by URL, and each backend refuses
# an option it does not know before it sends anything (no server runs here).
sed -i 's/features = \["[a-z]*"\]/features = ["redis", "postgres", "mysql", "etcd", "zookeeper"]/' "$dir/Cargo.toml"
cat > "$dir/src/main.rs" <<'EOF'
//! A user's crate with every backend.
#[tokio::main(flavor = "current_thread")]
async fn main() {
    let schemes = distlock::schemes();
    for scheme in ["redis", "postgres", "mysql", "mariadb", "etcd", "zookeeper"] {
        assert!(schemes.contains(&scheme), "{scheme} not in {schemes:?}");
        // A path each backend takes: Redis's database number, etcd none.
        let path = if scheme == "etcd" { "" } else { "/0" };
        let url = format!("{scheme}://127.0.0.1:1{path}?no_such_option=1");
        let error = match distlock::connect(&url).await {
            Ok(_) => panic!("{url} connected"),
            Err(error) => error,
        };
        assert_eq!(error.kind(), distlock::ErrorKind::Configuration, "{url}: {error}");
        assert!(error.to_string().contains("no_such_option"), "{url}: {error}");
    }
    println!("every backend's scheme: {schemes:?}");
}
EOF
cargo build --offline --quiet --manifest-path "$dir/Cargo.toml"
"$CARGO_TARGET_DIR/debug/distlock-outside"
echo "check-outside: a crate with every backend builds and runs on $from"

# The command line's lean install, as its README gives it: every backend but etcd,
# without protoc.
# Its own target directory, so that the workspace's full build of the command keeps
# its place.
export CARGO_TARGET_DIR="$root/target/outside"
(cd "$root" && PROTOC=/nonexistent/protoc cargo build --offline --quiet --locked \
  -p distlock-cli --no-default-features --features redis,postgres,mysql,zookeeper)
"$CARGO_TARGET_DIR/debug/distlock" --version
echo "check-outside: distlock-cli without etcd builds without protoc"
