"""The bench's watch (``bench.harness.follow``) goes on across a broken stream.

A real API server behind a TCP proxy (``faultproxy``) that closes every
connection: the bench's round-end detection and its write counts rest on
this watch, and a stream that ended under load once ended a round early
(bench/results.md, stop 38).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from bench.harness import follow
from kubernetes import client

from faultproxy import TcpProxy
from tests.integration.jobs import wait_for
from tests.integration.test_fencing_kube import _api_server, _proxied_client

pytestmark = pytest.mark.cluster


def _config_map(api: client.CoreV1Api, namespace: str, name: str) -> None:
    api.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name))
    )


def test_follow_goes_on_after_its_connection_is_dropped(
    kubeconfig: Path, api_client: client.ApiClient, namespace: str
) -> None:
    admin = client.CoreV1Api(api_client)
    with TcpProxy(*_api_server(kubeconfig)) as proxy:
        watched = client.CoreV1Api(_proxied_client(kubeconfig, proxy))
        listed: Any = watched.list_namespaced_config_map(namespace, limit=1)
        stop = threading.Event()
        seen: list[tuple[str, str]] = []

        def consume() -> None:
            for event_type, obj in follow(
                watched.list_namespaced_config_map,
                namespace,
                resource_version=listed.metadata.resource_version,
                stop=stop,
            ):
                seen.append((event_type, obj.metadata.name))

        thread = threading.Thread(target=consume, daemon=True)
        thread.start()
        _config_map(admin, namespace, "before")
        wait_for("the first config map seen", lambda: ("ADDED", "before") in seen, 15)
        accepted = proxy.accepted
        proxy.drop_connections()
        _config_map(admin, namespace, "after")
        wait_for("the second, after the drop", lambda: ("ADDED", "after") in seen, 30)
        assert proxy.accepted > accepted  # watched again on a new connection
        stop.set()
        _config_map(admin, namespace, "wake")  # an event, so the generator sees stop
        thread.join(10)
        assert not thread.is_alive()
        assert [name for _, name in seen].count("before") == 1  # from where it was, not again
