#!/usr/bin/env bash
# The kind tier's cluster, made ready while the local tier runs (hack/test-all.sh).
#
# `make test` runs the local tier (CPU-bound on two cores) and then the kind
# tier, whose README quickstart first spends ~70 s on `make kind-up` and
# `make image kind-load` (cluster start, image build, image import into each
# node: mostly waits on containers and disk). `up` does those same make targets
# at the start of the local tier, at nice 10, and then freezes the cluster's
# node containers (`docker pause`, the cgroup freezer): an idle cluster of
# three nodes costs ~0.2 of a core, which the local tier would lose for its
# whole run. `resume` thaws them when the kind tier starts and waits until the
# nodes are Ready and untainted again (the kubelets report NotReady for ~10 s
# after a long freeze). The quickstart's own `make kind-up` and
# `make image kind-load` then find the cluster up and the image loaded, as they
# would for a user who ran them before.
#
# Usage: hack/kind/prepare.sh up CLUSTER       delete a leftover CLUSTER, create it, build and
#                                             load the image, freeze its nodes
#        hack/kind/prepare.sh resume CLUSTER   thaw its nodes; wait until they are Ready (<= 180 s)
#        hack/kind/prepare.sh down CLUSTER     thaw and delete it (when the kind tier will not run)
# Exit:  non-zero when a step failed; `up` then deletes what it made.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
action="${1:?usage: prepare.sh up|resume|down CLUSTER}"
name="${2:?usage: prepare.sh up|resume|down CLUSTER}"
DOCKER_HOST="$("$repo/hack/docker/ensure.sh")"
export DOCKER_HOST
kind="$("$here/kind.sh")"

nodes() { "$kind" get nodes --name "$name" 2>/dev/null; }
thaw() {
  local node
  for node in $(nodes); do
    if [[ "$(docker inspect -f '{{.State.Paused}}' "$node")" == true ]]; then
      docker unpause "$node" >/dev/null
    fi
  done
}
delete() {
  thaw
  "$kind" delete cluster --name "$name" >&2
}

# Every node Ready and without a not-ready or unreachable taint (kubeconfig $1).
all_ready() {
  local listed
  listed="$(KUBECONFIG="$1" kubectl get nodes --request-timeout=5s -o jsonpath='{range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}:{.spec.taints[*].key}{"\n"}{end}')" \
    || return 1
  [[ -n "$listed" ]] || return 1
  if grep -v '=True:' <<<"$listed" | grep -q .; then return 1; fi
  ! grep -qE 'node.kubernetes.io/(not-ready|unreachable)' <<<"$listed"
}

case "$action" in
  up)
    start=$(date +%s)
    if "$kind" get clusters 2>/dev/null | grep -qx "$name"; then
      echo "prepare: deleting the leftover cluster $name" >&2
      delete
    fi
    if ! make -C "$repo" --no-print-directory -s kind-up image kind-load KIND_CLUSTER="$name"; then
      echo "prepare: making cluster $name failed; deleting it" >&2
      delete || true
      exit 1
    fi
    for node in $(nodes); do docker pause "$node" >/dev/null; done
    echo "prepare: cluster $name up, image loaded, nodes frozen, in $(($(date +%s) - start))s" >&2
    ;;
  resume)
    start=$(date +%s)
    thaw
    export PATH="$("$repo/hack/tools.sh"):$PATH"
    kubeconfig="$(mktemp)"
    trap 'rm -f "$kubeconfig"' EXIT
    "$kind" export kubeconfig --name "$name" --kubeconfig "$kubeconfig" 2>/dev/null
    # Right after the thaw the nodes still show the Ready they had when frozen;
    # the kubelets and the node controller flip them within a few seconds. So
    # wait for 10 s in a row of every node Ready and untainted.
    steady=0
    while ((steady < 10)); do
      if (($(date +%s) - start > 180)); then
        echo "prepare: the nodes of $name were not Ready 180 s after the thaw:" >&2
        KUBECONFIG="$kubeconfig" kubectl get nodes >&2 || true
        exit 1
      fi
      if all_ready "$kubeconfig"; then steady=$((steady + 1)); else steady=0; fi
      sleep 1
    done
    echo "prepare: cluster $name thawed, nodes Ready, in $(($(date +%s) - start))s" >&2
    ;;
  down)
    if "$kind" get clusters 2>/dev/null | grep -qx "$name"; then delete; fi
    ;;
  *)
    echo "usage: prepare.sh up|resume|down CLUSTER" >&2
    exit 2
    ;;
esac
