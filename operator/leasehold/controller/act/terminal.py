"""Hold a decided job's ``Complete``/``Failed`` until none of its pods is left running.

Why this module exists: both actors (single-lease and per-index) end a job
the same way, batch/v1's way: the interim condition at the decision, the
final one once the pods have terminated
(:mod:`leasehold.controller.plan.terminal` decides; this counts the pods).
Called under the job's lock, just before the status write.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from leasehold.controller.act.attempts import Attempts, ns_name
from leasehold.controller.act.context import Context, DecidedWait
from leasehold.controller.plan import terminal
from leasehold.lease.api import LeasedJob, LeasedJobStatus

log = logging.getLogger(__name__)

RELIST_SECONDS: Final = 10.0
"""How often a decided job's pods are listed again while it waits for them.

Between lists, the pod watch's memory counts them; a list now and then
mends what a watch that missed an event (a deletion during its re-list)
would otherwise keep counted until the grace bound: a pod it does not
return is gone."""


def settle(
    ctx: Context,
    attempts: Attempts,
    job: LeasedJob,
    body: dict[str, Any],
    status: LeasedJobStatus,
) -> terminal.Terminal:
    """The status to write for ``job``: planned, with batch/v1's interim conditions.

    The job's pods are listed only for a job that is decided (now or
    before) and not yet finished; a pull-mode job has no pods.

    Args:
        ctx: the shared edges and state.
        attempts: lists the job's pods.
        job: the LeasedJob as read (its status is the one before this plan).
        body: its raw body.
        status: the status planned.

    Returns:
        The :class:`~leasehold.controller.plan.terminal.Terminal`: the
        status, and when to look at the pods again if some are left.

    Raises:
        StoreError: the pod list failed.
    """
    before = job.status
    if not terminal.wants_pods(before, status):
        return terminal.Terminal(status)
    namespace, name = ns_name(body)
    key = (namespace, name, str(body["metadata"].get("uid", "")))
    now = ctx.monotonic()
    wait = ctx.decided_seen.get(key)
    # The pods are listed once at the decision (or after a restart), then
    # every RELIST_SECONDS; in between the pod watch's memory counts them (a
    # pod that ends triggers this reconcile). The 1 s poll of the wait used to
    # list each time: 5.9 pod LISTs per job on kind at 200 jobs.
    if wait is None:
        wait = ctx.decided_seen[key] = DecidedWait(since=now, listed_at=None)
    listed = wait.listed_at is None or now - wait.listed_at >= RELIST_SECONDS
    left = 0
    if job.spec.template is not None:
        uid = str(body["metadata"]["uid"])
        left = attempts.pods_left(namespace, name, owner_uid=uid, listed=listed)
    if listed:  # only once the list answered: a failed one is made again next time
        wait = ctx.decided_seen[key] = wait._replace(listed_at=now)
    settled = terminal.settle(
        job, before, status, left, now=ctx.now(), waited_seconds=now - wait.since
    )
    if settled.finished:
        ctx.decided_seen.pop(key, None)
        phase = settled.status.phase
        log.info("%s/%s: finished (%s); %d pod(s) left", namespace, name, phase, left)
    elif not terminal.decided(before):
        log.info(
            "%s/%s: decided (%s); Complete/Failed waits for %d pod(s) to terminate",
            namespace,
            name,
            status.phase,
            left,
        )
    return settled
