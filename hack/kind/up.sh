#!/usr/bin/env bash
# `make kind-up`: a kind cluster (1 control-plane node, 2 workers) from the
# offline node image, with pod networking between nodes. kind writes the
# cluster's context to $KUBECONFIG (default ~/.kube/config), as usual.
#
# Usage: hack/kind/up.sh [CLUSTER]     (default: kind)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
name="${1:-kind}"
DOCKER_HOST="$("$repo/hack/docker/ensure.sh")"
export DOCKER_HOST
kind="$("$here/kind.sh")"
tools="$("$repo/hack/tools.sh")"
export PATH="$(dirname "$kind"):$tools:$PATH"
image="$("$here/node-image.sh")"
if kind get clusters 2>/dev/null | grep -qx "$name"; then
  echo "kind-up: cluster $name exists already" >&2
  kind export kubeconfig --name "$name" >&2
else
  start=$(date +%s)
  # kind bind-mounts /lib/modules; some VMs have none.
  [[ -d /lib/modules ]] || mkdir -p /lib/modules
  kind create cluster --name "$name" --image "$image" --config "$here/cluster.yaml" >&2
  "$here/network.sh" "$name"
  echo "kind-up: cluster $name up, all nodes Ready, in $(($(date +%s) - start))s" >&2
fi
