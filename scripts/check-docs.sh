#!/usr/bin/env bash
# Builds every crate's docs as docs.rs does (every feature, `--cfg docsrs`, which turns
# on rustdoc's `doc_cfg`), failing on any warning or broken link, then checks that the
# pages say which feature each gated item needs. docs.rs builds with a nightly
# toolchain; this stable one takes the same unstable flag under RUSTC_BOOTSTRAP, for
# the docs alone.
set -euo pipefail
cd "$(dirname "$0")/.."

RUSTC_BOOTSTRAP=1 RUSTDOCFLAGS="--cfg docsrs -D warnings" \
  cargo doc --workspace --all-features --no-deps --locked "$@"

doc="${CARGO_TARGET_DIR:-target}/doc"
# page: the feature its gated item must name.
checks=(
  "distlock/redis/index.html:redis"
  "distlock/postgres/index.html:postgres"
  "distlock/mysql/index.html:mysql"
  "distlock/etcd/index.html:etcd"
  "distlock/zookeeper/index.html:zookeeper"
  "distlock/tower/index.html:tower"
  "distlock_redis/struct.RedisBackend.html:cluster"
  "distlock_redis/struct.RedisBackend.html:sentinel"
)
for check in "${checks[@]}"; do
  page="${check%%:*}" feature="${check##*:}"
  if ! grep -q "Available on <strong>crate feature <code>$feature</code></strong> only" "$doc/$page"; then
    echo "check-docs: $page does not say that it needs the $feature feature" >&2
    exit 1
  fi
done
echo "check-docs: docs built as docs.rs builds them; ${#checks[@]} gated items name their feature"

# The guides' pages (distlock::guides, made from distlock/guides/*.md): every link on
# them, and every link the crates.io page makes to them, resolves in this build.
python3 scripts/check-doc-links.py "$doc" distlock/README.md
