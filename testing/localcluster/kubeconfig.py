"""Kubeconfig files for the admin user and the control plane components.

Kubeconfigs are written as JSON, which is valid YAML, so no YAML library is
needed. Certificates are embedded (``*-data`` fields), so a kubeconfig can be
copied elsewhere and still works while the cluster runs.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

from localcluster.layout import KeyPair

CLUSTER_NAME = "leasehold-local"


def render_kubeconfig(
    server: str,
    ca_pem: bytes,
    client_cert_pem: bytes,
    client_key_pem: bytes,
    user: str,
    *,
    cluster: str = CLUSTER_NAME,
) -> dict[str, Any]:
    """Build a kubeconfig with one cluster, one user and one current context.

    Args:
        server: API server URL, e.g. ``https://127.0.0.1:41234``.
        ca_pem: PEM of the CA that signed the API server's certificate.
        client_cert_pem: PEM of the user's client certificate.
        client_key_pem: PEM of the user's private key.
        user: Name of the user entry (not the identity; that is the cert's CN).
        cluster: Name of the cluster and of the context.

    Returns:
        The kubeconfig as a JSON-ready mapping.
    """

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster,
                "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(client_cert_pem),
                    "client-key-data": b64(client_key_pem),
                },
            }
        ],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user}}],
        "current-context": cluster,
        "preferences": {},
    }


def write_kubeconfig(path: Path, server: str, ca: Path, client: KeyPair, user: str) -> Path:
    """Write a kubeconfig file, readable by its owner only (it holds a key).

    Args:
        path: Where to write.
        server: API server URL.
        ca: PEM file of the cluster CA.
        client: PEM files of the user's certificate and key.
        user: Name of the user entry.

    Returns:
        ``path``, for chaining.
    """
    config = render_kubeconfig(
        server, ca.read_bytes(), client.cert.read_bytes(), client.key.read_bytes(), user
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(config, handle, indent=2)
        handle.write("\n")
    return path
