#!/usr/bin/env bash
# Installs Debian packages, waiting for another apt that holds the lock (the machine's
# own updates, or another script of this project started beside this one) instead of
# failing at once: `bash scripts/apt-install.sh PACKAGE...`.
set -euo pipefail

for attempt in 1 2 3 4 5; do
  if apt-get -o DPkg::Lock::Timeout=120 update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y -qq "$@" >/dev/null; then
    exit 0
  fi
  echo "apt-install: attempt $attempt of 5 failed (another apt holding the lock?); trying again" >&2
  sleep 10
done
echo "apt-install: could not install $*" >&2
exit 1
