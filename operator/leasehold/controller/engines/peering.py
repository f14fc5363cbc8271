"""Whether this replica may act: Kopf's peering rule, for work done outside Kopf.

Why this module exists: with ``replicas > 1`` Kopf peering keeps one replica
working and pauses the others, but it pauses only what Kopf runs. The lease
watch (:mod:`leasehold.controller.engines.watching`) and the expiry timers run outside Kopf, so a
paused replica would still trigger reconciles and reclaims. The lease store's
compare-and-swap writes keep that *safe* (a second operator can never
double-claim), but two replicas working at once is waste and noise. This
module reads the same peering objects Kopf uses and applies Kopf's own rule,
so the work outside Kopf pauses and resumes with it.

The rule, as in Kopf 1.45 (``kopf/_core/engines/peering.py``,
``process_peering_event``): peers are the entries of the peering object's
``status`` (``{identity: {priority, lifetime, lastseen}}``); a peer is dead
once ``lastseen + lifetime`` has passed. This replica pauses while any other
live peer has a higher priority, or the same priority (Kopf then pauses all
of them and warns). With mandatory peering Kopf starts paused until it has
seen the peering object; so does this gate.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import logging
import os
import random
import socket
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from leasehold.controller.engines.watching import EventType, WatchEvent

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Verdict:
    """What one peering object says about this replica.

    Attributes:
        active: this replica may work.
        blockers: the live peers that pause it (identities).
        recheck_at: when the earliest blocking peer dies if it is not seen
            again (``None`` when nothing blocks).
    """

    active: bool
    blockers: tuple[str, ...] = ()
    recheck_at: datetime | None = None


def judge(status: Mapping[str, Any], identity: str, priority: int, now: datetime) -> Verdict:
    """Apply Kopf's peering rule to one peering object's ``status``.

    Args:
        status: the object's ``status``: ``{identity: {"priority": int,
            "lifetime": seconds, "lastseen": ISO 8601}}``; malformed entries
            are ignored.
        identity: this replica's peering identity (it never blocks itself).
        priority: this replica's priority.
        now: the current wall-clock time (timezone-aware).

    Returns:
        The verdict: inactive while a live peer has a higher or equal priority.
    """
    blockers: list[str] = []
    deadlines: list[datetime] = []
    for peer, info in status.items():
        if peer == identity or not isinstance(info, Mapping):
            continue
        try:
            # Kopf counts a peer without ``lastseen`` as seen now.
            seen = info.get("lastseen")
            lastseen = datetime.fromisoformat(str(seen)) if seen is not None else now
            lifetime = timedelta(seconds=int(info.get("lifetime", 60)))
            peer_priority = int(info.get("priority", 0))
        except (KeyError, TypeError, ValueError):
            continue
        if lastseen.tzinfo is None:
            lastseen = lastseen.replace(tzinfo=UTC)
        deadline = lastseen + lifetime
        if deadline <= now or peer_priority < priority:
            continue
        blockers.append(peer)
        deadlines.append(deadline)
    if not blockers:
        return Verdict(True)
    return Verdict(False, tuple(sorted(blockers)), min(deadlines))


def own_identity() -> str:
    """This replica's peering identity, made like Kopf's.

    ``$POD_ID`` when set (the chart sets it to the pod name), else
    ``user@host/timestamp/random`` — unique per process start.

    Returns:
        The identity string (passed to Kopf too, so both agree).
    """
    pod = os.environ.get("POD_ID")
    if pod:
        return pod
    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
    rnd = "".join(random.choices(string.ascii_lowercase + string.digits, k=3))
    return f"{getpass.getuser()}@{socket.gethostname()}/{stamp}/{rnd}"


class ActivityGate:
    """Open while this replica may work; closed while a peer outranks it.

    Args:
        identity: this replica's peering identity.
        priority: this replica's peering priority.
        peering_name: the name of the peering objects to follow.
        standalone: no peering: the gate is always open.
        clock: wall clock (peers' ``lastseen`` are wall-clock times).

    Feed it the peering objects' watch events with :meth:`observe`; run
    :meth:`run` to re-judge when a blocking peer's lifetime ends without a
    new event. Await :meth:`wait_open` before working.
    """

    def __init__(
        self,
        identity: str,
        priority: int,
        peering_name: str,
        *,
        standalone: bool,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.identity = identity
        self._priority = priority
        self._name = peering_name
        self._standalone = standalone
        self._clock = clock
        self._statuses: dict[str, Mapping[str, Any]] = {}
        self._expected: set[str] = set()
        self._open = asyncio.Event()
        self._changed = asyncio.Event()
        self._on_open: list[Callable[[], None]] = []
        if standalone:
            self._open.set()

    @property
    def is_open(self) -> bool:
        """Whether this replica may work now."""
        return self._open.is_set()

    def expect(self, where: str) -> None:
        """Require a peering object in namespace ``where`` (``""``: the cluster-scoped one)."""
        self._expected.add(where)

    def on_open(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` on the loop each time the gate opens."""
        self._on_open.append(listener)

    async def wait_open(self) -> None:
        """Return once the gate is open."""
        await self._open.wait()

    def observe(self, event: WatchEvent) -> None:
        """Note a (Cluster)KopfPeering watch event and re-judge."""
        meta = event.body.get("metadata", {})
        if meta.get("name") != self._name:
            return
        where = str(meta.get("namespace") or "")
        if event.type is EventType.DELETED:
            return  # Kopf keeps its last verdict when the object goes; so does this gate
        self._statuses[where] = event.body.get("status") or {}
        self._judge()

    def _judge(self) -> Verdict:
        if self._standalone:
            return Verdict(True)
        now = self._clock()
        verdicts = [
            judge(self._statuses[where], self.identity, self._priority, now)
            if where in self._statuses
            else Verdict(False)  # not seen yet: Kopf waits too
            for where in sorted(self._expected)
        ]
        active = all(v.active for v in verdicts)
        blockers = tuple(b for v in verdicts for b in v.blockers)
        rechecks = [v.recheck_at for v in verdicts if v.recheck_at is not None]
        verdict = Verdict(active, blockers, min(rechecks) if rechecks else None)
        if active and not self._open.is_set():
            log.info("peering: this replica (%s) is active; resuming lease work", self.identity)
            self._open.set()
            for listener in self._on_open:
                listener()
        elif not active and self._open.is_set():
            log.info("peering: pausing lease work in favour of %s", ", ".join(blockers))
            self._open.clear()
        self._changed.set()
        return verdict

    async def run(self) -> None:
        """Re-judge when a blocking peer's lifetime runs out; runs until cancelled."""
        while True:
            self._changed.clear()
            verdict = self._judge()
            self._changed.clear()
            timeout = None
            if verdict.recheck_at is not None:
                timeout = max(0.0, (verdict.recheck_at - self._clock()).total_seconds()) + 0.1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=timeout)
