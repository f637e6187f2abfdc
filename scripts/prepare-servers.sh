#!/usr/bin/env bash
# Makes the server images the tests need available: the official images where a
# registry can be reached, otherwise the local image built from Debian's packages.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then
  echo "prepare-servers: the Docker engine is not reachable; the container tests need it." >&2
  echo "prepare-servers: start Docker, or see CONTRIBUTING.md for pointing the tests at running servers." >&2
  exit 1
fi

# The pinned images, from the one place they are written.
mapfile -t official < <(awk '!/^#/ && NF == 2 && $1 != "local" && $2 != "local" { print $2 }' distlock-testservers/images.txt)
[[ ${#official[@]} -gt 0 ]] || { echo "prepare-servers: no images in distlock-testservers/images.txt" >&2; exit 1; }
# A server with no official image (PgBouncer) always needs the local image.
local_only=$(awk '!/^#/ && NF == 2 && $1 != "local" && $2 == "local" { print $1 }' distlock-testservers/images.txt)
missing=0
for image in "${official[@]}"; do
  if docker image inspect "$image" >/dev/null 2>&1; then
    continue
  fi
  if timeout 300 docker pull -q "$image" >/dev/null 2>&1; then
    echo "prepare-servers: pulled $image"
  else
    missing=1
  fi
done

if [[ $missing == 1 ]]; then
  echo "prepare-servers: official images cannot be pulled here; using the local image"
  bash scripts/build-images.sh
elif [[ -n $local_only ]]; then
  echo "prepare-servers: the local image serves" $local_only
  bash scripts/build-images.sh
fi
