#!/usr/bin/env bash
# Makes what `swerl cluster up` runs available: Debian's etcd-server and containernetworking-plugins,
# containerd and runc (they come with docker.io), the multi-call Kubernetes binary
# (scripts/k8s/build-kube.sh) and the pause image (scripts/k8s/pause.c). The binary and the image are
# cached outside the clone, under ${XDG_CACHE_HOME:-$HOME/.cache}/swerl/k8s/, keyed by the Kubernetes
# version and a hash of their build inputs, so a fresh clone on a warm machine costs seconds. The cold
# build of the binary takes about 25 min on 2 cores (run at nice 19).
# Prints, on stdout, `kube=PATH`, `pause=PATH` (a `docker save` tar), `pause_image=NAME` and `version=V`.
# With --background (setup.sh --test): the packages now, and a cold build of the binary detached, so the other
# test lanes run meanwhile; `swerl cluster up` (this script again) waits for it on the build's lock.
# Env: SWERL_K8S_VERSION (default v1.34.4; stay on 1.34/1.35 with Debian's containerd 1.6).
set -euo pipefail
background=0
[ "${1:-}" = --background ] && background=1
cd "$(dirname "$0")/.."
version="${SWERL_K8S_VERSION:-v1.34.4}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/swerl/k8s"
pause_image="localhost/swerl-pause:1"
tag=ensure-k8s; . scripts/lib.sh

# --- Debian packages ---------------------------------------------------------------------------
missing=()
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
[ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/loopback ] && [ -x /usr/lib/cni/host-local ] || missing+=(containernetworking-plugins)
{ command -v containerd >/dev/null 2>&1 && command -v runc >/dev/null 2>&1 && command -v ctr >/dev/null 2>&1; } || missing+=(docker.io)
command -v gcc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
# Installing etcd-server starts nothing here (no systemd); swerl cluster up runs its own etcd.
apt_install "${missing[@]}"
if ! command -v go >/dev/null 2>&1; then
  for g in /usr/local/go/bin/go "$HOME/go/bin/go"; do [ -x "$g" ] && { PATH="$(dirname "$g"):$PATH"; break; }; done
fi
command -v go >/dev/null 2>&1 || { say "need Go >= 1.24 (for example /usr/local/go) to build Kubernetes"; exit 1; }

mkdir -p "$cache"

# --- the Kubernetes binary ---------------------------------------------------------------------
goversion="$(go env GOVERSION)"
key="$version-$( { cat scripts/k8s/build-kube.sh scripts/k8s/kube/main.go; echo "$version $goversion"; } | short_hash)"
kube="$cache/$key/kube"
if [ ! -x "$kube" ] && [ "$background" = 1 ]; then
  say "building Kubernetes $version in the background (cold: about 25 min on 2 cores, at nice 19; log: $cache/$key.log)"
  setsid nohup bash scripts/ensure-k8s.sh >"$cache/$key.background.log" 2>&1 </dev/null &
  exit 0
fi
if [ ! -x "$kube" ]; then
  exec 9>"$cache/$key.lock"
  if ! flock -n 9; then say "another build of $key is running; waiting"; flock 9; fi
  if [ ! -x "$kube" ]; then
    say "building Kubernetes $version into $cache/$key (cold: about 25 min on 2 cores, at nice 19; log: $cache/$key.log)"
    if ! nice -n 19 bash scripts/k8s/build-kube.sh "$version" "$cache/$key" >"$cache/$key.log" 2>&1; then
      say "the build failed; last lines of $cache/$key.log:"; tail -n 40 "$cache/$key.log" >&2; exit 1
    fi
    tail -n 3 "$cache/$key.log" >&2
  fi
  exec 9>&-
fi

# --- the pause image ---------------------------------------------------------------------------
pause_tar="$cache/pause-$(short_hash < scripts/k8s/pause.c)-1.tar"
if [ ! -s "$pause_tar" ]; then
  docker info >/dev/null 2>&1 || { say "the pause image is imported through Docker: run scripts/ensure-docker.sh first"; exit 1; }
  say "building the pause image $pause_image"
  tmp="$(mktemp -d)"
  gcc -Os -static -o "$tmp/pause" scripts/k8s/pause.c
  strip "$tmp/pause" 2>/dev/null || true
  tar -C "$tmp" --owner=0 --group=0 --numeric-owner -cf "$tmp/rootfs.tar" pause
  docker import -c 'ENTRYPOINT ["/pause"]' "$tmp/rootfs.tar" "$pause_image" >/dev/null
  docker save -o "$tmp/pause.tar" "$pause_image"
  docker rmi "$pause_image" >/dev/null 2>&1 || true
  mv "$tmp/pause.tar" "$pause_tar"
  rm -rf "$tmp"
fi

echo "kube=$kube"
echo "pause=$pause_tar"
echo "pause_image=$pause_image"
echo "version=$version"
