"""Where ``leasehold run``'s start-up goes: one log line from process start to the command's start.

Why this module exists: a pod under ``leasehold run`` starts its command later
than the same command alone (an interpreter, the imports, the lease's
confirmation, the child). Which of those dominates depends on the machine's
load and on when the operator's claim lands, so the wrapper says it for every
run, in one line that people read and benchmarks parse (``bench/startup.py``).
Standard library only: it runs before the command does.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Final

STARTUP_PREFIX: Final = "start-up (s):"
"""How the line starts; ``key=value`` pairs follow (seconds, or counts for ``tries``/``reads``)."""

STEPS: Final = ("process", "imports", "environment", "confirm", "child")
"""The steps in order: interpreter start until the command line's ``main``; the
imports and argument parsing; the lease environment and the API client; the
confirm renewal (and any wait for the claim to land); starting the command."""


def process_age_seconds() -> float | None:
    """Seconds since this process started (``/proc/self/stat``, clock-tick resolution).

    Returns:
        The age, or ``None`` off Linux or when ``/proc`` cannot be read.
    """
    try:
        stat = open("/proc/self/stat", "rb").read()  # noqa: SIM115 - one read, closed by GC
        started_ticks = int(stat.rsplit(b")", 1)[1].split()[19])
        ticks = os.sysconf("SC_CLK_TCK")
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started_ticks / ticks)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


class StartupClock:
    """Marks on the monotonic clock, from the process's start to the command's.

    Args:
        main_at: the monotonic time the command line's ``main`` began.
        monotonic: the clock (injected for tests).
        age: the process's age at construction (default :func:`process_age_seconds`).
    """

    def __init__(
        self,
        main_at: float,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        age: float | None = None,
    ) -> None:
        self._monotonic = monotonic
        now = monotonic()
        if age is None:
            age = process_age_seconds()
        self.started_at = None if age is None else now - age
        """When the process started (monotonic), ``None`` when unknown."""
        self.marks: dict[str, float] = {"main": main_at}
        self.counts: dict[str, int] = {}

    def mark(self, step: str) -> None:
        """Note that ``step`` (one of :data:`STEPS` but ``process``) ended now."""
        self.marks[step] = self._monotonic()

    def count(self, name: str, value: int) -> None:
        """Note a count shown with the line (e.g. ``tries``: confirm renewals sent)."""
        self.counts[name] = value

    def line(self) -> str:
        """The start-up line: each step's seconds, the counts, and ``total``.

        Steps not marked are left out; ``process`` and ``total`` need the
        process's start (they are left out off Linux).
        """
        parts: list[str] = []
        previous = self.started_at
        order = ("main", *STEPS[1:])
        names = dict(zip(order, STEPS, strict=True))
        for mark in order:
            at = self.marks.get(mark)
            if at is None:
                continue
            if previous is not None:
                parts.append(f"{names[mark]}={at - previous:.3f}")
            previous = at
        parts += [f"{name}={value}" for name, value in self.counts.items()]
        last = max(self.marks.values())
        if self.started_at is not None:
            parts.append(f"total={last - self.started_at:.3f}")
        return f"{STARTUP_PREFIX} {' '.join(parts)}"


def parse_line(text: str) -> dict[str, float] | None:
    """The values of a start-up line found in ``text`` (a log), or ``None`` without one.

    Returns:
        ``{"process": 0.05, "imports": 0.12, ..., "tries": 1.0, "total": 0.4}``.
    """
    for line in text.splitlines():
        _, found, rest = line.partition(STARTUP_PREFIX)
        if not found:
            continue
        values: dict[str, float] = {}
        for pair in rest.split():
            key, _, value = pair.partition("=")
            try:
                values[key] = float(value)
            except ValueError:
                continue
        return values
    return None
