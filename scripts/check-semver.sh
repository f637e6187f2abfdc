#!/usr/bin/env bash
# The semver check: every published library's public API and features against
# 0.1.0's. A change that would break code built against 0.1.0 fails it (an item
# removed or changed, a field or variant added where users match or build, a trait
# method users must now write, a feature removed or enabling less); additions pass.
#
#   bash scripts/check-semver.sh             # install the tool if missing, then check
#   bash scripts/check-semver.sh --install   # install the tool only
#
# The API is compared by cargo-semver-checks (installed here at the version below
# when missing) on rustdoc's JSON of each crate, built as the docs step builds its
# pages (every feature, `--cfg docsrs`): once from this tree and once from the
# baseline's source, in this tree's target directory, so that their dependencies
# compile once (and not at all after the docs step). The features are compared from
# `cargo metadata`: cargo-semver-checks does not read manifests when given rustdoc's
# JSON.
set -euo pipefail
cd "$(dirname "$0")/.."

tool_version=0.51.0
# The baseline. 0.1.0 is not on crates.io yet, so its API is this commit's: the tree
# whose packages are 0.1.0. Once 0.1.0 is published, the baseline is the registry's.
baseline_rev=4fd17c3fa97fe7027092f9cc291d47494427f861

installed() { cargo semver-checks --version 2>/dev/null | grep -qx "cargo-semver-checks $tool_version"; }
if ! installed; then
  echo "check-semver: installing cargo-semver-checks $tool_version"
  # Built unoptimised: its own release profile (fat LTO, one codegen unit) takes about
  # three times as long to build, and the checks take about a second a crate either way.
  CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 CARGO_PROFILE_RELEASE_OPT_LEVEL=0 \
    cargo install --locked --quiet --version "$tool_version" cargo-semver-checks
  echo "check-semver: cargo-semver-checks $tool_version installed in ${SECONDS}s"
fi
[ "${1:-}" = --install ] && exit 0

if ! git cat-file -e "$baseline_rev^{commit}" 2>/dev/null; then
  echo "check-semver: the baseline commit $baseline_rev is not in this clone (a shallow clone?): fetch the history, or run this where it is" >&2
  exit 1
fi

target="$(cargo metadata --format-version 1 --no-deps --locked | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/baseline/src" "$work/baseline/json" "$work/current/json"
git archive "$baseline_rev" | tar -x -C "$work/baseline/src"
# The baseline's dependencies compiled with this tree's flags, so the docs step's
# artifacts serve both.
cp -r .cargo "$work/baseline/src/"

# The published library crates of a tree, and their features, as JSON:
# {"crate": {"feature": ["what it enables", ...]}}.
published() {
  (cd "$1" && cargo metadata --format-version 1 --no-deps --locked) | python3 -c '
import json, sys
meta = json.load(sys.stdin)
print(json.dumps({p["name"]: p["features"] for p in meta["packages"]
                  if p["publish"] != [] and any("lib" in t["kind"] for t in p["targets"])}))'
}

# Every crate's rustdoc JSON of the tree at $1, copied to $2.
#
# Both trees build into one target directory, and cargo names a workspace crate's
# artifacts by its path within its workspace, the same in both: it then tells them
# apart only by the sources' times. So the tree's sources are made newer than
# anything built before, and each tree's crates are built from its own sources
# (otherwise this tree's crates were documented against the baseline's, just built,
# whenever a crate uses another's newer API).
rustdoc_json() {
  find "$1" -name target -prune -o -type f \( -name '*.rs' -o -name Cargo.toml \) -print0 |
    xargs -0 touch
  rm -f "$target"/doc/*.json
  (cd "$1" && CARGO_TARGET_DIR="$target" RUSTC_BOOTSTRAP=1 \
    RUSTDOCFLAGS="--cfg docsrs -Z unstable-options --output-format json" \
    cargo doc --workspace --all-features --no-deps --locked --quiet)
  cp "$target"/doc/*.json "$2/"
}

published "$work/baseline/src" >"$work/baseline/crates.json"
published . >"$work/current/crates.json"
rustdoc_json "$work/baseline/src" "$work/baseline/json"
rustdoc_json . "$work/current/json"

failed=0
# The features: each of 0.1.0's is still there and enables at least what it did.
python3 - "$work/baseline/crates.json" "$work/current/crates.json" <<'EOF' || failed=1
import json, sys
baseline, current = (json.load(open(path)) for path in sys.argv[1:])
broken = []
for crate, features in sorted(baseline.items()):
    if crate not in current:
        broken.append(f"{crate}: the crate is no longer published")
        continue
    for feature, enables in sorted(features.items()):
        if feature not in current[crate]:
            broken.append(f"{crate}: feature `{feature}` was removed")
        elif lost := sorted(set(enables) - set(current[crate][feature])):
            broken.append(f"{crate}: feature `{feature}` no longer enables {', '.join(lost)}")
for line in broken:
    print(f"check-semver: {line}", file=sys.stderr)
sys.exit(1 if broken else 0)
EOF

# The API, crate by crate.
for crate in $(python3 -c 'import json, sys; print(" ".join(sorted(json.load(open(sys.argv[1])))))' "$work/baseline/crates.json"); do
  json="${crate//-/_}.json"
  [ -f "$work/current/json/$json" ] || continue # reported above
  echo "check-semver: $crate"
  if ! cargo semver-checks --color never \
    --baseline-rustdoc "$work/baseline/json/$json" --current-rustdoc "$work/current/json/$json"; then
    failed=1
  fi
done

if [ "$failed" != 0 ]; then
  echo "check-semver: a change above breaks code built against 0.1.0 (baseline ${baseline_rev:0:10}); see CONTRIBUTING.md, \"Growing the API without breaking it\"" >&2
  exit 1
fi
echo "check-semver: every published crate's API and features are compatible with 0.1.0 (baseline ${baseline_rev:0:10})"
