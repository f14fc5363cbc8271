"""A pod's service-account identity: a bound token, a kubeconfig, a token folder.

A kubelet mounts a projected token into each pod: a TokenRequest for the
pod's service account, bound to the pod (so the token stops working when the
pod is deleted, and the API server tells who uses it:
``authentication.kubernetes.io/pod-name`` in the user's extra info). The
runner requests the same token and hands it to the process twice:

- ``<poddir>/kubeconfig``: the API server and CA of the runner's kubeconfig,
  the token as bearer token, the pod's namespace as default; ``KUBECONFIG``
  points at it.
- ``<poddir>/serviceaccount/{token,ca.crt,namespace}``: the files a real pod
  finds in ``/var/run/secrets/kubernetes.io/serviceaccount``;
  ``LEASEHOLD_SERVICEACCOUNT_DIR`` points at the folder.

The runner refreshes both before the token expires, by atomic replacement.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from podrunner.kube import Kube, path_segment

TOKEN_EXPIRATION_SECONDS = 3600
SERVICEACCOUNT_DIR_ENV = "LEASEHOLD_SERVICEACCOUNT_DIR"


@dataclass(frozen=True)
class BoundToken:
    """A service-account token bound to a pod.

    Attributes:
        token: The JWT.
        expiration: ``status.expirationTimestamp`` of the TokenRequest.
        lifetime: Seconds it was requested for.
    """

    token: str
    expiration: str
    lifetime: int


def request_token(
    kube: Kube,
    pod: dict[str, Any],
    *,
    expiration_seconds: int = TOKEN_EXPIRATION_SECONDS,
) -> BoundToken:
    """Request a token for a pod's service account, bound to the pod.

    The audience is left empty, which means the API server's own.

    Args:
        kube: A client allowed to create ``serviceaccounts/token``.
        pod: The pod object.
        expiration_seconds: Requested lifetime.

    Returns:
        The token.

    Raises:
        KubeError: If the API server refuses (e.g. the pod or the service
            account is gone).
    """
    metadata = pod["metadata"]
    account = pod.get("spec", {}).get("serviceAccountName") or "default"
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": [],
            "expirationSeconds": expiration_seconds,
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": metadata["name"],
                "uid": metadata["uid"],
            },
        },
    }
    path = (
        f"/api/v1/namespaces/{path_segment(metadata['namespace'])}"
        f"/serviceaccounts/{path_segment(account)}/token"
    )
    answer = kube.request("POST", path, body=body)
    status = answer.get("status", {})
    return BoundToken(
        token=str(status["token"]),
        expiration=str(status.get("expirationTimestamp", "")),
        lifetime=expiration_seconds,
    )


def _write_private(path: Path, data: bytes) -> None:
    """Write a file readable by its owner only, replacing any old one atomically."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)


def render_kubeconfig(
    *,
    server: str,
    ca_pem: bytes | None,
    verify_tls: bool,
    tls_server_name: str | None,
    token: str,
    namespace: str,
    user: str,
) -> dict[str, Any]:
    """Build a kubeconfig that authenticates with a bearer token.

    Args:
        server: API server URL.
        ca_pem: CA bundle, or None for the system trust store.
        verify_tls: False writes ``insecure-skip-tls-verify``.
        tls_server_name: Server name to verify, if the runner's kubeconfig has one.
        token: The bearer token.
        namespace: Default namespace of the context.
        user: Name of the user entry.

    Returns:
        The kubeconfig as a JSON-ready mapping.
    """
    cluster: dict[str, Any] = {"server": server}
    if ca_pem:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode("ascii")
    if not verify_tls:
        cluster["insecure-skip-tls-verify"] = True
    if tls_server_name:
        cluster["tls-server-name"] = tls_server_name
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": cluster}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {"name": "pod", "context": {"cluster": "cluster", "user": user, "namespace": namespace}}
        ],
        "current-context": "pod",
        "preferences": {},
    }


def write_identity(kube: Kube, pod: dict[str, Any], pod_dir: Path, token: BoundToken) -> Path:
    """Write (or refresh) a pod's kubeconfig and service-account folder.

    Args:
        kube: The runner's client (its server and CA go into the kubeconfig).
        pod: The pod object.
        pod_dir: The pod's folder.
        token: The pod's bound token.

    Returns:
        Path of the kubeconfig; the token folder is ``pod_dir / "serviceaccount"``.
    """
    namespace = pod["metadata"]["namespace"]
    account = pod.get("spec", {}).get("serviceAccountName") or "default"
    ca_pem = kube.ca_pem()
    sa_dir = pod_dir / "serviceaccount"
    sa_dir.mkdir(parents=True, exist_ok=True)
    _write_private(sa_dir / "token", token.token.encode("ascii"))
    _write_private(sa_dir / "ca.crt", ca_pem or b"")
    _write_private(sa_dir / "namespace", namespace.encode("utf-8"))
    kubeconfig = pod_dir / "kubeconfig"
    document = render_kubeconfig(
        server=kube.server,
        ca_pem=ca_pem,
        verify_tls=kube.verify_tls,
        tls_server_name=kube.tls_server_name,
        token=token.token,
        namespace=namespace,
        user=f"system:serviceaccount:{namespace}:{account}",
    )
    _write_private(kubeconfig, (json.dumps(document, indent=2) + "\n").encode("utf-8"))
    return kubeconfig
