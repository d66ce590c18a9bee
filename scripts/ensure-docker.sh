#!/usr/bin/env bash
# Makes a Docker engine available (installs Debian's docker.io + debootstrap when missing, starts
# dockerd in the background) and then builds the SWE task images. Idempotent; fast when running.
# Env: SWERL_DOCKER_LOG (dockerd log file), SWERL_SKIP_IMAGES=1 (engine only), SWERL_TASKS (tasks file; default: the
# repository's own, data/swe/build/tasks.jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."
log="${SWERL_DOCKER_LOG:-/var/log/swerl-dockerd.log}"

tag=ensure-docker; . scripts/lib.sh

if ! docker info >/dev/null 2>&1; then
  missing=()
  command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
  command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
  apt_install "${missing[@]}"
  if ! pgrep -x dockerd >/dev/null 2>&1; then
    say "starting dockerd (log: $log)"
    # Sandboxes run with NetworkMode none, so the engine needs no NAT rules; inside this machine
    # iptables may not be usable, hence --iptables=false and no masquerading.
    # setsid: the engine must outlive the shell (and process group) that started it.
    setsid nohup dockerd --iptables=false --ip-masq=false --ip6tables=false \
      --storage-driver="${SWERL_DOCKER_STORAGE_DRIVER:-overlay2}" >"$log" 2>&1 < /dev/null &
  fi
  for i in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  if ! docker info >/dev/null 2>&1; then
    say "dockerd did not come up in 60 s; last log lines:"; tail -n 30 "$log" >&2 || true
    exit 1
  fi
  say "docker engine up"
fi

# debootstrap is needed for the base image even when an engine was already running; btrfs-progs because the fault
# tests run a private engine whose data root is a btrfs loop file (real disk quotas). Best effort without root.
more=()
command -v debootstrap >/dev/null 2>&1 || more+=(debootstrap)
command -v mkfs.btrfs >/dev/null 2>&1 || more+=(btrfs-progs)
[ "$(id -u)" != 0 ] || apt_install "${more[@]}"

if [ "${SWERL_SKIP_IMAGES:-0}" != 1 ]; then
  # without SWERL_TASKS: the repository's own tasks (data/swe/, built by scripts/build-swe-tasks.ts)
  node scripts/swerl.mjs images build ${SWERL_TASKS:+--tasks "$SWERL_TASKS"} >&2
fi
