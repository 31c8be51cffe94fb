#!/usr/bin/env bash
# Installs the Debian packages baton's tests need: the real servers they run
# against (PostgreSQL, Redis, ZooKeeper, etcd 3.4 server and etcdctl) and
# the fault tools (faketime, iproute2, procps). Idempotent: it installs only what is missing and does
# nothing when everything is there. Needs root, or sudo that asks no
# password (sudo -n), to install.
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

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: apt-get not found: install these Debian packages by hand: ${missing[*]}" >&2
  exit 1
fi

# As root, or through sudo -n: a script run by make or CI has no one to
# type a password, and a sudo that waits for one hangs it.
sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "install-deps: need root to install: ${missing[*]}" >&2
    exit 1
  fi
  if ! sudo -n true 2>/dev/null; then
    echo "install-deps: sudo needs a password to install ${missing[*]}: run this script as root, or run 'sudo -v' first and then this script" >&2
    exit 1
  fi
  sudo=(sudo -n)
fi

# as_root runs a command as root, with apt's settings in its environment
# (sudo resets the environment).
as_root() {
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive "$@"
}

echo "install-deps: installing ${missing[*]}"
# Package scripts must not start system-wide services: the tests start their
# own servers on free ports in temp dirs.
policy=/usr/sbin/policy-rc.d
made_policy=0
cleanup() {
  if [ "$made_policy" = 1 ]; then
    as_root rm -f "$policy"
  fi
}
trap cleanup EXIT
if [ ! -e "$policy" ]; then
  made_policy=1
  printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
  as_root chmod +x "$policy"
fi

# Wait up to 5 minutes for another apt or dpkg (unattended-upgrades, a
# cloud image's first boot) to release its lock, rather than fail at once;
# keep the configuration files already there, without asking.
apt=(apt-get -o DPkg::Lock::Timeout=300)
as_root "${apt[@]}" update -qq
as_root "${apt[@]}" install -y -qq --no-install-recommends \
  -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
  "${missing[@]}" >/dev/null
echo "install-deps: done"
