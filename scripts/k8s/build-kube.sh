#!/usr/bin/env bash
# Builds scripts/k8s/kube/main.go, the multi-call binary of swerl's local cluster (kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet, kubectl), against k8s.io/kubernetes from the Go
# module proxy. Usage: build-kube.sh VERSION OUT_DIR. Writes OUT_DIR/kube (plus the go.mod/go.sum it
# was built from) and nothing else; the caller caches OUT_DIR by a hash of this file, main.go, VERSION
# and the Go version.
#
# `go install k8s.io/kubernetes/cmd/...@VERSION` cannot work: k8s.io/kubernetes requires its staging
# modules (k8s.io/api, k8s.io/client-go, ...) at v0.0.0 and replaces them with ./staging/src/...,
# and replaces in a dependency are ignored. So our own main module replaces each of them with its
# published twin (v1.34.4 -> v0.34.4), generated from kubernetes' go.mod in the module cache.
set -euo pipefail
version="$1" out="$2"
here="$(cd "$(dirname "$0")" && pwd)"
case "$version" in v1.*.*) ;; *) echo "[build-kube] version must look like v1.34.4, got '$version'" >&2; exit 2 ;; esac
minor="${version#v1.}"; minor="${minor%%.*}"
staging="v0.${version#v1.}"
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}" GOFLAGS="${GOFLAGS:-} -mod=mod"

work="$(mktemp -d "${out%/}.build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cd "$work"
cp "$here/kube/main.go" .

json="$(go mod download -json "k8s.io/kubernetes@$version")"
kdir="$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
info="$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Info": "\(.*\)",\{0,1\}$/\1/p')"
[ -f "$kdir/go.mod" ] || { echo "[build-kube] k8s.io/kubernetes@$version has no go.mod in the module cache" >&2; exit 1; }
# The release's own date, so the same inputs stamp the same binary.
build_date="$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$info")"

{
  echo "module swerl.local/kube"
  echo
  echo "go 1.24.0"
  echo
  echo "godebug default=go1.24"
  echo
  echo "require k8s.io/kubernetes $version"
  echo
  echo "replace ("
  sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\) => \./staging/src/k8s\.io/.*#\t\1 => \1 '"$staging"'#p' "$kdir/go.mod"
  echo ")"
} > go.mod
n="$(grep -c "=> k8s.io/.* $staging" go.mod || true)"
[ "$n" -ge 20 ] || { echo "[build-kube] found only $n staging modules in $kdir/go.mod" >&2; exit 1; }
echo "[build-kube] $version with $n staging modules at $staging: go mod tidy" >&2
go mod tidy >&2

ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done
echo "[build-kube] go build (cold: about 25 min on 2 cores)" >&2
start=$SECONDS
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o kube . >&2
echo "[build-kube] built in $((SECONDS - start)) s" >&2
./kube kube-apiserver --version >&2

mkdir -p "$out"
cp go.mod go.sum "$out/"
mv kube "$out/kube.tmp" && mv "$out/kube.tmp" "$out/kube"
