#!/usr/bin/env bash
# Installs the Debian packages baton's tests need: the real servers they run
# against (PostgreSQL, Redis, ZooKeeper, etcd 3.4 server and etcdctl) and
# the fault tools (faketime, iproute2, procps). Idempotent: it installs only what is missing and does
# nothing when everything is there. Needs root (or sudo) to install.
set -euo pipefail

packages=(postgresql redis-server zookeeper etcd-server etcd-client faketime iproute2 procps)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all present (${packages[*]})"
  exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "install-deps: need root to install: ${missing[*]}" >&2
    exit 1
  fi
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Package scripts must not start system-wide services: the tests start their
# own servers on free ports in temp dirs.
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
  "${sudo[@]}" chmod +x "$policy"
  made_policy=1
fi
trap '[ "$made_policy" = 1 ] && "${sudo[@]}" rm -f "$policy"' EXIT

"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
