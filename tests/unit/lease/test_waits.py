"""Waiting without timed waits on threading primitives (leasehold.lease.waits)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from leasehold.lease import waits


def test_wait_for_event_returns_when_set_or_at_the_timeout() -> None:
    event = threading.Event()
    assert waits.wait_for_event(event, 0.05) is False
    threading.Timer(0.05, event.set).start()
    assert waits.wait_for_event(event, 5.0) is True


def test_join_thread_returns_when_the_thread_ends_or_at_the_timeout() -> None:
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    assert waits.join_thread(thread, 0.05) is False
    stop.set()
    assert waits.join_thread(thread, 5.0) is True
    assert not thread.is_alive()


FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


def test_waits_work_in_a_process_with_a_faked_clock() -> None:
    """The chaos test skews workers' clocks with libfaketime; their waits must return.

    (With libfaketime 0.9.10 here, ``threading.Event().wait(0.2)`` does not.)
    """
    env = {**os.environ, "LD_PRELOAD": str(FAKETIME_LIB), "FAKETIME": "+1h"}
    script = "import threading; from leasehold.lease.waits import wait_for_event as w; "
    ours = subprocess.run(
        [sys.executable, "-c", script + "print(w(threading.Event(), 0.2))"],
        env=env,
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert ours.stdout.strip() == "False", ours.stderr
