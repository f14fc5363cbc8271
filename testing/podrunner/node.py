"""The Node a pod runner plays the kubelet of: registration, status and heartbeat.

A kubelet keeps its node alive in two ways, and so does this: it posts the
node status (conditions with heartbeat times, capacity, addresses) and it
renews a ``coordination.k8s.io/v1`` Lease named after the node in
``kube-node-lease``. The node lifecycle controller of kube-controller-manager
marks a node NotReady, taints it and later evicts its pods when neither moves
for its grace period (40-50 s); the scheduler only binds pods to Ready nodes
without ``NoSchedule`` taints.
"""

from __future__ import annotations

import logging
import platform
import socket
from datetime import UTC, datetime
from typing import Any

from podrunner.kube import (
    JSON_PATCH,
    STRATEGIC_MERGE_PATCH,
    Kube,
    KubeError,
    micro_time,
    path_segment,
    rfc3339,
)

log = logging.getLogger("podrunner.node")

CAPACITY = {"cpu": "2", "memory": "24Gi", "pods": "110", "ephemeral-storage": "100Gi"}
"""What the node offers the scheduler (capacity and allocatable alike)."""

LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_SECONDS = 40
"""Duration written into the node Lease, the kubelet's default."""

NODE_LABEL = "leasehold.dev/podrunner"
"""Label set to ``"true"`` on nodes registered by a pod runner."""

RUNNER_VERSION = "v1.35.4-podrunner"
"""What the node reports as its kubelet version."""

UNHEALTHY_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})
"""Taints the node lifecycle controller adds to a node it thinks is down."""

LOOPBACK = "127.0.0.1"

_CONDITIONS = (
    ("Ready", "True", "KubeletReady", "podrunner is posting ready status"),
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "podrunner has sufficient memory"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "podrunner has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "podrunner has sufficient PID"),
)


def _arch() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def node_manifest(name: str) -> dict[str, Any]:
    """Build the Node object a runner registers.

    Args:
        name: The node name.

    Returns:
        The object, without status.
    """
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": _arch(),
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": _arch(),
                NODE_LABEL: "true",
            },
        },
        "spec": {},
    }


def node_status(name: str, *, transition: datetime, now: datetime) -> dict[str, Any]:
    """Build the status a runner posts for its node.

    Args:
        name: The node name.
        transition: When the conditions last changed (the registration time).
        now: The heartbeat time.

    Returns:
        A ``{"status": ...}`` body for a patch of ``nodes/<name>/status``.
    """
    conditions = [
        {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": rfc3339(now),
            "lastTransitionTime": rfc3339(transition),
        }
        for kind, status, reason, message in _CONDITIONS
    ]
    return {
        "status": {
            "capacity": dict(CAPACITY),
            "allocatable": dict(CAPACITY),
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": LOOPBACK},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "machineID": "podrunner",
                "systemUUID": "podrunner",
                "bootID": "podrunner",
                "kernelVersion": platform.release(),
                "osImage": f"podrunner on {socket.gethostname()}",
                "containerRuntimeVersion": "podrunner://0.1.0",
                "kubeletVersion": RUNNER_VERSION,
                "kubeProxyVersion": RUNNER_VERSION,
                "operatingSystem": "linux",
                "architecture": _arch(),
            },
        }
    }


class NodeAgent:
    """Registers one Node and keeps it Ready.

    Call `register` once, then `heartbeat` every few seconds (the runner does
    both). Both recreate the node if someone deleted it.

    Attributes:
        name: The node name.
    """

    def __init__(self, kube: Kube, name: str) -> None:
        """Bind the agent to a cluster and a node name.

        Args:
            kube: Client with rights on nodes and on leases in ``kube-node-lease``.
            name: The node name.
        """
        self.name = name
        self._kube = kube
        self._path = f"/api/v1/nodes/{path_segment(name)}"
        self._lease_path = (
            f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{path_segment(name)}"
        )
        self._registered_at = datetime.now(UTC)
        self._uid: str | None = None

    def register(self) -> None:
        """Create the node if needed, post its status, renew its lease.

        Raises:
            KubeError: If the API server refuses.
        """
        self._registered_at = datetime.now(UTC)
        try:
            created = self._kube.request("POST", "/api/v1/nodes", body=node_manifest(self.name))
            log.info("registered node %s", self.name)
            self._uid = created["metadata"]["uid"]
        except KubeError as exc:
            if exc.status != 409:
                raise
            labels = node_manifest(self.name)["metadata"]["labels"]
            patched = self._kube.request(
                "PATCH",
                self._path,
                body={"metadata": {"labels": labels}},
                content_type=STRATEGIC_MERGE_PATCH,
            )
            self._uid = patched["metadata"]["uid"]
            log.info("node %s already exists; taking it over", self.name)
        self.heartbeat()

    def heartbeat(self) -> None:
        """Post the node status, renew the node lease and lift not-ready taints.

        Raises:
            KubeError: If the API server refuses.
        """
        try:
            node = self._kube.request(
                "PATCH",
                f"{self._path}/status",
                body=node_status(self.name, transition=self._registered_at, now=datetime.now(UTC)),
                content_type=STRATEGIC_MERGE_PATCH,
            )
        except KubeError as exc:
            if exc.status != 404:
                raise
            log.warning("node %s was deleted; registering it again", self.name)
            self.register()
            return
        self._uid = node["metadata"]["uid"]
        self._renew_lease()
        self._lift_taints(node)

    def _renew_lease(self) -> None:
        lease = self._kube.get_or_none(self._lease_path)
        now = micro_time()
        if lease is not None:
            owners = [
                ref.get("uid")
                for ref in lease.get("metadata", {}).get("ownerReferences") or []
                if ref.get("kind") == "Node"
            ]
            if owners and self._uid not in owners:
                # Left over from an earlier node of the same name: replace it.
                lease = None
                try:
                    self._kube.request("DELETE", self._lease_path)
                except KubeError as exc:
                    if exc.status != 404:
                        raise
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": self.name,
                    "namespace": LEASE_NAMESPACE,
                    "ownerReferences": [
                        {"apiVersion": "v1", "kind": "Node", "name": self.name, "uid": self._uid}
                    ],
                },
                "spec": {
                    "holderIdentity": self.name,
                    "leaseDurationSeconds": LEASE_DURATION_SECONDS,
                    "renewTime": now,
                },
            }
            try:
                self._kube.request(
                    "POST",
                    f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases",
                    body=body,
                )
            except KubeError as exc:
                if exc.status != 409:
                    raise
                # Created meanwhile; the next heartbeat renews it.
            return
        spec = lease.setdefault("spec", {})
        spec["holderIdentity"] = self.name
        spec["leaseDurationSeconds"] = LEASE_DURATION_SECONDS
        spec["renewTime"] = now
        try:
            self._kube.request("PUT", self._lease_path, body=lease)
        except KubeError as exc:
            if exc.status != 409:
                raise
            log.debug("node lease %s changed under us; renewing next time", self.name)

    def _lift_taints(self, node: dict[str, Any]) -> None:
        taints = node.get("spec", {}).get("taints") or []
        kept = [taint for taint in taints if taint.get("key") not in UNHEALTHY_TAINTS]
        if len(kept) == len(taints):
            return
        patch = [
            {
                "op": "test",
                "path": "/metadata/resourceVersion",
                "value": node["metadata"]["resourceVersion"],
            },
            {"op": "replace", "path": "/spec/taints", "value": kept},
        ]
        try:
            self._kube.request("PATCH", self._path, body=patch, content_type=JSON_PATCH)
        except KubeError as exc:
            log.debug("could not lift taints of node %s yet: %s", self.name, exc)
            return
        log.info(
            "lifted taints %s from node %s",
            ", ".join(sorted({t["key"] for t in taints} - {t["key"] for t in kept})),
            self.name,
        )
