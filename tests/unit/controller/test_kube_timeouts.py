"""The operator's pod, object and Event calls give up on an API server gone silent."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from datetime import datetime

import pytest
import urllib3
from kubernetes import client

from leasehold.controller.kube import events, objects, pods


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP server that accepts connections and never answers: ``http://host:port``."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    server.close()


def _api_client(host: str) -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = host
    configuration.retries = False
    return client.ApiClient(configuration)


def test_a_pod_read_gives_up_on_a_silent_api_server(
    silent_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pods, "REQUEST_TIMEOUT", (1.0, 1.0))
    started = time.monotonic()
    with pytest.raises(urllib3.exceptions.HTTPError, match=r"(?i)timed out"):
        pods.Pods(_api_client(silent_server), field_manager="test").read("ns", "pod")
    assert time.monotonic() - started < 10


def test_an_object_read_gives_up_on_a_silent_api_server(
    silent_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(objects, "REQUEST_TIMEOUT", (1.0, 1.0))
    started = time.monotonic()
    with pytest.raises(urllib3.exceptions.HTTPError, match=r"(?i)timed out"):
        objects.CustomObjects(_api_client(silent_server), "leasedjobs", "LeasedJob", "test").read(
            "ns", "job"
        )
    assert time.monotonic() - started < 10


def test_an_event_post_gives_up_on_a_silent_api_server(
    silent_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events, "REQUEST_TIMEOUT", (1.0, 1.0))
    recorder = events.EventRecorder(
        _api_client(silent_server), component="test", instance="test", clock=datetime.now
    )
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}
    started = time.monotonic()
    with pytest.raises(urllib3.exceptions.HTTPError, match=r"(?i)timed out"):
        recorder.record(body, "Normal", "Tested", "a message")
    assert time.monotonic() - started < 10
