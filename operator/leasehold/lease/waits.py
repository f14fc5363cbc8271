"""Waiting for an event or a thread without timed waits on threading primitives.

Why this module exists: a timed wait on a Python threading primitive
(``Event.wait(t)``, ``Thread.join(t)``) never returns in a process whose
clock is interposed by libfaketime (how the chaos test skews a worker's or
the operator's clock: the wait's absolute deadline and the kernel's clock
disagree), while ``time.sleep`` and ``time.monotonic`` stay consistent
there. The worker SDK, ``leasehold run`` and the operator's lease watch
wait through these two functions; the cost is up to
:data:`WAIT_SLICE_SECONDS` of latency and ~50 wake-ups a second while
waiting.
"""

from __future__ import annotations

import threading
import time
from typing import Final

WAIT_SLICE_SECONDS: Final = 0.02
"""Longest single sleep while waiting (the wake-up latency)."""


def wait_for_event(event: threading.Event, timeout_seconds: float) -> bool:
    """``event.wait(timeout_seconds)`` made of short ``time.sleep`` slices.

    Args:
        event: the event to wait for.
        timeout_seconds: the longest wait (seconds; negative means zero).

    Returns:
        Whether the event is set.
    """
    deadline = time.monotonic() + max(0.0, timeout_seconds)
    while not event.is_set():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(WAIT_SLICE_SECONDS, remaining))
    return True


def join_thread(thread: threading.Thread, timeout_seconds: float) -> bool:
    """``thread.join(timeout_seconds)`` made of short ``time.sleep`` slices.

    Args:
        thread: the thread to wait for.
        timeout_seconds: the longest wait (seconds).

    Returns:
        Whether the thread has ended.
    """
    deadline = time.monotonic() + timeout_seconds
    while thread.is_alive():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(WAIT_SLICE_SECONDS, remaining))
    return True
