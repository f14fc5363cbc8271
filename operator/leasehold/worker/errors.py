"""How a worker learns that its lease is gone, and what a bad lease environment raises."""

from __future__ import annotations

import enum

from leasehold.lease.protocol import Rejection


class LossReason(enum.StrEnum):
    """Why a holder lost its lease when no protocol rejection says so."""

    DEADLINE_PASSED = "DeadlinePassed"
    """The local deadline passed without a successful renewal."""
    LEASE_DELETED = "LeaseDeleted"
    """The JobLease is gone (its LeasedJob was deleted)."""
    ENDED = "Ended"
    """This holder completed or released the lease itself."""


class LeaseLost(Exception):  # noqa: N818 - it names an event, like KeyboardInterrupt
    """The lease is no longer held: stop producing effects now.

    Attributes:
        reason: a :class:`~leasehold.lease.protocol.Rejection` when the store
            refused the holder (``STALE_TOKEN``, ``NOT_HOLDER``,
            ``COMPLETED``), else a :class:`LossReason`.
        detail: human-readable context (may be empty).
    """

    def __init__(self, reason: Rejection | LossReason, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else str(reason))
        self.reason = reason
        self.detail = detail

    def again(self) -> LeaseLost:
        """Return a fresh copy to raise once more (re-raising one object grows its traceback)."""
        return LeaseLost(self.reason, self.detail)


class LeaseEnvironmentError(ValueError):
    """A ``LEASEHOLD_*`` variable the holder needs is missing or malformed."""
