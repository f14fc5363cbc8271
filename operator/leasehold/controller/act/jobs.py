"""The single-job actor: read a LeasedJob and its lease, plan, carry the plan out.

Why this module exists: :mod:`leasehold.controller.plan.single` decides,
purely; this actor reads what the decision needs (the job, its lease, its
pods, through the engines' caches), carries the plan out (create or take over
the lease, claim, start or delete pods, stop, suspend, resume, retry, excuse)
through the lease store and :mod:`leasehold.controller.kube`, records the
plan's Events and writes the job's status. A job with several completions is
handed to :class:`~leasehold.controller.act.indexed.IndexedActor`. Kopf
handlers trigger :meth:`JobActor.reconcile` through the work queue and hold no
logic themselves.

All calls are blocking (the official client); the controller runs them in
threads, one job at a time (:class:`~leasehold.controller.engines.locks.JobLocks`);
across processes every lease write is a compare-and-swap.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final

from pydantic import ValidationError

from leasehold import names
from leasehold.controller.act import domain, terminal
from leasehold.controller.act.attempts import Attempts, ns_name
from leasehold.controller.act.context import Context
from leasehold.controller.act.domain import mode, work_item
from leasehold.controller.act.finish import Finisher
from leasehold.controller.act.holds import HoldWaits, last_reclaim_reason
from leasehold.controller.act.indexed import DEFAULT_STEP_WORKERS, IndexedActor
from leasehold.controller.act.queue import RECHECK_KUEUE_SECONDS, QueueActor, Queued, Told
from leasehold.controller.act.status import (
    report_invalid,
    report_lease_name_taken,
    with_pod_counts,
    with_selector,
    write_status_soon,
)
from leasehold.controller.engines.deadline import JobClocks
from leasehold.controller.plan import indexed, managed_by, queueing
from leasehold.controller.plan import single as planner
from leasehold.controller.plan.pod import lease_name
from leasehold.controller.plan.queueing import State
from leasehold.controller.plan.single import Action, Plan
from leasehold.lease.api import LeasedJob, LeasedJobStatus
from leasehold.lease.errors import LeaseNotFoundError, TransientStoreError, WriteRefusedError
from leasehold.lease.leaseops import stored_from_body
from leasehold.lease.store import Accepted, Result, StoredLease, new_lease_body, to_stored

log = logging.getLogger(__name__)

MAX_REPLANS: Final = 5
"""Plans one reconcile may make while the lease moves under its writes."""


@dataclass(frozen=True)
class Replan:
    """The lease moved under a write, or was just written: plan again on it."""

    lease: StoredLease


class JobActor:
    """Reconcile LeasedJobs: one step closer to done per call, and the status told.

    Args:
        ctx: the shared edges and state.
        holds: the waits before a take-over or a resume issues a new token.
        attempts: starts attempts' pods (shared with the indexed actor).
        queue: the Workloads of jobs queued by Kueue (``None``: no job is
            queued, as in tests that wire no Kueue edge).
        step_workers: index steps of Indexed jobs run at once
            (:class:`~leasehold.controller.act.indexed.IndexedActor`).
    """

    def __init__(
        self,
        ctx: Context,
        holds: HoldWaits,
        attempts: Attempts,
        queue: QueueActor | None = None,
        *,
        step_workers: int = DEFAULT_STEP_WORKERS,
    ) -> None:
        self._ctx = ctx
        self._queue = queue
        self._holds = holds
        self._attempts = attempts
        self._clocks = JobClocks(ctx.monotonic)
        self._finisher = Finisher(ctx, attempts)
        self.indexed = IndexedActor(ctx, holds, attempts, step_workers)
        """The index leases of jobs with several completions."""
        self._foreign: dict[str, str] = {}
        """``namespace/name`` to the UID of a job another controller manages, once told."""

    # -- reading ------------------------------------------------------------------

    def _read_job(
        self, namespace: str, name: str, fresh: bool = False
    ) -> tuple[dict[str, Any] | None, datetime | None]:
        """The job's body and the API server's time when it answered (``Date`` header).

        From the job cache (no server time) once this process measures the job's
        age (:class:`~leasehold.controller.engines.deadline.JobClocks`): only the
        first sight needs the server's clock. ``fresh``: always a GET (its
        answer, or its absence, replaces what the cache held).
        """
        cache = self._ctx.job_cache
        cached = None if fresh else cache.get(namespace, name)
        if cached is not None:
            uid = str((cached.get("metadata") or {}).get("uid", ""))
            if self._clocks.knows(f"{namespace}/{name}", uid):
                return cached, None
        body, server_now = self._ctx.jobs.read(namespace, name)
        if body is None:
            cache.drop(namespace, name)
            return None, None
        if fresh:
            # put keeps a newer version a watch event brought meanwhile: dropping
            # it first would let this older read replace it, and a reconcile
            # for that newer version would plan on this one.
            cache.put(body)
        return body, server_now

    def _elapsed(self, job: LeasedJob, server_now: datetime | None) -> float:
        """How long the job has existed (API server clocks, then this process's monotonic)."""
        meta = job.metadata
        created = meta.get("creationTimestamp")
        if not created:
            return 0.0
        return self._clocks.elapsed_seconds(
            f"{meta.get('namespace')}/{meta.get('name')}",
            str(meta.get("uid", "")),
            datetime.fromisoformat(str(created).replace("Z", "+00:00")),
            server_now,
        )

    def _cached_lease(self, namespace: str, name: str) -> StoredLease | None:
        """The job's lease as the lease cache holds it; ``None``: a miss, not yet confirmed.

        A stale body is caught by the write it leads to (``test`` ops,
        ``resourceVersion``), which re-reads. A miss is confirmed by
        :meth:`_confirmed_lease` before anything but the lease's create is
        planned on it: the watch's first LIST may still be on its way through
        the event loop, and a job cancelled "before any attempt" must not be
        judged so while its lease exists. The create needs no such read: it
        is its own check (an existing lease answers 409, read then).
        """
        cached = self._ctx.lease_cache.get(namespace, lease_name(name))
        return to_stored(cached) if cached is not None else None

    def _confirmed_lease(self, namespace: str, name: str) -> StoredLease | None:
        """The job's lease read with a GET (a cache miss confirmed); ``None``: none exists."""
        try:
            return self._ctx.store.get(namespace, lease_name(name))
        except LeaseNotFoundError:
            return None

    # -- reconcile ----------------------------------------------------------------

    def reconcile(self, namespace: str, name: str) -> Plan | None:
        """Bring one LeasedJob one step closer to done, and report its status.

        Args:
            namespace: the job's namespace.
            name: the job's name.

        Returns:
            The plan that was carried out, or ``None`` if the job is gone or
            invalid (an invalid job gets a ``Ready=False`` condition and an
            Event instead).

        Raises:
            TransientStoreError: the API server failed; call again later.
            StoreError: an unexpected refusal (e.g. RBAC).
        """
        with self._ctx.locks.hold(namespace, name):
            try:
                return self._reconcile(namespace, name, fresh=False)
            except LeaseNotFoundError as exc:
                # A write found the cached lease gone (deleted between two
                # watches): forget it, so the next try reads the truth.
                self._ctx.lease_cache.drop(namespace, lease_name(name))
                raise TransientStoreError(f"reconcile {namespace}/{name}: {exc}") from exc

    def _reconcile(self, namespace: str, name: str, fresh: bool) -> Plan | None:
        """:meth:`reconcile`, under the job's lock; ``fresh``: GET the job, not the cache.

        A plan made on the cached job that would act (claim, start a pod, stop,
        take over, ...) is made again on a fresh read first: a cache that
        missed the job's deletion or recreation (a paused peer, a re-list)
        must never lead to a write for an incarnation that is gone. Status
        writes need no such read: they are conditioned on the version read.
        """
        body, server_now = self._read_job(namespace, name, fresh=fresh)
        if body is None:
            self._gone(namespace, name)
            return None
        manager = managed_by.foreign_manager(body)
        if manager is not None:
            if server_now is None and not fresh:  # it may retire a lease: read it first
                return self._reconcile(namespace, name, fresh=True)
            self._leave_alone(body, manager)
            return None
        try:
            job = LeasedJob.model_validate(body)
        except ValidationError as exc:
            report_invalid(self._ctx, body, exc)
            return None
        if indexed.is_multi(job) and server_now is None and not fresh:
            return self._reconcile(namespace, name, fresh=True)  # its plans act per index
        queued = self._queue.gate(job, fresh=fresh) if self._queue is not None else None
        if queued is not None and queued.writes and not fresh:  # Workload writes: read first
            return self._reconcile(namespace, name, fresh=True)
        gate, record = (queued.gate, queued.record) if queued else (None, None)
        told = Told(gate, job.spec.suspend, record)
        stored, job = job, queueing.effective_job(job, told.gate)
        if indexed.is_multi(job):  # one lease per index: act/indexed.py (on a fresh read)
            plan = self.indexed.reconcile(job, body, self._elapsed(job, server_now), told)
            plan = self._after_queue(stored, queued, plan, acted=False)
            return self._finisher.after(job, body, plan, server_now)
        planned = self._plan_and_act(job, body, server_now, fresh)
        if planned is None:
            return None
        if not isinstance(planned, Plan):  # a cached plan would act: read the job first
            return self._reconcile(namespace, name, fresh=True)
        settled = terminal.settle(self._ctx, self._attempts, job, body, planned.status)
        planned = replace(
            planned,
            status=settled.status,
            requeue_after_seconds=_sooner(
                planned.requeue_after_seconds, settled.requeue_after_seconds
            ),
        )
        planned = told.plan(planned, self._ctx.now(), job.metadata.get("generation"))
        for event in planned.events:
            self._ctx.events.record(body, event.type, event.reason, event.message)
        counted = with_pod_counts(self._ctx, job, with_selector(job, planned.status))
        planned = replace(planned, status=counted)
        wrote = write_status_soon(self._ctx, namespace, name, body, planned.status)
        if wrote.held_seconds is not None:  # counts alone moved: written when it is due
            planned = replace(
                planned,
                requeue_after_seconds=_sooner(planned.requeue_after_seconds, wrote.held_seconds),
            )
        planned = self._after_queue(
            stored, queued, planned, acted=planned.action is not Action.NONE
        )
        plan = self._finisher.after(job, body, planned, server_now)
        if not wrote.ok and server_now is None:
            # Planned on a cached body that was stale: read it (a GET) and plan again.
            plan = replace(plan, requeue_after_seconds=0.0)
        return plan

    def _after_queue(
        self, job: LeasedJob, queued: Queued | None, plan: Plan, *, acted: bool
    ) -> Plan:
        """Tell a queued job's Workload how the job went (finished; stopped after an eviction).

        ``acted``: the plan wrote a lease or deleted pods (the Workload then
        keeps its quota at least until the next reconcile).
        """
        if queued is None or self._queue is None:
            return plan
        again = self._queue.after(job, queued, plan.status, acted=acted)
        if queued.gate.state is State.UNAVAILABLE:  # Kueue may be installed meanwhile
            again = _sooner(again, RECHECK_KUEUE_SECONDS)
        if again is None:
            return plan
        return replace(plan, requeue_after_seconds=_sooner(plan.requeue_after_seconds, again))

    def _plan_and_act(
        self, job: LeasedJob, body: dict[str, Any], server_now: datetime | None, fresh: bool
    ) -> Plan | bool | None:
        """Plan on the lease and carry the plan out, again while the lease moves.

        Returns:
            The plan carried out; ``False`` when a plan made on the cached job
            would act (read the job and plan again); ``None`` when the job
            cannot run (its lease name is another job's: reported).
        """
        namespace, name = ns_name(body)
        lease = self._cached_lease(namespace, name)
        miss_read = False  # a cache miss is read (GET) at most once per reconcile
        for _ in range(MAX_REPLANS):
            if lease is not None:
                domain.release_if_namespace_goes(self._ctx, lease)
                if lease.record.job_name != name:  # an index lease of job <name minus -i>
                    report_lease_name_taken(self._ctx, job, body, lease)
                    return None
            plan = self._plan(job, lease, server_now)
            if plan.action is not Action.NONE and server_now is None and not fresh:
                return False
            if lease is None and not miss_read and plan.action is not Action.CREATE_LEASE:
                miss_read = True  # the create is its own check; any other plan reads first
                lease = self._confirmed_lease(namespace, name)
                continue  # plan again on what the GET found
            done = self._carry_out(job, body, lease, plan, server_now)
            if isinstance(done, Replan):
                lease = done.lease  # e.g. a completion landed before our stop: it wins
                continue  # its job name is checked at the loop's top
            return done
        raise TransientStoreError(f"reconcile {namespace}/{name}: lease kept moving")

    def _plan(self, job: LeasedJob, lease: StoredLease | None, server_now: datetime | None) -> Plan:
        """The pure plan for ``job`` on ``lease``, with the pods read if it needs them."""
        namespace, name = str(job.metadata["namespace"]), str(job.metadata["name"])
        status = job.status or LeasedJobStatus()
        record = lease.record if lease else None
        holder = record.holder_identity if record else None
        pods = None
        if planner.wants_pod_facts(job, record):
            listed = record is not None and planner.pod_facts_judge_an_end(record)
            uid = str(job.metadata.get("uid", ""))
            pods = self._attempts.pod_facts(namespace, name, owner_uid=uid, listed=listed)
        return planner.plan(
            job,
            record,
            now=self._ctx.now(),
            pod_created_for_holder=holder is not None and status.pod_name == holder,
            elapsed_seconds=self._elapsed(job, server_now),
            last_reclaim_reason=last_reclaim_reason(lease) if lease else None,
            pods=pods,
        )

    # -- carrying a plan out ------------------------------------------------------

    def _carry_out(
        self,
        job: LeasedJob,
        body: dict[str, Any],
        lease: StoredLease | None,
        plan: Plan,
        server_now: datetime | None,
    ) -> Plan | Replan:
        """Carry out one plan: the lease write first, then the pods.

        ``server_now`` is the API server's time of the job's read (the
        first attempt folded into the lease's create plans with it).

        Returns:
            The plan as carried out (its status may say more, e.g. a quota), or
            :class:`Replan` when the lease was written or moved and the next
            step is planned on it in the same reconcile.
        """
        if lease is None or plan.action is Action.CREATE_LEASE:
            if plan.delete_pods_below_token:
                self._attempts.delete_fenced(*ns_name(body), plan)
            if plan.action is not Action.CREATE_LEASE:
                return plan
            return self._create_lease(job, body, server_now)
        if plan.action in (Action.STOP, Action.SUSPEND):
            return self._end_attempt(body, lease, plan)
        if plan.action in (Action.RESUME, Action.TAKE_OVER_LEASE):
            wait = self._holds.earlier_hold_wait(lease, body)
            if wait > 0:
                return replace(plan, action=Action.NONE, requeue_after_seconds=wait)
        if plan.action is Action.RESUME:
            return self._written(self._ctx.store.resume(lease))
        if plan.action is Action.RETRY:
            return self._written(self._ctx.store.reopen(lease))
        if plan.action is Action.EXCUSE:
            return self._excuse(body, lease, plan)
        if plan.delete_pods_below_token:
            self._attempts.delete_fenced(*ns_name(body), plan)
        if plan.action is Action.WAIT_FOR_PODS:
            self._tell_wait(body, plan)
            return plan
        if plan.action is Action.TAKE_OVER_LEASE:
            return self._take_over(job, body, lease)
        if plan.action is Action.CLAIM_AND_START:
            return self._claim_and_start(job, body, lease, plan)
        if plan.action is Action.START_POD:
            return self._attempts.start(job, body, plan, lease.record.fencing_token, lease)
        if job.spec.template is not None:
            self._attempts.bind_own_pod(body, lease)
        return plan

    def _tell_wait(self, body: dict[str, Any], plan: Plan) -> None:
        """Log why the next attempt waits (``podReplacementPolicy: Failed``), when it starts to."""
        if plan.events:  # the wait's Event, planned when the wait starts
            namespace, name = ns_name(body)
            log.info("%s/%s: %s", namespace, name, plan.events[0].message)

    def _written(self, result: Result) -> Replan:
        """A lease write that the next step is planned on, landed or not."""
        if isinstance(result, Accepted):
            self._ctx.wrote_lease(result.lease)
        return Replan(result.lease)

    def _end_attempt(self, body: dict[str, Any], lease: StoredLease, plan: Plan) -> Plan | Replan:
        """Stop or suspend: the lease first, then the attempt's pods.

        Whichever of this write and a worker's completion reaches the API
        server first wins (a completion that landed first stands: plan again
        on it), and the status must tell the one that did.
        """
        store = self._ctx.store
        result = store.stop(lease) if plan.action is Action.STOP else store.suspend(lease)
        if not isinstance(result, Accepted):
            return Replan(result.lease)
        self._ctx.wrote_lease(result.lease)
        if plan.delete_pods_below_token:
            self._attempts.delete_fenced(*ns_name(body), plan)
        return plan

    def _excuse(self, body: dict[str, Any], lease: StoredLease, plan: Plan) -> Replan:
        """A disruption or an ignored failure: no budget used, then plan the next claim.

        A Failed completion is reopened uncounted in the same write.
        """
        store = self._ctx.store
        if lease.record.completion is not None:
            excused = store.reopen(lease, counted=False)
        else:
            excused = store.excuse(lease)
        if isinstance(excused, Accepted):
            for event in plan.events:
                self._ctx.events.record(body, event.type, event.reason, event.message)
        return self._written(excused)

    def _create_lease(
        self, job: LeasedJob, body: dict[str, Any], server_now: datetime | None
    ) -> Plan | Replan:
        """Create the job's lease; the next step (its first claim) is planned on it at once.

        A job's first attempt is folded into the create when it may be
        (:meth:`_first_attempt`): the pod first, then the lease created held
        by it, one lease write instead of two. Otherwise the lease is created
        unheld, and its first claim and pod need not wait for the lease's
        watch event, and the job's status is written once for both steps. No
        ownerReference: the lease is the name's fencing domain and must
        outlive this job (docs/lifecycle.md, "Across a job's whole life"). A
        lease the cache had not seen yet answers 409: it is read and planned on.
        """
        ctx = self._ctx
        namespace, name = ns_name(body)
        status = job.status or LeasedJobStatus()
        carried = status.fencing_token or 0
        fields = _lease_fields(job, body)
        first = self._first_attempt(job, body, server_now, fields)
        if first is not None:
            return first
        try:
            created = ctx.store.create(namespace, lease_name(name), **fields)
        except WriteRefusedError as exc:
            if exc.status != 409:
                raise
            current = ctx.store.get(namespace, lease_name(name))
            ctx.lease_cache.put(current.body)
            return Replan(current)
        ctx.lease_cache.put(created.body)
        if carried:
            ctx.events.record(
                body,
                "Warning",
                "LeaseRecreated",
                f"The JobLease was missing; recreated it at fencing token {carried} so tokens"
                " never go back.",
            )
        return Replan(created)

    def _first_attempt(
        self,
        job: LeasedJob,
        body: dict[str, Any],
        server_now: datetime | None,
        fields: dict[str, Any],
    ) -> Plan | Replan | None:
        """Start the first attempt with the lease created held by its pod, if it may be so.

        Only the plain first attempt of a job never reconciled before (no
        ``status.leaseName``: no lease of it was planned, so none is
        expected; no carried token: a recreated lease keeps today's path),
        in push mode, not suspended (a job held back by Kueue's gate is
        planned suspended) and not a schedule's run (its lease is made
        ahead, in its token range). The pure planner decides on the lease as
        the plain create would make it: the attempt starts only where it
        would claim that lease's first token at once.

        Returns:
            The plan carried out, :class:`Replan` on the lease found (a 409:
            the pod made for it was deleted), or ``None``: create the lease
            unheld, as before.
        """
        status = job.status or LeasedJobStatus()
        labels = job.metadata.get("labels") or {}
        if (
            job.spec.template is None
            or job.spec.suspend
            or status.lease_name is not None
            or status.fencing_token
            or names.LABEL_CRON_JOB in labels
        ):
            return None
        namespace, name = ns_name(body)
        prospective = stored_from_body(new_lease_body(namespace, lease_name(name), **fields))
        first = self._plan(job, prospective, server_now)
        if first.action is not Action.CLAIM_AND_START or first.token != 1:
            return None
        if first.delete_pods_below_token:
            self._attempts.delete_fenced(namespace, name, first)
        store = self._ctx.store
        made = self._attempts.start_with_new_lease(
            job,
            body,
            first,
            prospective,
            lambda held_by: store.create(namespace, lease_name(name), **fields, held_by=held_by),
        )
        if made is None or (made.plan is None and made.lease is None):
            return None
        if made.plan is None:
            assert made.lease is not None
            return Replan(made.lease)
        if made.lease is not None:
            self._ctx.events.record(
                body,
                "Normal",
                "Claimed",
                f"Lease created held by pod {first.pod_name} under fencing token {first.token}.",
            )
        return made.plan

    def _take_over(self, job: LeasedJob, body: dict[str, Any], lease: StoredLease) -> Replan:
        """Hand a lease of an earlier incarnation (or made ahead by a schedule) to this job.

        Planned on again at once, as after a reopen: the take-over's own
        watch event is skipped as this operator's write, so nothing else
        would trigger the new incarnation's first claim.
        """
        taken = self._ctx.store.rearm(
            lease,
            job_uid=str(body["metadata"]["uid"]),
            mode=mode(job),
            lease_duration_seconds=job.spec.lease_duration_seconds,
            max_attempts=job.spec.max_attempts + job.spec.backoff_limit,
            startup_deadline_seconds=_startup_deadline(job),
            suspended=job.spec.suspend,
            work=work_item(job),
        )
        return self._written(taken)

    def _claim_and_start(
        self, job: LeasedJob, body: dict[str, Any], lease: StoredLease, plan: Plan
    ) -> Plan:
        """Create the next attempt's pod, then claim the lease bound to it (one write).

        :meth:`.attempts.Attempts.claim_and_start`. The claim's own watch event
        is not skipped: this reconcile's status was planned before the claim
        (Claiming); the next one, from that event, reports the job Running.

        Raises:
            TransientStoreError: the claim did not land (its pod is deleted),
                or the pod's name is still taken: plan again later.
        """
        ctx = self._ctx
        namespace, name = ns_name(body)
        started, claimed = self._attempts.claim_and_start(job, body, plan, lease)
        if claimed is not None:
            ctx.lease_cache.put(claimed.lease.body)
        if started is None:
            rejection = getattr(claimed, "rejection", "not claimed")
            raise TransientStoreError(f"claim {namespace}/{name}: {rejection}")
        if isinstance(claimed, Accepted) and claimed.lease.record.holder_uid is not None:
            ctx.events.record(
                body,
                "Normal",
                "Claimed",
                f"Lease claimed for pod {plan.pod_name} under fencing token {claimed.token}.",
            )
        return started

    # -- a job that is gone, or cannot run ----------------------------------------

    def _gone(self, namespace: str, name: str) -> None:
        """The job is gone: drop what is kept about it and retire its leases."""
        self._foreign.pop(f"{namespace}/{name}", None)
        self._clocks.forget(f"{namespace}/{name}")
        self._finisher.forget(namespace, name)
        self._attempts.forget(namespace, name)
        self._ctx.pod_memory.forget(namespace, name)
        self._ctx.status_clock.forget(namespace, name)
        self._retire_lease(namespace, name)
        self.indexed.retire(namespace, name)

    def _leave_alone(self, body: dict[str, Any], manager: str) -> None:
        """A job another controller manages (``spec.managedBy``): nothing of it is ours.

        No lease, pod, status or Event, as batch/v1's job controller skips a
        Job managed elsewhere. Once per incarnation (UID): a log line, and the
        leases an earlier incarnation of the name left held are retired as if
        that job were gone (a delete and re-create under another manager must
        not leave the old worker running). Nothing of this job is kept after.

        Raises:
            TransientStoreError: an earlier lease moved while it was retired.
            StoreError: the API server failed or refused.
        """
        namespace, name = ns_name(body)
        uid = str(body["metadata"].get("uid", ""))
        if self._foreign.get(f"{namespace}/{name}") == uid:
            return
        self._gone(namespace, name)
        self._foreign[f"{namespace}/{name}"] = uid
        log.info(
            "LeasedJob %s/%s is managed by %s (spec.managedBy): left alone",
            namespace,
            name,
            manager,
        )

    def _retire_lease(self, namespace: str, name: str) -> None:
        """Take a gone job's lease back for good (:func:`.domain.retire`).

        Only a lease of this job's name (``spec.jobName``): a job named like
        another job's index lease (``<job>-<index>``, as earlier builds named
        them) was told the name is taken and never had that lease; deleting
        it leaves the index alone.
        """
        lease = self._cached_lease(namespace, name) or self._confirmed_lease(namespace, name)
        if lease is not None and lease.record.job_name == name:
            domain.retire(self._ctx, lease)


def _sooner(a: float | None, b: float | None) -> float | None:
    """The sooner of two requeue delays (``None``: no requeue)."""
    if a is None:
        return b
    return a if b is None else min(a, b)


def _startup_deadline(job: LeasedJob) -> int | None:
    """The lease's startup bound: push mode only (a pull worker starts when it claims)."""
    return job.spec.startup_deadline_seconds if job.spec.template is not None else None


def _lease_fields(job: LeasedJob, body: dict[str, Any]) -> dict[str, Any]:
    """The fields of the job's new lease (:func:`~leasehold.lease.store.new_lease_body`'s).

    The base token is the carried one less the attempts counted on it, and
    a lost lease is recreated at the carried token, so tokens never go back.
    """
    status = job.status or LeasedJobStatus()
    carried = status.fencing_token or 0
    base = max(0, carried - (status.attempts or 0))
    return {
        "job_name": str(body["metadata"]["name"]),
        "lease_duration_seconds": job.spec.lease_duration_seconds,
        "max_fencing_token": max(base + job.spec.max_attempts + job.spec.backoff_limit, carried),
        "initial_fencing_token": carried,
        "labels": {names.LABEL_JOB: str(body["metadata"]["name"])},
        "startup_deadline_seconds": _startup_deadline(job),
        "job_uid": str(body["metadata"]["uid"]),
        "mode": mode(job),
        "finalizers": [names.FINALIZER_DOMAIN],
        "suspended": job.spec.suspend,
        "work": work_item(job),
    }
