#!/usr/bin/env bash
# make demo: build/fetch what is missing, then run the worked example live.
set -euo pipefail
cd "$(dirname "$0")/.."
hack/controlplane/build.sh >/dev/null
hack/tools.sh >/dev/null
keep=()
if [[ "${KEEP:-0}" == "1" ]]; then keep=(--keep); fi
PYTHONPATH=testing exec .venv/bin/python testing/demo.py "${keep[@]}"
