#!/usr/bin/env bash
# Checks that every crate meant for a registry carries what one needs: description,
# keywords, categories, licence, a readme that links to the facade, both licence
# texts in the package, docs.rs metadata that builds every feature with `--cfg
# docsrs`, the library crates' docs.rs address, the project's home (the facade's
# docs), and a minimum Rust version that is the one CI builds with.
set -euo pipefail
cd "$(dirname "$0")/.."

# The minimum Rust version the manifests claim is the one this run builds and tests
# with: no older toolchain can be fetched here, so no older one is claimed.
claimed=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
running=$(rustc --version | sed -E 's/^rustc ([0-9]+\.[0-9]+).*/\1/')
if [ "$claimed" != "$running" ]; then
  echo "check-packages: the workspace claims rust-version $claimed but CI builds with $running; claim only what CI checks" >&2
  exit 1
fi
echo "check-packages: rust-version $claimed is the toolchain these tests run on"

published=(distlock-core distlock-redis distlock-sql distlock-postgres distlock-mysql distlock-etcd distlock-zookeeper distlock-conformance distlock-sim distlock distlock-cli)
for crate in "${published[@]}"; do
  files=$(cargo package --list --allow-dirty --offline -p "$crate")
  for file in README.md LICENSE-MIT LICENSE-APACHE; do
    grep -qx "$file" <<<"$files" || { echo "check-packages: $crate's package lacks $file" >&2; exit 1; }
  done
  # Each part's README leads a reader who found it on crates.io to the facade.
  if [ "$crate" != distlock ] && ! grep -q '](https://docs.rs/distlock)' "$crate/README.md"; then
    echo "check-packages: $crate's README does not link to the facade (https://docs.rs/distlock)" >&2
    exit 1
  fi
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
    if p.get("homepage") != "https://docs.rs/distlock":
        bad.append(f"{name}: homepage is not https://docs.rs/distlock")
    if name != "distlock-cli" and p.get("documentation") != f"https://docs.rs/{name}":
        bad.append(f"{name}: documentation is not https://docs.rs/{name}")
    if docs.get("rustdoc-args") != ["--cfg", "docsrs"]:
        bad.append(f"{name}: docs.rs metadata does not pass --cfg docsrs")
if bad:
    sys.exit("check-packages: " + "; ".join(bad))
print(f"check-packages: {len(wanted)} crates carry what a registry needs")
' "${published[@]}"

# The README's table of driver versions says what the manifests take.
python3 - <<'PY'
import re, sys
manifest = open("Cargo.toml").read()
readme = open("README.md").read()
for driver in ("redis", "sqlx", "etcd-client", "zookeeper-client"):
    taken = re.search(rf'^{driver} = \{{ version = "([0-9.]+)"', manifest, re.M).group(1)
    row = re.search(rf'^\| [^|]+ \| `{driver}` \| [0-9.x]+, from ([0-9.]+) \|$', readme, re.M)
    if not row or row.group(1) != taken:
        sys.exit(f"check-packages: README's versions table does not say {driver} {taken}")
print("check-packages: the README's driver versions are the manifests'")
PY
