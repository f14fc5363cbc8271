#!/usr/bin/env bash
# Check, and install with apt where missing, the system packages a make target needs.
#
# Usage: hack/syspkgs.sh GROUP...      groups: build, test, chaos, model
#   build  Go, npm, unzip, make, tar: the control plane and kubectl/helm builds
#   test   + PostgreSQL server binaries (fencing tests), Prometheus (metrics test),
#            libfaketime (clock-skew tests)
#   chaos  libfaketime (the chaos run skews workers' clocks)
#   model  Spin and a C compiler (the Promela model of the protocol, model/)
# Installs only what is missing, so it is a no-op (a few stat calls) on a set-up
# machine. Needs root or sudo for apt; without either it names what to install.
set -euo pipefail

need_cmd() { command -v "$1" >/dev/null 2>&1; }
missing=()
want() { # want PACKAGE TEST...
  local pkg="$1"; shift
  "$@" || missing+=("$pkg")
}
faketime_lib() { compgen -G "/usr/lib/*/faketime/libfaketime.so.1" >/dev/null; }
pg_server() { compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; }

for group in "$@"; do
  case "$group" in
    build)
      want golang-go need_cmd go
      want npm need_cmd npm
      want unzip need_cmd unzip
      want make need_cmd make
      want tar need_cmd tar
      ;;
    test)
      want postgresql pg_server
      want prometheus need_cmd prometheus
      want libfaketime faketime_lib
      ;;
    chaos)
      want libfaketime faketime_lib
      ;;
    model)
      want spin need_cmd spin
      want gcc need_cmd gcc
      ;;
    *) echo "syspkgs.sh: unknown group '$group' (build, test, chaos, model)" >&2; exit 2 ;;
  esac
done

((${#missing[@]})) || exit 0
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
if [[ $(id -u) -eq 0 ]]; then
  sudo=()
elif need_cmd sudo && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "syspkgs.sh: missing Debian packages: ${missing[*]}; install them with" >&2
  echo "  sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "syspkgs.sh: installing ${missing[*]} with apt" >&2
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
