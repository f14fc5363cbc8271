"""After a job finished: delete it once its ``ttlSecondsAfterFinished`` passed.

Why this module exists: batch/v1's TTL-after-finished controller deletes a
finished Job and its pods; a LeasedJob does the same, measured without
comparing wall clocks (:class:`~leasehold.controller.engines.ttl.FinishClocks`),
and keeps its JobLease: the lease is the name's fencing domain.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime
from typing import Any

from leasehold.controller.act.attempts import Attempts, ns_name
from leasehold.controller.act.context import COMPONENT, Context
from leasehold.controller.engines.ttl import FinishClocks
from leasehold.controller.plan.retention import PodDeletion
from leasehold.controller.plan.single import Plan
from leasehold.lease.api import LeasedJob

log = logging.getLogger(__name__)


class Finisher:
    """Delete finished jobs whose ``ttlSecondsAfterFinished`` passed.

    Args:
        ctx: the shared edges and state.
        attempts: deletes the job's pods.
    """

    def __init__(self, ctx: Context, attempts: Attempts) -> None:
        self._ctx = ctx
        self._attempts = attempts
        self._clocks = FinishClocks(ctx.monotonic)

    def forget(self, namespace: str, name: str) -> None:
        """The job is gone: drop its clock."""
        self._clocks.forget(f"{namespace}/{name}")

    def after(
        self, job: LeasedJob, body: dict[str, Any], plan: Plan, server_now: datetime | None
    ) -> Plan:
        """Delete the job once its ``ttlSecondsAfterFinished`` passed, or look again then.

        Args:
            job: the job (validated ``body``).
            body: its raw body.
            plan: the plan carried out (its status is the job's now).
            server_now: the API server's time of the read, if it was a GET.

        Returns:
            ``plan``, to be looked at again when the TTL ends, if it has not.

        Raises:
            StoreError: a delete failed.
        """
        left = self._clocks.seconds_left(job, body, plan.status, server_now, COMPONENT)
        if left is not None and left <= 0:
            self._delete(job, body)
        elif left is not None:
            # The sooner of the two: a status write held back (coalesced) must
            # not wait for the TTL.
            after = plan.requeue_after_seconds
            plan = replace(plan, requeue_after_seconds=left if after is None else min(left, after))
        return plan

    def _delete(self, job: LeasedJob, body: dict[str, Any]) -> None:
        """Delete a finished job whose ``ttlSecondsAfterFinished`` passed, and its pods.

        Only this incarnation (a UID precondition); its pods are deleted here
        too, not left to the garbage collector. The JobLease stays: it is
        the name's fencing domain.
        """
        namespace, name = ns_name(body)
        uid = str(body["metadata"]["uid"])
        ttl = job.spec.ttl_seconds_after_finished
        self._ctx.events.record(
            body,
            "Normal",
            "TTLExpired",
            f"Deleting the job: it finished more than ttlSecondsAfterFinished={ttl}s ago"
            " (its JobLease stays, so the name's fencing tokens never repeat).",
        )
        self._attempts.delete_stale(namespace, name, PodDeletion(2**62), owner_uid=uid)
        self._ctx.jobs.delete(namespace, name, uid=uid)  # gone, or another incarnation: fine
        log.info("deleted %s/%s: ttlSecondsAfterFinished=%ss passed", namespace, name, ttl)
