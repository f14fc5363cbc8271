"""Waits before a new token may be issued while an earlier holder may still run.

Why this module exists: a take-over (a job created again under its name), a
resume, and a schedule's ``Replace`` end a holder without judging its lease
expired, so its worker may still think it holds the lease until its own
deadline. The next token is issued only once this operator has seen the lease
unchanged for its ``leaseDurationSeconds`` plus the expiry margin, on the
expiry judge's monotonic clock: the bound a reclaim waits
(:func:`~leasehold.lease.protocol.hold_may_outlive`).
"""

from __future__ import annotations

import logging
from typing import Any

from leasehold.controller.act.context import Context
from leasehold.lease.protocol import hold_may_outlive
from leasehold.lease.store import Accepted, StoredLease, reclaim_note

log = logging.getLogger(__name__)


def clock_key(lease: StoredLease) -> str:
    """The lease's key on the expiry judge's clock: ``namespace/name/uid``."""
    meta = lease.body.get("metadata") or {}
    return f"{lease.namespace}/{lease.name}/{meta.get('uid')}"


def last_reclaim_reason(lease: StoredLease) -> str | None:
    """Why the lease's current token was taken back, if it was (the reclaim noted it).

    The note is in the lease's annotations, written by the reclaim itself
    (:func:`~leasehold.lease.store.reclaim_note`; an older operator's, on
    its status).

    Args:
        lease: the stored lease.

    Returns:
        ``LeaseExpired``, ``StartupDeadlineExceeded``, or ``None`` when the
        current token was not reclaimed (or the note is missing).
    """
    note = reclaim_note(lease.body)
    if note is None or note[0] != lease.record.fencing_token:
        return None
    return note[1]


class HoldWaits:
    """How long a take-over, a resume or a replacement waits for an earlier hold.

    Args:
        ctx: the shared edges and state (the store, Events, the expiry clock).
    """

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._told: dict[str, int] = {}
        """Lease key -> the generation whose wait was told in an Event (once each)."""

    def earlier_hold_wait(self, lease: StoredLease, body: dict[str, Any] | None = None) -> float:
        """Seconds to wait before making ``lease`` claimable again (0: now).

        A take-over or a resume must not let a new token be issued while the
        worker of the current one may still think it holds the lease (it
        was stopped or suspended, not judged expired: see
        :func:`~leasehold.lease.protocol.hold_may_outlive`). It waits until
        this operator has seen the lease unchanged for its
        ``leaseDurationSeconds`` plus the expiry margin, on the expiry
        judge's monotonic clock: the bound a reclaim waits. A fresh operator
        counts from its first sight, as for a reclaim.

        Args:
            lease: the lease as read, before the take-over or resume.
            body: the job, to tell the wait once in an Event (``None``: no Event).

        Returns:
            Seconds left (``0.0`` when the earlier hold surely ended or its
            window has passed).
        """
        key = clock_key(lease)
        left = self.hold_window_left(lease)
        if left <= 0:
            self._told.pop(key, None)
            return 0.0
        if lease.record.held and not lease.record.suspended:
            # A take-over of a lease its earlier incarnation's pod still holds:
            # stop it first (no renewal lands after this), then wait it out.
            stopped = self._ctx.store.stop(lease)
            if isinstance(stopped, Accepted):
                self._ctx.wrote_lease(stopped.lease)
            return self._ctx.lease_clock.remaining_if_seen(
                key, str(stopped.lease.generation), lease.record.lease_duration_seconds
            )
        if body is not None and self._told.get(key) != lease.generation:
            self._told[key] = lease.generation
            self._ctx.events.record(
                body,
                "Normal",
                "WaitingForEarlierHolder",
                f"The worker of fencing token {lease.record.fencing_token} may still run until"
                f" its lease window ends: the next token is issued in {left:.0f}s at the"
                " latest (the lease unchanged for leaseDurationSeconds plus the margin).",
            )
        log.info(
            "%s/%s: the holder of token %d was ended without expiry; next claim in %.1fs",
            lease.namespace,
            lease.name,
            lease.record.fencing_token,
            left,
        )
        return left

    def hold_window_left(self, lease: StoredLease) -> float:
        """Seconds until the earlier hold of ``lease`` has surely ended; no write, no Event.

        What :meth:`earlier_hold_wait` waits for, read alone (a cron job asks
        it before it prunes a replaced run's lease).

        Args:
            lease: the lease as read.

        Returns:
            ``0.0`` when the hold surely ended
            (:func:`~leasehold.lease.protocol.hold_may_outlive`), else the
            seconds left of its window on the expiry judge's clock (``<= 0``:
            passed).
        """
        if not hold_may_outlive(lease.record, reclaimed=last_reclaim_reason(lease) is not None):
            return 0.0
        return self._ctx.lease_clock.remaining_if_seen(
            clock_key(lease), str(lease.generation), lease.record.lease_duration_seconds
        )
