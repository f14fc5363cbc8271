#!/usr/bin/env bash
# Build the local control plane binaries (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler) from Go modules into a cache
# folder, so that a second run is instant. The cache is keyed by a hash of
# go.mod, go.sum and this script: change any of them and it rebuilds.
#
# Usage: hack/controlplane/build.sh        prints the bin directory on stdout
# Env:   LEASEHOLD_CACHE_DIR  cache root (default: ~/.cache/leasehold)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${LEASEHOLD_CACHE_DIR:-${HOME}/.cache/leasehold}"
k8s_version="v1.35.4"
key="$(cat "$here/go.mod" "$here/go.sum" "$here/build.sh" "$here/cmd/etcd/main.go" | sha256sum | cut -c1-12)"
bin="$cache/controlplane/$k8s_version-$key/bin"

if [[ -x "$bin/kube-apiserver" && -x "$bin/kube-controller-manager" && -x "$bin/kube-scheduler" && -x "$bin/etcd" ]]; then
  echo "$bin"
  exit 0
fi

export GOTOOLCHAIN=local CGO_ENABLED=0
export GOFLAGS="-mod=mod -buildvcs=false"
# Keep Go's own caches next to the binaries so a CI machine can keep one folder.
export GOCACHE="${GOCACHE_OVERRIDE:-$cache/go-build}"
export GOMODCACHE="${GOMODCACHE_OVERRIDE:-$cache/go-mod}"

pkg=k8s.io/component-base/version
ldflags="-s -w \
  -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=35 \
  -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z \
  -X k8s.io/client-go/pkg/version.gitVersion=$k8s_version \
  -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=35"

tmp="$bin.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
start=$(date +%s)
echo "building control plane $k8s_version into $bin (first build takes a while)" >&2
cd "$here"
go build -trimpath -ldflags "$ldflags" -o "$tmp/" \
  ./cmd/etcd \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler >&2
rm -rf "$bin"
mv "$tmp" "$bin"
echo "built control plane in $(( $(date +%s) - start ))s" >&2
echo "$bin"
