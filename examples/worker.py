"""An example worker in push mode, written with the leasehold SDK.

The operator created this pod with the lease already claimed for it and the
fencing token in its environment (``LEASEHOLD_FENCING_TOKEN``). The worker
renews in the background, works in small steps, checks its lease before each
step's effect, and records its outcome on the lease at the end.

On SIGTERM (its pod is being deleted, e.g. because its lease was reclaimed)
it stops working and still reports: the lease store, not the worker, decides
whether that report counts. A worker that was paused past its lease learns
here that its completion was rejected.

Run by the operator as: ``python examples/worker.py`` (env ``WORK_SECONDS``,
default 5).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from types import FrameType

from leasehold.worker import Accepted, LeaseHolder, LeaseLost, Outcome

stopping = False


def on_term(signum: int, frame: FrameType | None) -> None:
    """Stop after the current step."""
    global stopping
    stopping = True


def say(message: str) -> None:
    """Print one line in a single write (log lines from other threads don't split it)."""
    sys.stdout.write(message + "\n")
    sys.stdout.flush()


def main() -> int:
    """Work under the lease, then complete it. Returns the exit code."""
    signal.signal(signal.SIGTERM, on_term)
    work_seconds = float(os.environ.get("WORK_SECONDS", "5"))
    holder = LeaseHolder.from_env().start()
    token = holder.token
    say(f"working under fencing token {token} for {work_seconds:g}s")
    steps = max(1, int(work_seconds / 0.25))
    done = 0
    try:
        for _ in range(steps):
            if stopping:
                say("asked to stop: reporting what I have")
                break
            holder.check()  # before every effect: is the lease still mine?
            time.sleep(0.25)  # the effect (a fenced write would carry the token)
            done += 1
    except LeaseLost as lost:
        say(f"lease lost before an effect: {lost}; reporting anyway")
    outcome = Outcome.SUCCEEDED if done == steps else Outcome.FAILED
    result = holder.complete(outcome, message=f"{done}/{steps} steps")
    holder.close()
    if isinstance(result, Accepted):
        say(f"completed {outcome} under fencing token {token}")
        return 0
    say(f"completion under fencing token {token} REJECTED by the lease store: {result.rejection}")
    return 75


if __name__ == "__main__":
    sys.exit(main())
