#!/usr/bin/env bash
# Build Kueue's manager (sigs.k8s.io/kueue/cmd/kueue) from the Go module proxy
# into the cache, and optionally an image of it on the leasehold image's
# Debian base. Both are cached: a second run is instant.
#
# The binary serves two tiers: the local tier runs it as a process against its
# kube-apiserver (testing/kueueproc), the kind tier runs it in the image
# (hack/kueue/install.sh). The Kueue source (chart, CRDs) is the module the
# build downloads into GOMODCACHE; `build.sh src` prints that folder.
#
# Usage: hack/kueue/build.sh            prints the manager binary's path
#        hack/kueue/build.sh src        prints the Kueue module's folder (chart, CRDs)
#        hack/kueue/build.sh image      builds leasehold-kueue:$KUEUE_VERSION, prints its name
# Env:   LEASEHOLD_CACHE_DIR  cache root (default: ~/.cache/leasehold)
#        KUEUE_VERSION        default v0.17.0
#        DOCKER_HOST          (image) the engine; hack/docker/ensure.sh gives one when unset
set -euo pipefail

mode="${1:-bin}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cache="${LEASEHOLD_CACHE_DIR:-${HOME}/.cache/leasehold}"
version="${KUEUE_VERSION:-v0.17.0}"
key="$(cat "${BASH_SOURCE[0]}" | sha256sum | cut -c1-12)"
bin="$cache/kueue/$version-$key/kueue"

export GOTOOLCHAIN=local CGO_ENABLED=0
export GOFLAGS="-mod=mod -buildvcs=false"
export GOCACHE="${GOCACHE_OVERRIDE:-$cache/go-build}"
export GOMODCACHE="${GOMODCACHE_OVERRIDE:-$cache/go-mod}"

build_binary() {
  [[ -x "$bin" ]] && return 0
  local gobin="$bin.tmp.$$" start
  start=$(date +%s)
  echo "building Kueue $version's manager into $bin (first build: about 9 minutes)" >&2
  rm -rf "$gobin"
  mkdir -p "$gobin"
  # `go install pkg@version` builds the module at that version as its own main
  # module (go.mod, go.sum verified against the checksum database).
  local ldflags="-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$version"
  GOBIN="$gobin" go install -trimpath -ldflags "$ldflags" "sigs.k8s.io/kueue/cmd/kueue@$version" >&2
  # Rename last: an interrupted build never leaves a binary.
  mv -f "$gobin/kueue" "$bin"
  rm -rf "$gobin"
  echo "built Kueue's manager in $(($(date +%s) - start))s" >&2
}

module_dir() {
  local dir="$GOMODCACHE/sigs.k8s.io/kueue@$version"
  [[ -d "$dir/charts/kueue" ]] || go mod download "sigs.k8s.io/kueue@$version" >&2
  echo "$dir"
}

# The image: the binary as /manager on the base `make image` uses (the
# Dockerfile's python:*-slim default when the engine has it, else the base
# made from Debian packages), user 65532 as in Kueue's own Dockerfile. Saved
# as a tarball keyed by the binary and base, so a fresh Docker data root
# loads it instead of rebuilding.
build_image() {
  local image="leasehold-kueue:$version"
  DOCKER_HOST="${DOCKER_HOST:-$("$repo/hack/docker/ensure.sh")}"
  export DOCKER_HOST
  local base
  base="$(sed -n 's/^ARG PYTHON_IMAGE=//p' "$repo/Dockerfile")"
  docker image inspect "$base" >/dev/null 2>&1 || base="$("$repo/hack/docker/python-base.sh")"
  local tag
  tag="$( (sha256sum "$bin" | cut -c1-12; echo "$base") | sha256sum | cut -c1-12)"
  local tarball="$cache/images/kueue-$version-$tag.tar"
  if docker image inspect "$image" --format '{{index .Config.Labels "dev.leasehold.kueue-build"}}' 2>/dev/null |
    grep -qx "$tag"; then
    echo "$image"
    return 0
  fi
  if [[ -s "$tarball" ]]; then
    docker load -i "$tarball" >/dev/null
    echo "$image"
    return 0
  fi
  local ctx
  ctx="$(mktemp -d)"
  trap 'rm -rf "$ctx"' RETURN
  cp "$bin" "$ctx/manager"
  cat >"$ctx/Dockerfile" <<EOF
FROM $base
LABEL org.opencontainers.image.title="leasehold-kueue" \\
      org.opencontainers.image.version="$version" \\
      dev.leasehold.kueue-build="$tag"
COPY manager /manager
USER 65532:65532
WORKDIR /
ENTRYPOINT ["/manager"]
EOF
  docker build --quiet --network none -t "$image" "$ctx" >/dev/null
  mkdir -p "$(dirname "$tarball")"
  rm -f "$cache/images/kueue-$version-"*.tar
  docker save -o "$tarball.tmp" "$image"
  mv -f "$tarball.tmp" "$tarball"
  echo "$image"
}

case "$mode" in
  bin) build_binary && echo "$bin" ;;
  src) module_dir ;;
  image) build_binary && build_image ;;
  *) echo "usage: $0 [bin|src|image]" >&2 && exit 2 ;;
esac
