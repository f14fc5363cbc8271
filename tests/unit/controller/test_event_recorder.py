"""The Event recorder's threads: each object's Events in order, a failure never ends a thread.

The POST itself is replaced here (the unit under test is the queueing); the
same recorder against a real API server is in
``tests/integration/test_kube_edge.py``, against a silent one in
``test_kube_timeouts.py``.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime
from typing import Any

import pytest
from kubernetes import client

from leasehold.controller.kube import events


def _recorder(posted: list[tuple[str, str]], fail: set[str] | None = None) -> events.EventRecorder:
    """A recorder whose POSTs append ``(object, message)`` (raise for messages in ``fail``)."""
    recorder = events.EventRecorder(
        client.ApiClient(client.Configuration()), component="t", instance="t", clock=datetime.now
    )
    guard = threading.Lock()

    def post(namespace: str, event: dict[str, Any]) -> None:
        if event["message"] in (fail or set()):
            raise AttributeError("'list' object has no attribute 'get'")  # as api_message can
        with guard:
            posted.append((event["involvedObject"]["name"], event["message"]))

    recorder._post = post  # type: ignore[method-assign]
    return recorder


def _body(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns"}}


def test_each_objects_events_are_posted_in_the_order_recorded() -> None:
    posted: list[tuple[str, str]] = []
    recorder = _recorder(posted)
    for i in range(50):
        for name in ("a", "b", "c", "d", "e"):
            recorder.record(_body(name), "Normal", "Tested", str(i))
    assert recorder.flush(timeout_seconds=10)
    for name in ("a", "b", "c", "d", "e"):
        assert [m for n, m in posted if n == name] == [str(i) for i in range(50)]
    assert recorder.close(timeout_seconds=10)


def test_a_post_that_raises_is_logged_and_its_thread_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    posted: list[tuple[str, str]] = []
    recorder = _recorder(posted, fail={"first"})
    with caplog.at_level(logging.ERROR, logger="leasehold.controller.kube.events"):
        recorder.record(_body("a"), "Normal", "Tested", "first")
        recorder.record(_body("a"), "Normal", "Tested", "second")
        assert recorder.flush(timeout_seconds=10)
    assert posted == [("a", "second")]
    assert "could not record an Event" in caplog.text


def test_events_recorded_after_close_are_posted_by_new_threads() -> None:
    posted: list[tuple[str, str]] = []
    recorder = _recorder(posted)
    recorder.record(_body("a"), "Normal", "Tested", "before")
    threads = [t for t in recorder._senders if t is not None]
    assert len(threads) == 1  # only the queue of "a" had an Event
    assert recorder.close(timeout_seconds=10)
    assert not threads[0].is_alive()
    recorder.record(_body("a"), "Normal", "Tested", "after")
    assert recorder.flush(timeout_seconds=10)
    assert posted == [("a", "before"), ("a", "after")]
    assert recorder.close(timeout_seconds=10)
