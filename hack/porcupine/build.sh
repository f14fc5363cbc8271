#!/usr/bin/env bash
# Build leasehold-porcupine (main.go: the chaos history judged by porcupine)
# into the cache (hack/gobuild.sh: keyed by a hash of its sources).
#
# Usage: hack/porcupine/build.sh        prints the binary's path on stdout
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/../gobuild.sh" porcupine
