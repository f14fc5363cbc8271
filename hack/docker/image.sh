#!/usr/bin/env bash
# Build the leasehold image (`make image`): wheels on the host, `docker build`
# with no network.
#
# The host's pip builds leasehold's wheel and downloads the wheels of
# leasehold[operator]'s dependencies for the image's Python (PYTHON_VERSION,
# manylinux x86_64/aarch64) into build/wheels; the Dockerfile installs them
# with --no-index. The base is the Dockerfile's python:*-slim default when the
# engine has it or can pull it; otherwise (no image registry reachable) a base
# made from Debian packages (hack/docker/python-base.sh) stands in, through the
# PYTHON_IMAGE build argument.
#
# Usage: hack/docker/image.sh IMAGE        e.g. leasehold:0.1.0
# Env:   PIP            the pip to use (default: .venv/bin/python -m pip)
#        PYTHON_IMAGE   force a base image (skips the detection)
#        PYTHON_VERSION the base's Python (default 3.11)
set -euo pipefail

image="${1:?usage: image.sh IMAGE}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$repo"
read -r -a pip <<<"${PIP:-.venv/bin/python -m pip}"
py_version="${PYTHON_VERSION:-3.11}"
DOCKER_HOST="$("$here/ensure.sh")"
export DOCKER_HOST

# The Dockerfile's default base, unless the engine cannot get it.
default_base="$(sed -n 's/^ARG PYTHON_IMAGE=//p' Dockerfile)"
base="${PYTHON_IMAGE:-}"
if [[ -z "$base" ]]; then
  if docker image inspect "$default_base" >/dev/null 2>&1 ||
    timeout 120 docker pull -q "$default_base" >/dev/null 2>&1; then
    base="$default_base"
  else
    echo "image: $default_base cannot be pulled here; using a base made from Debian packages" >&2
    base="$("$here/python-base.sh")"
  fi
fi

arch="$(uname -m)"
wheels=build/wheels
rm -rf "$wheels"
mkdir -p "$wheels"
# A fixed timestamp makes the wheel (and so Docker's layer cache) depend on content only.
SOURCE_DATE_EPOCH=315532800 "${pip[@]}" wheel --quiet --no-deps --wheel-dir "$wheels" .
own="$(ls "$wheels"/leasehold-*.whl)"
"${pip[@]}" download --quiet --only-binary=:all: --dest "$wheels" \
  --python-version "$py_version" --implementation cp \
  --platform "manylinux2014_$arch" --platform "manylinux_2_17_$arch" \
  --platform "manylinux_2_28_$arch" --platform "manylinux_2_34_$arch" \
  "$own[operator]"

docker build --quiet --build-arg "PYTHON_IMAGE=$base" -t "$image" . >/dev/null
# Earlier builds of the image, untagged by this one (the build stage stays: it is the cache).
docker image prune --force --filter label=org.opencontainers.image.title=leasehold >/dev/null
echo "$image"
