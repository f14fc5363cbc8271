#!/usr/bin/env bash
# Build one of the project's small Go tools (hack/<tool>/: go.mod, go.sum,
# main.go) into a cache folder keyed by a hash of its sources, so a second run
# is instant. Modules come from the Go module proxy.
#
# Usage: hack/gobuild.sh <tool>     prints the binary's path on stdout
#        (binary: $LEASEHOLD_CACHE_DIR/<tool>/<key>/leasehold-<tool>)
# Env:   LEASEHOLD_CACHE_DIR  cache root (default: ~/.cache/leasehold)
set -euo pipefail

tool="${1:?usage: hack/gobuild.sh <tool>}"
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/$tool" && pwd)"
cache="${LEASEHOLD_CACHE_DIR:-${HOME}/.cache/leasehold}"
key="$(cat "$src/go.mod" "$src/go.sum" "$src/main.go" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-12)"
bin="$cache/$tool/$key/leasehold-$tool"

if [[ -x "$bin" ]]; then
  echo "$bin"
  exit 0
fi

export GOTOOLCHAIN=local CGO_ENABLED=0
export GOFLAGS="-mod=mod -buildvcs=false"
export GOCACHE="${GOCACHE_OVERRIDE:-$cache/go-build}"
export GOMODCACHE="${GOMODCACHE_OVERRIDE:-$cache/go-mod}"

mkdir -p "$(dirname "$bin")"
cd "$src"
# Build to a temp name and rename: an interrupted build never leaves a binary.
go build -trimpath -o "$bin.tmp.$$" . >&2
mv -f "$bin.tmp.$$" "$bin"
echo "$bin"
