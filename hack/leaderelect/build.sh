#!/usr/bin/env bash
# Build leasehold-leaderelect (main.go: one client-go leader election candidate)
# into a cache folder, keyed by a hash of its sources, so a second run is
# instant. Modules come from the Go module proxy.
#
# Usage: hack/leaderelect/build.sh        prints the binary's path on stdout
# Env:   LEASEHOLD_CACHE_DIR  cache root (default: ~/.cache/leasehold)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${LEASEHOLD_CACHE_DIR:-${HOME}/.cache/leasehold}"
key="$(cat "$here/go.mod" "$here/go.sum" "$here/main.go" "$here/build.sh" | sha256sum | cut -c1-12)"
bin="$cache/leaderelect/$key/leasehold-leaderelect"

if [[ -x "$bin" ]]; then
  echo "$bin"
  exit 0
fi

export GOTOOLCHAIN=local CGO_ENABLED=0
export GOFLAGS="-mod=mod -buildvcs=false"
export GOCACHE="${GOCACHE_OVERRIDE:-$cache/go-build}"
export GOMODCACHE="${GOMODCACHE_OVERRIDE:-$cache/go-mod}"

mkdir -p "$(dirname "$bin")"
cd "$here"
# Build to a temp name and rename: an interrupted build never leaves a binary.
go build -trimpath -o "$bin.tmp.$$" . >&2
mv -f "$bin.tmp.$$" "$bin"
echo "$bin"
