#!/usr/bin/env bash
# Makes a Docker engine available (installs Debian's docker.io + debootstrap when missing, starts
# dockerd in the background) and then builds the SWE task images. Idempotent; fast when running.
# Env: SWERL_DOCKER_LOG (dockerd log file), SWERL_SKIP_IMAGES=1 (engine only), SWERL_TASKS (tasks file; default: the
# repository's own, data/swe/build/tasks.jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."
log="${SWERL_DOCKER_LOG:-/var/log/swerl-dockerd.log}"

say() { echo "[ensure-docker] $*" >&2; }

if ! docker info >/dev/null 2>&1; then
  missing=()
  command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
  command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
  if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then say "need root to install ${missing[*]}"; exit 1; fi
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  fi
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

# debootstrap is needed for the base image even when an engine was already running.
if ! command -v debootstrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends debootstrap >&2
  fi
fi

# btrfs-progs: the fault tests run a private engine whose data root is a btrfs loop file (real disk quotas).
if ! command -v mkfs.btrfs >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends btrfs-progs >&2
fi

if [ "${SWERL_SKIP_IMAGES:-0}" != 1 ]; then
  # without SWERL_TASKS: the repository's own tasks (data/swe/, built by scripts/build-swe-tasks.ts)
  node scripts/swerl.mjs images build ${SWERL_TASKS:+--tasks "$SWERL_TASKS"} >&2
fi
