#!/usr/bin/env bash
# Pod networking for a kind cluster without kindnetd: on every node a bridge +
# host-local CNI config for the node's podCIDR, and a route to each other
# node's podCIDR via that node's IP (what kindnetd would program).
#
# Usage: hack/kind/network.sh CLUSTER     (KUBECONFIG names the cluster; kind, kubectl on PATH)
set -euo pipefail
name="${1:-kind}"
mapfile -t nodes < <(kind get nodes --name "$name")
declare -A cidr ip
for node in "${nodes[@]}"; do
  for _ in $(seq 300); do
    cidr[$node]="$(kubectl get node "$node" -o jsonpath='{.spec.podCIDR}' 2>/dev/null || true)"
    [[ -n "${cidr[$node]}" ]] && break
    sleep 0.2
  done
  [[ -n "${cidr[$node]}" ]] || { echo "network.sh: node $node has no podCIDR" >&2; exit 1; }
  ip[$node]="$(kubectl get node "$node" -o jsonpath='{.status.addresses[?(@.type=="InternalIP")].address}')"
done
for node in "${nodes[@]}"; do
  docker exec -i "$node" sh -c 'mkdir -p /etc/cni/net.d && cat >/etc/cni/net.d/10-bridge.conflist' <<JSON
{
  "cniVersion": "1.0.0",
  "name": "kind-bridge",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "${cidr[$node]}"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
  for other in "${nodes[@]}"; do
    [[ "$other" == "$node" ]] && continue
    docker exec "$node" ip route replace "${cidr[$other]}" via "${ip[$other]}"
  done
done
kubectl wait --for=condition=Ready node --all --timeout=180s >/dev/null
