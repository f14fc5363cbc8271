#!/usr/bin/env bash
# Build leasehold-leaderelect (main.go: one client-go leader election candidate)
# into the cache (hack/gobuild.sh: keyed by a hash of its sources).
#
# Usage: hack/leaderelect/build.sh        prints the binary's path on stdout
set -euo pipefail
exec "$(dirname "${BASH_SOURCE[0]}")/../gobuild.sh" leaderelect
