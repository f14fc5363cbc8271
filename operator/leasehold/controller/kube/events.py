"""Kubernetes Events about the operator's objects: what happened and why, for people.

Why this module exists: every actor tells users what it did on the object it
did it to (``kubectl describe``, dashboards); an Event that cannot be recorded
is logged, never raised: it must not stop the work it reports. Events are
posted off the reconcile, as client-go's event broadcaster posts them off a
controller's sync: an Event's POST was a fifth of a job's first reconcile
(``bench/results.md``, the operator's profile at stop 41).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, Final, cast
from zlib import crc32

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from leasehold import names
from leasehold.controller.kube import REQUEST_TIMEOUT
from leasehold.lease.errors import api_message
from leasehold.lease.store import format_time

log = logging.getLogger(__name__)

MAX_MESSAGE: int = 1024
"""An Event's message is cut to this many characters."""


SENDERS: Final = 4
"""Threads posting Events; an object's Events all go through one of them, in order."""

QUEUED_PER_SENDER: Final = 250
"""Events waiting per sender; more are dropped and logged (client-go's
broadcaster queues 1,000 and drops beyond them too)."""


class EventRecorder:
    """Record core/v1 Events about objects, posted from threads of their own.

    :meth:`record` returns at once; :data:`SENDERS` threads (started on the
    first Event) post them. All Events about one object go through the same
    thread, so they are posted in the order they were recorded, and an Event
    seen in the API means every earlier Event about that object from this
    recorder was posted before it. An Event the API refuses, or whose POST
    times out, is logged and dropped; so is one recorded while
    :data:`QUEUED_PER_SENDER` wait on its thread (``on_dropped`` is called:
    the operator counts it in ``leasehold_events_dropped_total``).

    Args:
        api_client: a configured ``kubernetes.client.ApiClient`` (its pool
            needs a connection per sender, :data:`SENDERS`).
        component: the Events' ``source.component``.
        instance: their ``reportingInstance`` (this replica).
        clock: wall clock for the Events' timestamps.
        queued_per_sender: Events that may wait per thread.
        on_dropped: called (no arguments) for each Event dropped.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        component: str,
        instance: str,
        clock: Callable[[], datetime],
        queued_per_sender: int = QUEUED_PER_SENDER,
        on_dropped: Callable[[], None] = lambda: None,
    ) -> None:
        self._core = client.CoreV1Api(api_client)
        self._component = component
        self._instance = instance
        self._clock = clock
        self._on_dropped = on_dropped
        self._queues: list[queue.Queue[tuple[str, dict[str, Any]] | None]] = [
            queue.Queue(maxsize=queued_per_sender) for _ in range(SENDERS)
        ]
        self._senders: list[threading.Thread | None] = [None] * SENDERS
        """The thread posting each queue's Events (started with its first Event)."""
        self._lock = threading.Lock()

    def record(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """Queue an Event about ``obj`` to be posted; never raises, never waits.

        Args:
            obj: the involved object's body (needs apiVersion, kind, metadata).
            type_: ``Normal`` or ``Warning``.
            reason: CamelCase reason.
            message: what happened, for people (cut to :data:`MAX_MESSAGE`).
        """
        meta = obj.get("metadata", {})
        namespace, name = str(meta.get("namespace")), str(meta.get("name", "x"))
        stamp = format_time(self._clock()).split(".")[0] + "Z"
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{name}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "uid": meta.get("uid"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:MAX_MESSAGE],
            "source": {"component": self._component},
            "reportingComponent": f"{names.GROUP}/operator",
            "reportingInstance": self._instance[:128],
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        sender = crc32(f"{namespace}/{obj.get('kind')}/{name}".encode()) % SENDERS
        try:
            with self._lock:  # no close() between the thread's check and the put
                self._started(sender)
                self._queues[sender].put_nowait((namespace, event))
        except (queue.Full, RuntimeError):  # full, or no thread could be started
            self._on_dropped()
            log.warning(
                "dropped Event %s on %s/%s: %d Events wait to be posted",
                reason, namespace, name, self._queues[sender].qsize(),
            )  # fmt: skip

    def flush(self, timeout_seconds: float) -> bool:
        """Wait until every Event recorded so far was posted (or given up on).

        Args:
            timeout_seconds: the longest wait, in seconds.

        Returns:
            True when none is left to post; False when the time ran out first.
        """
        deadline = time.monotonic() + timeout_seconds
        for waiting in self._queues:
            with waiting.all_tasks_done:
                while waiting.unfinished_tasks:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    waiting.all_tasks_done.wait(left)
        return True

    def close(self, timeout_seconds: float) -> bool:
        """Post what is queued (within ``timeout_seconds``), then stop the threads.

        Events recorded after it are posted by new threads.

        Args:
            timeout_seconds: the longest wait for the queued Events, in seconds.

        Returns:
            True when every queued Event was posted or given up on; False
            when the time ran out (the threads are left to the process's end).
        """
        deadline = time.monotonic() + timeout_seconds
        if not self.flush(timeout_seconds):
            return False  # the threads are daemons: they end with the process
        stopping: list[threading.Thread] = []
        with self._lock:
            for i, waiting in enumerate(self._queues):
                running = self._senders[i]
                if running is not None:
                    # After what is queued; a queue filled again since the flush
                    # keeps its thread (a daemon), which posts on.
                    with contextlib.suppress(queue.Full):
                        waiting.put_nowait(None)
                        self._senders[i] = None
                        stopping.append(running)
        for sender in stopping:
            sender.join(max(0.0, deadline - time.monotonic()))
        return True

    def _started(self, sender: int) -> None:
        """Start queue ``sender``'s thread unless it runs (called under the lock).

        Started on the queue's first Event, again after :meth:`close`, and
        again should the thread have ended.
        """
        running = self._senders[sender]
        if running is not None and running.is_alive():
            return
        thread = threading.Thread(
            target=self._send, args=(self._queues[sender],), name=f"events-{sender}", daemon=True
        )
        thread.start()
        self._senders[sender] = thread

    def _send(self, waiting: queue.Queue[tuple[str, dict[str, Any]] | None]) -> None:
        """Post this thread's Events in order until :meth:`close` queues its stop."""
        while True:
            item = waiting.get()
            try:
                if item is None:
                    return
                self._post(*item)
            except Exception:  # the thread must go on with the next Event
                log.exception("could not record an Event")
            finally:
                waiting.task_done()

    def _post(self, namespace: str, event: dict[str, Any]) -> None:
        """POST one Event; a refusal, a timeout or a broken connection is logged."""
        reason, name = event["reason"], event["involvedObject"]["name"]
        try:
            self._core.create_namespaced_event(
                namespace, cast(Any, event), _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as exc:
            log.warning("could not record Event %s on %s: %s", reason, name, api_message(exc))
        except Exception as exc:  # a thread of its own: log it, go on with the next
            log.warning(
                "could not record Event %s on %s: %s: %s", reason, name, type(exc).__name__, exc
            )
