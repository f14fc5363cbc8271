"""Carry out the plan of a job with several completions: one JobLease per index.

Why this module exists: :mod:`leasehold.controller.plan.indexed` decides, purely;
this actor reads the job's index leases (one list), performs each index's
step through the same store writes and pod handling as a single-lease job
(claim, pod create with its 409/quota/rejection cases through
:class:`~leasehold.controller.act.attempts.Attempts`, bind, stop, reopen,
take-over, suspend, resume, excuse) and writes the job's status. Each index lease is a fencing
domain of its own, with the same guarantees as a job's lease: no
ownerReference, a finalizer, its ``jobUID`` and ``baseFencingToken``
(docs/indexed.md).

Called by :meth:`~leasehold.controller.act.jobs.JobActor.reconcile` under the job's lock;
blocking calls.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from leasehold import names
from leasehold.controller.act import domain
from leasehold.controller.act.attempts import Attempts
from leasehold.controller.act.context import Context
from leasehold.controller.act.holds import HoldWaits, last_reclaim_reason
from leasehold.controller.act.status import write_status
from leasehold.controller.plan import indexed
from leasehold.controller.plan.indexed import IndexStep
from leasehold.controller.plan.single import Action, Plan, PodFacts
from leasehold.lease.api import LeasedJob, PodRetention
from leasehold.lease.errors import LeaseNotFoundError, WriteRefusedError
from leasehold.lease.store import Accepted, StoredLease

log = logging.getLogger(__name__)

MAX_REPLANS = 4
"""Steps one index may take in one reconcile (create, claim, start; or reopen, claim, start)."""


def index_of(lease: StoredLease) -> int | None:
    """The completion index of an index lease (its label), or ``None`` for a job's own lease."""
    raw = (lease.body.get("metadata", {}).get("labels") or {}).get(names.LABEL_COMPLETION_INDEX)
    return int(raw) if raw is not None and str(raw).isdigit() else None


@dataclass(frozen=True)
class _Done:
    """An index's step is over for this reconcile; look again after this many seconds."""

    requeue_after_seconds: float | None


class IndexedActor:
    """Reconcile jobs with several completions: one lease per index.

    Args:
        ctx: the shared edges and state.
        holds: the waits before a take-over or a resume issues a new token.
        attempts: starts attempts' pods (shared with the single-job actor).
    """

    def __init__(self, ctx: Context, holds: HoldWaits, attempts: Attempts) -> None:
        self._ctx = ctx
        self._holds = holds
        self._attempts = attempts
        self._retry_after: dict[tuple[str, str, int], datetime] = {}
        """(namespace, lease, token) -> when that failure's backoff ends (memory only)."""
        self._guard = threading.Lock()

    def _leases(self, namespace: str, name: str) -> dict[int, StoredLease]:
        selector = f"{names.LABEL_JOB}={name},{names.LABEL_COMPLETION_INDEX}"
        found = self._ctx.store.list_leases(namespace, label_selector=selector)
        out: dict[int, StoredLease] = {}
        for lease in found:
            index = index_of(lease)
            if index is not None and lease.record.job_name == name:
                out[index] = lease
        return out

    def _backoff_end(self, lease: StoredLease) -> datetime | None:
        key = (lease.namespace, lease.name, lease.record.fencing_token)
        with self._guard:
            return self._retry_after.get(key)

    def reconcile(self, job: LeasedJob, body: dict[str, Any], elapsed_seconds: float) -> Plan:
        """One step for every index that needs one, then the job's status.

        Args:
            job: the LeasedJob (validated ``body``).
            body: its raw body (for Events and the status write's precondition).
            elapsed_seconds: how long the job has existed (its deadline).

        Returns:
            A plan carrying the status written and when to look again.
        """
        meta = body["metadata"]
        namespace, name = str(meta["namespace"]), str(meta["name"])
        leases = self._leases(namespace, name)
        for lease in leases.values():
            domain.release_if_namespace_goes(self._ctx, lease)
        retry_after: dict[int, datetime] = {}
        for index, lease in leases.items():
            end = self._backoff_end(lease)
            if end is not None:
                retry_after[index] = end
        pods = {
            i: self._attempts.pod_facts(namespace, name, i, owner_uid=str(meta.get("uid", "")))
            for i, lease in leases.items()
            if lease.record.job_uid == meta.get("uid")
            and indexed.wants_pod_facts(job, lease.record)
        }
        decided = indexed.plan_indexed(
            job,
            {i: lease.record for i, lease in leases.items()},
            now=self._ctx.now(),
            elapsed_seconds=elapsed_seconds,
            last_reclaim_reasons={i: last_reclaim_reason(lease) for i, lease in leases.items()},
            retry_after=retry_after,
            pods=pods,
        )
        requeue = decided.requeue_after_seconds
        for step in decided.steps:
            after = self._step(job, body, step, leases.get(step.index), pods.get(step.index))
            if after is not None:
                requeue = after if requeue is None else min(requeue, after)
        if decided.delete_pods:
            # The job finished: what still runs goes; the ended pods, and those
            # whose attempt completed (about to end), stay for `kubectl logs`
            # (podRetention Last or All, as a single job's).
            keep = job.spec.pod_retention is not PodRetention.NONE
            completed = frozenset(
                (i, lease.record.completion.fencing_token)
                for i, lease in leases.items()
                if lease.record.completion is not None
            )
            self._attempts.delete_index_pods(
                namespace,
                name,
                None,
                None,
                keep_ended=keep,
                keep=completed if keep else frozenset(),
            )
        for event in decided.events:
            self._ctx.events.record(body, event.type, event.reason, event.message)
        write_status(self._ctx, namespace, name, body, decided.status)
        return Plan(Action.NONE, decided.status, requeue_after_seconds=requeue)

    def _step(
        self,
        job: LeasedJob,
        body: dict[str, Any],
        step: IndexStep,
        lease: StoredLease | None,
        pods: dict[int, PodFacts] | None,
    ) -> float | None:
        """Carry out one index's step; plan that index again after a write that needs it.

        Returns:
            When to reconcile again for this index (a backoff, a quota), if at all.
        """
        plan = step.plan
        for _ in range(MAX_REPLANS):
            acted = self._act(job, body, step, plan, lease)
            if isinstance(acted, _Done):
                return acted.requeue_after_seconds
            lease = acted
            if lease is None:
                return None
            plan = indexed.plan_index(
                job,
                step.index,
                lease.record,
                now=self._ctx.now(),
                last_reclaim_reason=last_reclaim_reason(lease),
                retry_after=self._backoff_end(lease),
                pods=pods,
            )
            if job.spec.template is None or plan.action not in (
                Action.CLAIM_AND_START,
                Action.START_POD,
                Action.RETRY,
                Action.SUSPEND,  # a failure retried while the job is suspended
                Action.NONE,
            ):
                return None
        return None

    def _act(
        self,
        job: LeasedJob,
        body: dict[str, Any],
        step: IndexStep,
        plan: Plan,
        lease: StoredLease | None,
    ) -> StoredLease | _Done | None:
        """One write of an index's step.

        Returns:
            The index's lease as written (plan again on it; ``None``: it could
            not be made), or :class:`_Done` with when to look again.
        """
        action = plan.action
        if action is Action.CREATE_LEASE:
            return self._create(job, body, step)
        if lease is None:
            return _Done(plan.requeue_after_seconds)
        store = self._ctx.store
        if action in (Action.TAKE_OVER_LEASE, Action.RESUME):
            wait = self._holds.earlier_hold_wait(lease, body)
            if wait > 0:
                return _Done(wait)
        if action is Action.TAKE_OVER_LEASE:
            taken = store.rearm(
                lease,
                job_uid=str(body["metadata"]["uid"]),
                mode=domain.mode(job),
                lease_duration_seconds=job.spec.lease_duration_seconds,
                max_attempts=indexed.index_max_fencing_token_span(job),
                startup_deadline_seconds=(
                    job.spec.startup_deadline_seconds if job.spec.template is not None else None
                ),
                suspended=job.spec.suspend,
                work=domain.work_item(job),
            )
            self._ctx.wrote_lease(taken.lease)
            return taken.lease
        if action is Action.RETRY:
            reopened = store.reopen(lease)
            self._ctx.wrote_lease(reopened.lease)
            return reopened.lease
        if action in (Action.STOP, Action.SUSPEND):
            return self._end_attempt(job, step, plan, lease)
        if action in (Action.RESUME, Action.EXCUSE):
            return self._reopen(body, step, plan, lease)
        if action is Action.CLAIM_AND_START:
            return _Done(self._claim_and_start(job, body, step, plan, lease))
        if action is Action.START_POD:
            return _Done(self._start(job, body, step, plan, lease, lease.record.fencing_token))
        self._remember_backoff(lease, plan)
        if job.spec.template is not None:
            self._attempts.bind_own_pod(body, lease)
        return _Done(plan.requeue_after_seconds)

    def _end_attempt(
        self, job: LeasedJob, step: IndexStep, plan: Plan, lease: StoredLease
    ) -> _Done:
        """Stop or suspend an index: the lease first, then the attempt's pods.

        A completion that landed first stands (the write is refused).
        """
        namespace, job_name = lease.namespace, lease.record.job_name
        if plan.action is Action.STOP:
            stopped = self._ctx.store.stop(lease)
            if isinstance(stopped, Accepted):
                self._ctx.wrote_lease(stopped.lease)
                self._attempts.delete_index_pods(namespace, job_name, step.index, None)
            return _Done(None)
        suspended = self._ctx.store.suspend(lease)
        if not isinstance(suspended, Accepted):
            return _Done(None)  # it moved: its watch event brings the next reconcile
        self._ctx.wrote_lease(suspended.lease)
        if job.spec.template is not None:
            # The suspended attempt's pod; ended ones stay for `kubectl logs`.
            self._attempts.delete_index_pods(namespace, job_name, step.index, None, keep_ended=True)
        # Plan again at once: this reconcile's status still counts the
        # index as active, and the suspend's own watch event is skipped.
        return _Done(0.0)

    def _reopen(
        self, body: dict[str, Any], step: IndexStep, plan: Plan, lease: StoredLease
    ) -> StoredLease | _Done:
        """Resume a suspended index, or excuse its ended attempt; then plan its claim.

        An eviction (or a failure a rule ignores) uses no budget, as for a
        single job; a Failed completion is reopened uncounted.
        """
        store = self._ctx.store
        if plan.action is Action.RESUME:
            written = store.resume(lease)
        elif lease.record.completion is not None:
            written = store.reopen(lease, counted=False)
        else:
            written = store.excuse(lease)
        if not isinstance(written, Accepted):
            return _Done(None)
        self._ctx.wrote_lease(written.lease)
        if plan.action is Action.EXCUSE:
            for event in plan.events:
                self._ctx.events.record(
                    body, event.type, event.reason, f"Index {step.index}: {event.message}"
                )
        return written.lease

    def _remember_backoff(self, lease: StoredLease, plan: Plan) -> None:
        after = plan.status.next_attempt_after
        if after is None or lease.record.completion is None:
            return
        key = (lease.namespace, lease.name, lease.record.fencing_token)
        with self._guard:
            self._retry_after.setdefault(key, after)

    def _create(self, job: LeasedJob, body: dict[str, Any], step: IndexStep) -> StoredLease | None:
        """Create an index's lease (unheld, token 0): its own fencing domain."""
        meta = body["metadata"]
        namespace, name = str(meta["namespace"]), str(meta["name"])
        try:
            # No ownerReference: like a job's lease, it outlives the job.
            return self._ctx.store.create(
                namespace,
                step.lease_name,
                job_name=name,
                lease_duration_seconds=job.spec.lease_duration_seconds,
                max_fencing_token=indexed.index_max_fencing_token_span(job),
                labels={
                    names.LABEL_JOB: name,
                    names.LABEL_COMPLETION_INDEX: str(step.index),
                },
                startup_deadline_seconds=(
                    job.spec.startup_deadline_seconds if job.spec.template is not None else None
                ),
                job_uid=str(meta["uid"]),
                mode=domain.mode(job),
                finalizers=[names.FINALIZER_DOMAIN],
                work=domain.work_item(job),  # params and priority: the same on every index
            )
        except WriteRefusedError:
            # It exists (an earlier reconcile, or a lease of that name that is
            # not this job's index): read it; it is planned on the next pass.
            try:
                existing = self._ctx.store.get(namespace, step.lease_name)
            except LeaseNotFoundError:
                return None
            if existing.record.job_name != name or index_of(existing) != step.index:
                log.warning(
                    "%s/%s: lease name %s is taken by another job's lease; index %d waits",
                    namespace,
                    name,
                    step.lease_name,
                    step.index,
                )
                return None
            return existing

    def _claim_and_start(
        self,
        job: LeasedJob,
        body: dict[str, Any],
        step: IndexStep,
        plan: Plan,
        lease: StoredLease,
    ) -> float | None:
        namespace = lease.namespace
        assert plan.pod_name is not None
        claimed = self._ctx.store.claim(namespace, lease.name, plan.pod_name, observed=lease)
        if not isinstance(claimed, Accepted):
            log.info("claim of %s/%s refused: %s", namespace, lease.name, claimed.rejection)
            return None  # its lease's watch event brings the next reconcile
        if claimed.token != plan.token:
            self._ctx.store.release(namespace, lease.name, plan.pod_name, claimed.token)
            return 1.0
        self._attempts.delete_index_pods(
            namespace, lease.record.job_name, step.index, claimed.token
        )
        return self._start(job, body, step, plan, claimed.lease, claimed.token)

    def _start(
        self,
        job: LeasedJob,
        body: dict[str, Any],
        step: IndexStep,
        plan: Plan,
        lease: StoredLease,
        token: int,
    ) -> float | None:
        started = self._attempts.start(
            job, body, replace(plan, events=[]), token, lease, step.index
        )
        for event in started.events:
            self._ctx.events.record(
                body, event.type, event.reason, f"Index {step.index}: {event.message}"
            )
        return started.requeue_after_seconds

    def retire(self, namespace: str, name: str) -> None:
        """The job is gone: stop its index leases for good, keeping them as domains.

        Args:
            namespace: the job's namespace.
            name: the job's name.
        """
        for lease in self._leases(namespace, name).values():
            domain.release_if_namespace_goes(self._ctx, lease)
            domain.stop_for_good(self._ctx, lease)
        prefix = (namespace, f"{name}-")
        with self._guard:  # the backoffs of its indexes end with it
            for key in [k for k in self._retry_after if (k[0], k[1][: len(prefix[1])]) == prefix]:
                del self._retry_after[key]
