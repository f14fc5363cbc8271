#!/usr/bin/env bash
# Build k9s (the terminal dashboard) from the Go module proxy into the cache
# folder (once), to look at LeasedJobs and JobLeases as a person does
# (docs/dashboards.md).
#
# Usage: hack/k9s.sh     prints the path of the k9s binary
# Env:   LEASEHOLD_CACHE_DIR  cache root (default: ~/.cache/leasehold)
set -euo pipefail
version=v0.50.16
cache="${LEASEHOLD_CACHE_DIR:-${HOME}/.cache/leasehold}"
bin="$cache/k9s/$version/k9s"
if [[ ! -x "$bin" ]]; then
  echo "k9s.sh: building k9s $version from Go modules (a few minutes the first time)" >&2
  GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod GOBIN="$(dirname "$bin")" \
    GOCACHE="${GOCACHE_OVERRIDE:-$cache/go-build}" GOMODCACHE="${GOMODCACHE_OVERRIDE:-$cache/go-mod}" \
    go install -ldflags "-s -w -X github.com/derailed/k9s/cmd.version=$version" \
    "github.com/derailed/k9s@$version" >&2
fi
echo "$bin"
