#!/usr/bin/env bash
# Makes the server images the tests need available: the official images where a
# registry can be reached, otherwise the local image built from Debian's packages.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then
  echo "prepare-servers: the Docker engine is not reachable; the container tests need it." >&2
  echo "prepare-servers: start Docker, or see README.md for pointing the tests at running servers." >&2
  exit 1
fi

official=(redis:7.2.5 postgres:16.4 quay.io/coreos/etcd:v3.5.15)
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
fi
