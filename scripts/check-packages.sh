#!/usr/bin/env bash
# Checks that every crate meant for a registry carries what one needs: description,
# keywords, categories, licence, a readme, both licence texts in the
# package, and docs.rs metadata that builds every feature.
set -euo pipefail
cd "$(dirname "$0")/.."

published=(distlock-core distlock-redis distlock-postgres distlock-etcd distlock-zookeeper distlock-conformance distlock distlock-cli)
for crate in "${published[@]}"; do
  files=$(cargo package --list --allow-dirty --offline -p "$crate")
  for file in README.md LICENSE-MIT LICENSE-APACHE; do
    grep -qx "$file" <<<"$files" || { echo "check-packages: $crate's package lacks $file" >&2; exit 1; }
  done
done
cargo metadata --no-deps --format-version 1 --offline | python3 -c '
import json, sys
wanted = sys.argv[1:]
packages = {p["name"]: p for p in json.load(sys.stdin)["packages"]}
bad = []
for name in wanted:
    p = packages[name]
    for field in ("description", "license", "readme"):
        if not p.get(field):
            bad.append(f"{name}: no {field}")
    for field in ("keywords", "categories"):
        if not p.get(field):
            bad.append(f"{name}: no {field}")
    if len(p.get("keywords") or []) > 5:
        bad.append(f"{name}: more than 5 keywords")
    docs = ((p.get("metadata") or {}).get("docs") or {}).get("rs") or {}
    if not docs.get("all-features"):
        bad.append(f"{name}: docs.rs metadata does not build every feature")
if bad:
    sys.exit("check-packages: " + "; ".join(bad))
print(f"check-packages: {len(wanted)} crates carry what a registry needs")
' "${published[@]}"
