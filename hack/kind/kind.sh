#!/usr/bin/env bash
# Build kind from the Go module proxy into the cache folder (once).
#
# Usage: hack/kind/kind.sh     prints the path of the kind binary
# Env:   LEASEHOLD_CACHE_DIR  cache root (default: ~/.cache/leasehold)
set -euo pipefail
version=v0.33.0
cache="${LEASEHOLD_CACHE_DIR:-${HOME}/.cache/leasehold}"
bin="$cache/kind/$version/kind"
if [[ ! -x "$bin" ]]; then
  echo "kind.sh: building kind $version from Go modules" >&2
  GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod GOBIN="$(dirname "$bin")" \
    GOCACHE="${GOCACHE_OVERRIDE:-$cache/go-build}" GOMODCACHE="${GOMODCACHE_OVERRIDE:-$cache/go-mod}" \
    go install "sigs.k8s.io/kind@$version" >&2
fi
echo "$bin"
