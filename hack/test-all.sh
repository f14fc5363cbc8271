#!/usr/bin/env bash
# `make test`: the local tier, then the kind tier; beside the kind tier, at the
# lowest CPU priority, the tests that need no cluster, only CPU (the Spin model
# check and the clean-venv install, tests/model and tests/packaging). The kind
# tier spends most of its time waiting on lease timers and node faults, so
# those two use the cycles it leaves idle. Beside the local tier they cost it
# ~100 s (its workers are CPU-bound on two cores); beside the kind tier they
# cost it next to nothing.
#
# Usage: hack/test-all.sh         (make test; everything else is set up first)
# Exit:  non-zero when any tier or the tests beside them failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mkdir -p build
beside_log=build/test-beside.log
beside=""
trap '[[ -z "$beside" ]] || kill "$beside" 2>/dev/null || true' INT TERM

status=0
make --no-print-directory test-local \
  PYTEST_SKIP="--ignore=tests/model --ignore=tests/packaging" || status=$?
nice -n 19 .venv/bin/pytest -p no:cacheprovider tests/model tests/packaging >"$beside_log" 2>&1 &
beside=$!
if ((status == 0)); then
  make --no-print-directory test-kind || status=$?
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
