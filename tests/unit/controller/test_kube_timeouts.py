"""The operator's pod, object and Event calls give up on an API server gone silent."""

from __future__ import annotations

import logging
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


def test_an_event_post_gives_up_on_a_silent_api_server_off_the_caller(
    silent_server: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``record`` returns at once; the sender's POST times out, is logged, and the queue drains."""
    monkeypatch.setattr(events, "REQUEST_TIMEOUT", (1.0, 1.0))
    recorder = events.EventRecorder(
        _api_client(silent_server), component="test", instance="test", clock=datetime.now
    )
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="leasehold.controller.kube.events"):
        recorder.record(body, "Normal", "Tested", "a message")
        assert time.monotonic() - started < 0.5  # not the POST's 1 s timeout
        assert recorder.flush(timeout_seconds=10)
    assert time.monotonic() - started < 10
    assert "could not record Event Tested on p:" in caplog.text
    assert "timed out" in caplog.text.lower()
    assert recorder.close(timeout_seconds=5)


def test_events_beyond_what_may_wait_are_dropped_and_counted(
    silent_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An object's Events share one sender: once it waits on a POST, 2 more may queue."""
    monkeypatch.setattr(events, "REQUEST_TIMEOUT", (1.0, 1.0))
    dropped: list[None] = []
    recorder = events.EventRecorder(
        _api_client(silent_server), component="test", instance="test", clock=datetime.now,
        queued_per_sender=2, on_dropped=lambda: dropped.append(None),
    )  # fmt: skip
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}
    for i in range(10):
        recorder.record(body, "Normal", "Tested", f"event {i}")
    # The sender took the first (or, not yet started, none): 2 wait, the rest are dropped.
    assert len(dropped) in (7, 8)
    assert recorder.flush(timeout_seconds=15)
