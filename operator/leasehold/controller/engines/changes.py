"""What one JobLease watch event changed, as the operator sees it.

Why this module exists: the expiry engine decides from it whether a job needs
a reconcile, and the metrics count claims, renewals and held leases from it;
both read the same few spec fields, named here once. Built from the raw watch
body (no pydantic parse per event: there may be a thousand a second).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class LeaseSignature:
    """The spec fields whose change a job's reconcile must see.

    Attributes:
        holder_identity: ``spec.holderIdentity``, ``None`` when unheld.
        fencing_token: ``spec.fencingToken`` (``0`` before the first claim).
        completed: ``spec.completion`` is set (it is written once, never changed).
        max_fencing_token: ``spec.maxFencingToken``, ``None`` for no cap.
        job_uid: ``spec.jobUID``, the job incarnation the lease serves.
        deleting: ``metadata.deletionTimestamp`` is set (the lease is kept by
            its fencing-domain finalizer until its namespace goes).
    """

    holder_identity: str | None
    fencing_token: int
    completed: bool
    max_fencing_token: int | None
    job_uid: str | None = None
    deleting: bool = False

    @classmethod
    def of(cls, spec: dict[str, Any], metadata: dict[str, Any] | None = None) -> LeaseSignature:
        """The signature of a raw JobLease ``spec`` (and ``metadata``) dict."""
        cap = spec.get("maxFencingToken")
        return cls(
            holder_identity=spec.get("holderIdentity"),
            fencing_token=int(spec.get("fencingToken") or 0),
            completed=spec.get("completion") is not None,
            max_fencing_token=None if cap is None else int(cap),
            job_uid=spec.get("jobUID"),
            deleting=(metadata or {}).get("deletionTimestamp") is not None,
        )

    @property
    def held(self) -> bool:
        """Someone holds the lease and its job is not completed."""
        return self.holder_identity is not None and not self.completed


@dataclass(frozen=True)
class LeaseChange:
    """What one JobLease watch event changed.

    Attributes:
        before: the signature seen last, ``None`` at first sight.
        after: the signature now, ``None`` when the lease was deleted.
        generation_changed: the spec changed since the last event.
    """

    before: LeaseSignature | None
    after: LeaseSignature | None
    generation_changed: bool

    @property
    def needs_reconcile(self) -> bool:
        """Holder, token, completion, cap, incarnation or deletion changed, or new or gone."""
        return self.before != self.after

    @property
    def ends_attempt(self) -> bool:
        """The change finishes something its job's reconcile must write at once.

        The completion was recorded (the job, or one of its indexes, is done
        unless a failure policy retries it), or a held lease is held no more
        (released, reclaimed, stopped) or went. The work queue runs such
        reconciles before the starts waiting with them
        (:class:`~leasehold.controller.engines.queue.WorkQueue`).
        """
        if self.after is not None and self.after.completed:
            return self.before is None or not self.before.completed
        held_before = self.before is not None and self.before.held
        return held_before and (self.after is None or not self.after.held)
