#!/usr/bin/env bash
# `make test`: the local tier, then the kind tier; beside the kind tier, at the
# lowest CPU priority, the tests that need no cluster, only CPU (the Spin model
# check and the clean-venv install, tests/model and tests/packaging). The kind
# tier spends most of its time waiting on lease timers and node faults, so
# those two use the cycles it leaves idle. Beside the local tier they cost it
# ~100 s (its workers are CPU-bound on two cores); beside the kind tier they
# cost it next to nothing.
#
# The kind tier's cluster is made while the local tier runs, then frozen until
# the kind tier starts (hack/kind/prepare.sh: ~70 s of cluster start and image
# load off the kind tier, at a cost to the local tier of ~10-20 s of its
# single-threaded lint phase's spare core). Nothing depends on it: if it failed,
# the quickstart's own `make kind-up` makes the cluster.
#
# Usage: hack/test-all.sh         (make test; everything else is set up first)
# Exit:  non-zero when any tier or the tests beside them failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mkdir -p build
beside_log=build/test-beside.log
prepare_log=build/kind-prepare.log
# The kind tier's cluster (tests/kind/conftest.py reads the name from here).
export KIND_TIER_CLUSTER=leasehold-kind-tier
beside=""
prepare=""
stop_all() {
  [[ -z "$beside" ]] || kill "$beside" 2>/dev/null || true
  [[ -z "$prepare" ]] || kill "$prepare" 2>/dev/null || true
  hack/kind/prepare.sh down "$KIND_TIER_CLUSTER" || true
}
trap 'stop_all; exit 130' INT TERM

# Docker and kubectl/helm first, in the foreground: both tiers' set-up would
# otherwise install them at once.
hack/docker/ensure.sh >/dev/null
make --no-print-directory -s tools >/dev/null
nice -n 10 hack/kind/prepare.sh up "$KIND_TIER_CLUSTER" >"$prepare_log" 2>&1 &
prepare=$!

status=0
make --no-print-directory test-local \
  PYTEST_SKIP="--ignore=tests/model --ignore=tests/packaging" || status=$?
prepared=0
wait "$prepare" && prepared=1
prepare=""
tail -n 1 "$prepare_log"
nice -n 19 .venv/bin/pytest -p no:cacheprovider tests/model tests/packaging >"$beside_log" 2>&1 &
beside=$!
if ((status == 0)); then
  if ((prepared)) && ! hack/kind/prepare.sh resume "$KIND_TIER_CLUSTER"; then
    hack/kind/prepare.sh down "$KIND_TIER_CLUSTER" || true # the quickstart makes a new one
  fi
  make --no-print-directory test-kind || status=$?
else
  hack/kind/prepare.sh down "$KIND_TIER_CLUSTER" || true
fi
beside_status=0
wait "$beside" || beside_status=$?
echo "== tests/model and tests/packaging, run beside the kind tier at nice 19 ($beside_log):"
if ((beside_status != 0)); then
  cat "$beside_log"
  status=1
else
  tail -n 3 "$beside_log"
fi
exit "$status"
