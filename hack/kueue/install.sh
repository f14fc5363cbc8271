#!/usr/bin/env bash
# `make kueue-install`: install the Kueue built here (hack/kueue/build.sh) on a
# kind cluster from Kueue's own chart (charts/kueue in the sigs.k8s.io/kueue
# module), configured for leasehold (hack/kueue/values.yaml: our image,
# imagePullPolicy Never, the external framework LeasedJob.v1alpha1.leasehold.dev,
# Kueue's internal certificate management), plus the read access to LeasedJobs
# Kueue needs (hack/kueue/rbac.yaml). Waits until Kueue's webhook answers:
# ClusterQueues and LocalQueues created before that are refused. Idempotent.
#
# Usage: hack/kueue/install.sh [CLUSTER]    (default: $KIND_CLUSTER, else kind)
# Env:   KUBECONFIG   the cluster's (kind writes it on kind-up)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cluster="${1:-${KIND_CLUSTER:-kind}}"
namespace=kueue-system
DOCKER_HOST="$("$repo/hack/docker/ensure.sh")"
export DOCKER_HOST
kind="$("$repo/hack/kind/kind.sh")"
tools="$("$repo/hack/tools.sh")"
export PATH="$(dirname "$kind"):$tools:$PATH"
start=$(date +%s)

image="$("$here/build.sh" image)"
src="$("$here/build.sh" src)"
# kind skips nodes that hold this image already.
kind load docker-image "$image" --name "$cluster" >&2

helm upgrade --install kueue "$src/charts/kueue" -n "$namespace" --create-namespace \
  -f "$here/values.yaml" --wait --timeout 5m >&2
kubectl apply -f "$here/rbac.yaml" >&2

# The webhook answers when a server-side dry run of a ResourceFlavor passes
# (the API server calls Kueue's mutating and validating webhooks for it).
probe='{"apiVersion":"kueue.x-k8s.io/v1beta2","kind":"ResourceFlavor","metadata":{"name":"webhook-probe"}}'
deadline=$(($(date +%s) + 180))
until out="$(kubectl create --dry-run=server -f - <<<"$probe" 2>&1)"; do
  if (($(date +%s) > deadline)); then
    echo "kueue-install: Kueue's webhook did not answer in 180 s: $out" >&2
    kubectl -n "$namespace" logs deploy/kueue-controller-manager --tail=40 >&2 || true
    exit 1
  fi
  sleep 2
done
echo "kueue-install: Kueue $(helm -n "$namespace" list -o json | sed -n 's/.*"app_version":"\([^"]*\)".*/\1/p') ($image) ready on $cluster in $(($(date +%s) - start))s" >&2
