#!/usr/bin/env bash
# Make a Python base image from Debian packages, for machines that cannot pull
# python:*-slim from an image registry (only the Debian mirror is reachable).
# `debootstrap --variant=minbase bookworm` + python3, python3-venv and
# ca-certificates, imported with `docker import`. Python 3.11, like the
# Dockerfile's default base. The root filesystem tarball is cached, so a fresh
# Docker data root re-imports it in seconds.
#
# Usage: hack/docker/python-base.sh [IMAGE]   prints the image name (default leasehold-python-base:3.11-bookworm)
# Env:   LEASEHOLD_CACHE_DIR  cache root (default: ~/.cache/leasehold)
#        DEBIAN_MIRROR        default http://deb.debian.org/debian
#        DOCKER_HOST          the engine (hack/docker/ensure.sh prints one)
set -euo pipefail

image="${1:-leasehold-python-base:3.11-bookworm}"
cache="${LEASEHOLD_CACHE_DIR:-${HOME}/.cache/leasehold}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
tarball="$cache/images/python-base-bookworm.tar"

if docker image inspect "$image" >/dev/null 2>&1; then
  echo "$image"
  exit 0
fi

if [[ ! -s "$tarball" ]]; then
  command -v debootstrap >/dev/null || {
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 \
      --no-install-recommends debootstrap >&2
  }
  rootfs="$(mktemp -d)"
  trap 'rm -rf "$rootfs"' EXIT
  echo "python-base: debootstrap bookworm into $rootfs (about a minute)" >&2
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm "$rootfs" "$mirror" >&2
  # What python:*-slim leaves out too: package caches, docs, man pages, locales.
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
    "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/* \
    "$rootfs"/var/log/* "$rootfs"/tmp/*
  ln -sf python3 "$rootfs/usr/bin/python"
  mkdir -p "$(dirname "$tarball")"
  tar -C "$rootfs" --numeric-owner -cf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
fi
docker import --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' "$tarball" "$image" >/dev/null
echo "$image"
