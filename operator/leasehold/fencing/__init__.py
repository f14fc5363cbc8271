"""Fencing at the target: reject effects carrying a stale token, and duplicates.

Why this package exists: a lease cannot stop a request that a stalled worker
already put on the wire. Only the target can: it keeps, per resource, the
highest fencing token it has accepted, and refuses any effect whose token is
lower (Kleppmann, "How to do distributed locking", 2016: "fencing tokens").
An idempotency key ``(job, token, step)`` also refuses an effect that was
already applied (a retry after a lost reply).

The rule, for one resource key:

* token **lower** than the highest accepted → rejected (:class:`StaleToken`);
* token equal or higher → accepted; the highest becomes this token;
* an idempotency key seen before → rejected (:class:`DuplicateEffect`).

Here: the rule as pure functions and an in-memory :class:`MemoryFence` (for
single-process targets and tests; it forgets on restart). Ready targets: :mod:`.postgres` (the fence
in the same transaction as the effect), :mod:`.http` (ASGI middleware), and
``deploy/fencing/`` (a ValidatingAdmissionPolicy for Kubernetes objects).

A fence gives ordering, not exactly-once: a lower-token effect that reached
the target *before* the higher token did was accepted, as it should be. And
it refuses an old token only once a newer one has reached it: after a job's
last attempt no newer token comes. A target that can read the lease learns
of that end from :mod:`.revocation`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Final

HEADER_TOKEN: Final = "Leasehold-Fencing-Token"
"""HTTP header carrying the writer's fencing token."""
HEADER_RESOURCE: Final = "Leasehold-Resource"
"""HTTP header naming the resource key the token guards."""
HEADER_IDEMPOTENCY: Final = "Idempotency-Key"
"""HTTP header carrying the effect's idempotency key."""


class FenceError(Exception):
    """An effect was refused by a fence."""


class StaleToken(FenceError):  # noqa: N818 - names the outcome, like the protocol's
    """The effect's token is lower than the highest accepted for its resource.

    Attributes:
        resource: the resource key.
        token: the refused token.
        current: the highest token accepted so far.
    """

    def __init__(self, resource: str, token: int, current: int) -> None:
        super().__init__(
            f"stale fencing token {token} for {resource!r}: token {current} was already accepted"
        )
        self.resource = resource
        self.token = token
        self.current = current


class DuplicateEffect(FenceError):  # noqa: N818
    """The effect's idempotency key was applied before.

    Attributes:
        idempotency_key: the key.
    """

    def __init__(self, idempotency_key: str) -> None:
        super().__init__(f"effect {idempotency_key!r} was already applied")
        self.idempotency_key = idempotency_key


def idempotency_key(job: str, token: int, step: str, *, index: int | None = None) -> str:
    """The idempotency key of one effect: ``job/token/step`` (``job/index-i/token/step``).

    Args:
        job: the job's name (``namespace/name`` to be unique cluster-wide).
        token: the fencing token the effect runs under.
        step: the effect's name within the attempt (e.g. ``"charge-card"``).
        index: an Indexed job's completion index: each index has tokens of its
            own (its own lease), so the index is part of the key.

    Returns:
        e.g. ``"default/payout/8/charge-card"``, ``"default/payout/index-3/8/charge-card"``.
    """
    if index is not None:
        return f"{job}/index-{index}/{token}/{step}"
    return f"{job}/{token}/{step}"


def index_resource(resource: str, index: int | None) -> str:
    """The fence's resource key for an effect of one index of an Indexed job.

    Each index of an Indexed job is its own fencing domain: its tokens count
    from its own lease, so a fence must compare them only with that index's.
    The key keeps a resource's writes of different indexes apart.

    Args:
        resource: what the effect writes, e.g. ``"account/42"``.
        index: the completion index, or ``None`` for a job with one lease.

    Returns:
        ``resource`` itself without an index, else ``"<resource>#index-<i>"``.
    """
    return resource if index is None else f"{resource}#index-{index}"


def admits(highest: int | None, token: int) -> bool:
    """The fence rule: is ``token`` acceptable after ``highest``?

    Args:
        highest: the highest token accepted for the resource, ``None`` if none.
        token: the token of the effect.

    Returns:
        ``True`` when the token is not lower than the highest.
    """
    return highest is None or token >= highest


@dataclass(frozen=True)
class Admitted:
    """An effect the fence let through.

    Attributes:
        resource: the resource key.
        token: the effect's token (now the highest for the resource).
        previous: the highest token before, ``None`` for the first effect.
    """

    resource: str
    token: int
    previous: int | None


class MemoryFence:
    """A fence in memory, for a target that is one process.

    Thread-safe. :meth:`admit` checks and records in one step, so two
    concurrent effects on one resource are ordered by the fence.

    It forgets everything when its process ends: a restarted target accepts
    any token again (a stale one included) and re-applies any key until a
    newer token reaches it. A target whose effects outlive its process needs
    a durable fence, kept with the effects (the PostgreSQL target), or must
    start from the bars it saved.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._highest: dict[str, int] = {}
        self._applied: set[str] = set()

    def highest(self, resource: str) -> int | None:
        """The highest token accepted for ``resource``, or ``None``."""
        with self._lock:
            return self._highest.get(resource)

    def _check(self, resource: str, token: int, idempotency_key: str | None) -> int | None:
        previous = self._highest.get(resource)
        if not admits(previous, token):
            assert previous is not None
            raise StaleToken(resource, token, previous)
        if idempotency_key is not None and idempotency_key in self._applied:
            raise DuplicateEffect(idempotency_key)
        return previous

    def check(self, resource: str, token: int, idempotency_key: str | None = None) -> int | None:
        """Refuse what :meth:`admit` would refuse; record nothing.

        For targets that apply the effect between a check and a record (the
        HTTP middleware): they must hold a per-resource lock across both.

        Args:
            resource: the resource key the effect writes.
            token: the writer's fencing token.
            idempotency_key: the effect's key, if it has one.

        Returns:
            The highest token accepted so far, ``None`` if none.

        Raises:
            StaleToken: a higher token was accepted for ``resource`` before.
            DuplicateEffect: ``idempotency_key`` was applied before.
        """
        with self._lock:
            return self._check(resource, token, idempotency_key)

    def record(self, resource: str, token: int, idempotency_key: str | None = None) -> Admitted:
        """Check again and record an applied effect, in one step.

        Args:
            resource: the resource key the effect wrote.
            token: the effect's fencing token.
            idempotency_key: the effect's key, if it has one.

        Returns:
            What was admitted.

        Raises:
            StaleToken: a higher token was accepted for ``resource`` before.
            DuplicateEffect: ``idempotency_key`` was applied before.
        """
        with self._lock:
            previous = self._check(resource, token, idempotency_key)
            if idempotency_key is not None:
                self._applied.add(idempotency_key)
            self._highest[resource] = token
            return Admitted(resource, token, previous)

    def admit(self, resource: str, token: int, idempotency_key: str | None = None) -> Admitted:
        """Check an effect and record it as accepted, in one step, before it is applied.

        :meth:`record` under the name of a target that admits first and then
        applies: the arguments (``token`` is the writer's), the result and the
        errors are :meth:`record`'s.
        """
        return self.record(resource, token, idempotency_key)
