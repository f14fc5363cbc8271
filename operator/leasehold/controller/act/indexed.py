"""Carry out the plan of a job with several completions: one JobLease per index.

Why this module exists: :mod:`leasehold.controller.plan.indexed` decides, purely;
this actor reads the job's index leases, performs each index's
step through the same store writes and pod handling as a single-lease job
(claim, pod create with its 409/quota/rejection cases through
:class:`~leasehold.controller.act.attempts.Attempts`, bind, stop, reopen,
take-over, suspend, resume, excuse) and writes the job's status. Each index lease is a fencing
domain of its own, with the same guarantees as a job's lease: no
ownerReference, a finalizer, its ``jobUID`` and ``baseFencingToken``
(docs/indexed.md). A cron job's run of several completions makes its
index leases inside the token range its cron job reserved, read from the
run's own lease (:mod:`leasehold.controller.act.index_creation`, docs/schedules.md).
An index lease that an earlier build named
``<job>-<index>`` is stopped for good, and the index's lease is created at
its token.

At batch scale (1,000 indexes, 100 at once) a reconcile costs what the
indexes that changed cost, not what the job has:

- the index leases come from the lease watch's cache
  (:meth:`IndexedActor._leases`), not a LIST per reconcile, and are parsed
  again only when their ``resourceVersion`` moved;
- the steps of one reconcile (each on its own index: its lease, its pods)
  run at once on a small bounded pool (``indexStepWorkers``), so the
  indexes freed by a burst of completions start together, not one after
  another;
- a status change that only moves counts is written at most once per
  interval (:func:`~leasehold.controller.act.status.write_status_soon`, as
  for single jobs); the phase and conditions are written at once.

Called by :meth:`~leasehold.controller.act.jobs.JobActor.reconcile` under the job's lock
(held while the steps run); blocking calls.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from typing import Any, Final

from leasehold import names
from leasehold.controller.act import domain, terminal
from leasehold.controller.act.attempts import Attempts
from leasehold.controller.act.context import Context
from leasehold.controller.act.holds import HoldWaits, last_reclaim_reason
from leasehold.controller.act.index_creation import (
    MAX_REPLANS,
    IndexLeaseCreator,
    StepDone,
    cron_of,
    index_of,
    tell_index_events,
)
from leasehold.controller.act.queue import Told
from leasehold.controller.act.status import (
    report_index_lease_names_taken,
    with_pod_counts,
    with_selector,
    write_status_soon,
)
from leasehold.controller.plan import indexed, replacement
from leasehold.controller.plan import terminal as plan_terminal
from leasehold.controller.plan.indexed import IndexStep
from leasehold.controller.plan.single import Action, Plan, PodFacts, owes_stop
from leasehold.lease.api import LeasedJob, Phase, PodRetention
from leasehold.lease.errors import LeaseNotFoundError, TransientStoreError
from leasehold.lease.indexes import INDEX_SEPARATOR, index_lease_name, legacy_index_lease_name
from leasehold.lease.protocol import LeaseRecord, lease_is_closed
from leasehold.lease.store import Accepted, StoredLease, to_stored

log = logging.getLogger(__name__)

STOP_TRIES: Final = 3
"""Stops of one index lease tried in one reconcile, each on the lease the last refusal read."""
STOP_RETRY_SECONDS: Final = 1.0
"""When a lease kept moving under :data:`STOP_TRIES` stops: plan again this soon."""


STEP_ERROR_RETRY_SECONDS: Final = 2.0
"""When one index's step failed on an API error: plan again this soon (the
other indexes' steps of the same reconcile stand, and the status is written)."""

DEFAULT_STEP_WORKERS: Final = 4
"""Index steps run at once, over all jobs (``OperatorSettings.index_step_workers``)."""


@dataclass(frozen=True)
class _IndexLeases:
    """A job's index leases, by index, as one list found them.

    Attributes:
        current: the leases named ``<job>.<index>``: the ones planned on.
        legacy: the leases an earlier version named ``<job>-<index>`` for
            this job's indexes (carried over when ``current`` has none).
    """

    current: dict[int, StoredLease]
    legacy: dict[int, StoredLease]

    def all(self) -> list[StoredLease]:
        """Every lease of the job's indexes, current and legacy."""
        return [*self.current.values(), *self.legacy.values()]


class IndexedActor:
    """Reconcile jobs with several completions: one lease per index.

    Args:
        ctx: the shared edges and state.
        holds: the waits before a take-over or a resume issues a new token.
        attempts: starts attempts' pods (shared with the single-job actor).
        step_workers: index steps run at once, over all jobs (1: one after
            another, in the reconcile's own thread).
    """

    def __init__(
        self,
        ctx: Context,
        holds: HoldWaits,
        attempts: Attempts,
        step_workers: int = DEFAULT_STEP_WORKERS,
    ) -> None:
        self._ctx = ctx
        self._holds = holds
        self._attempts = attempts
        self._creator = IndexLeaseCreator(ctx, attempts)
        self._retry_after: dict[tuple[str, str, int], datetime] = {}
        """(namespace, lease, token) -> when that failure's backoff ends (memory only)."""
        self._told_waits: set[tuple[str, str, int]] = set()
        """(namespace, index lease, token) whose wait for earlier pods was told."""
        self._parsed: dict[tuple[str, str], dict[str, StoredLease]] = {}
        """(namespace, job) -> its index leases as last parsed, by lease name: a
        cached body is parsed again only when its ``resourceVersion`` moved."""
        self._guard = threading.Lock()
        self._pool = (
            ThreadPoolExecutor(step_workers, thread_name_prefix="index-step")
            if step_workers > 1
            else None
        )

    def _leases(self, namespace: str, name: str) -> _IndexLeases:
        """The job's index leases, under today's names and the legacy ones.

        From the lease watch's cache once it is fed (no request); a LIST only
        before (:attr:`ObjectCache.watched`). Why the cache is safe to plan
        on: every write of an index lease this operator makes (its create, a
        claim, a bind, a stop, a reopen, a take-over, a reclaim) puts the
        answer into the cache before the reconcile that made it ends, and the
        cache keeps only the newest version it saw of each lease (older
        answers and a deleted lease's late answers are refused). So the cache
        is never behind this operator's own writes; it can only miss what
        others wrote since (a worker's renewal or completion, a peer replica's
        write), and each such write brings its watch event, which puts it in
        the cache before it triggers the next reconcile. Until then the plan
        is conservative: an index a worker completed still looks held (its
        slot is not reused yet), never the other way round, because only this
        operator claims for pods (push mode; in pull mode a pool's claim moves
        a lease between states that take a slot alike). And every write is conditioned on what was
        planned on (``test`` ops on holder and token, a ``resourceVersion``,
        a create's 409), so a stale body costs a refused write and a fresh
        read, never a write the API server would accept on an old version.

        Raises:
            StoreError: the LIST failed (only before the cache is fed).
            InvalidLeaseError: a lease does not match the JobLease model.
        """
        bodies = self._ctx.lease_cache.members(namespace, name)
        if bodies is None:
            selector = f"{names.LABEL_JOB}={name},{names.LABEL_COMPLETION_INDEX}"
            found = self._ctx.store.list_leases(namespace, label_selector=selector)
        else:
            found = self._parse(namespace, name, bodies)
        leases = _IndexLeases({}, {})
        for lease in found:
            index = index_of(lease)
            if index is None or lease.record.job_name != name:
                continue
            if lease.name == index_lease_name(name, index):
                leases.current[index] = lease
            elif lease.name == legacy_index_lease_name(name, index):
                leases.legacy[index] = lease
        return leases

    def _parse(
        self, namespace: str, name: str, bodies: list[Mapping[str, Any]]
    ) -> list[StoredLease]:
        """The cached bodies of a job's index leases, parsed (again only if they moved).

        Parsing checks each body against the JobLease model: at 1,000
        indexes that is most of a reconcile, and most leases did not change
        since the last one. The parsed leases are kept per job until the
        next call (the job's lock keeps calls for one job apart).
        """
        key = (namespace, name)
        with self._guard:
            known = self._parsed.get(key, {})
        parsed: dict[str, StoredLease] = {}
        for body in bodies:
            meta = body.get("metadata") or {}
            lease_name = str(meta.get("name", ""))
            lease = known.get(lease_name)
            if lease is None or lease.resource_version != str(meta.get("resourceVersion", "")):
                lease = to_stored(copy.deepcopy(dict(body)))  # the cache's body stays unchanged
            parsed[lease_name] = lease
        with self._guard:
            self._parsed[key] = parsed
        return list(parsed.values())

    def _backoff_end(self, lease: StoredLease) -> datetime | None:
        key = (lease.namespace, lease.name, lease.record.fencing_token)
        with self._guard:
            return self._retry_after.get(key)

    def _pod_facts(
        self, job: LeasedJob, leases: dict[int, StoredLease]
    ) -> dict[int, dict[int, PodFacts]]:
        """The pods of the indexes whose plan judges them, by index (no read for the others).

        A decided or finished job only owes stops: its pods tell it nothing.
        """
        status = job.status
        if status is not None and (
            status.phase in (Phase.SUCCEEDED, Phase.FAILED) or plan_terminal.decided(status)
        ):
            return {}
        return {
            i: self._index_pods(job, i, lease.record)
            for i, lease in leases.items()
            if lease.record.job_uid == job.metadata.get("uid")
            and (
                indexed.wants_pod_facts(job, lease.record)
                or indexed.wants_pod_states(job, lease.record)
            )
        }

    def reconcile(
        self,
        job: LeasedJob,
        body: dict[str, Any],
        elapsed_seconds: float,
        told: Told | None = None,
    ) -> Plan:
        """One step for every index that needs one, then the job's status.

        Args:
            job: the LeasedJob (validated ``body``; as the queue's gate shows it).
            body: its raw body (for Events and the status write's precondition).
            elapsed_seconds: how long the job has existed (its deadline).
            told: how a queued job's status and Events are told (``None``: as planned).

        Returns:
            A plan carrying the status written and when to look again.
        """
        meta = body["metadata"]
        namespace, name = str(meta["namespace"]), str(meta["name"])
        found = self._leases(namespace, name)
        for lease in found.all():
            domain.release_if_namespace_goes(self._ctx, lease)
        leases = found.current
        # Legacy-named leases are stopped at once, so no pool claims them any more.
        legacies = {i: self._creator.stop_legacy(lease) for i, lease in found.legacy.items()}
        retry_after: dict[int, datetime] = {}
        for index, lease in leases.items():
            end = self._backoff_end(lease)
            if end is not None:
                retry_after[index] = end
        pods = self._pod_facts(job, leases)
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
        taken: dict[int, StoredLease] = {}
        for step, done in self._run_steps(job, body, decided.steps, leases, legacies, pods):
            if done.name_taken_by is not None:
                taken[step.index] = done.name_taken_by
            after = done.requeue_after_seconds
            if after is not None:
                requeue = after if requeue is None else min(requeue, after)
        if decided.delete_pods:
            # The job finished: what still runs goes; the ended pods, and those
            # whose attempt completed (about to end), stay for `kubectl logs`
            # (podRetention Last or All, as a single job's).
            keep = PodRetention(job.spec.pod_retention) is not PodRetention.NONE
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
        events, planned = decided.events, decided.status
        if told is not None:
            events = told.events(list(events))
            planned = told.status(planned, self._ctx.now(), job.metadata.get("generation"))
        for event in events:
            self._ctx.events.record(body, event.type, event.reason, event.message)
        settled = terminal.settle(self._ctx, self._attempts, job, body, planned)
        status = settled.status
        if settled.requeue_after_seconds is not None:  # pods are left: look again soon
            after = settled.requeue_after_seconds
            requeue = after if requeue is None else min(requeue, after)
        if taken:  # never silent: the job cannot finish while an index cannot start
            status = report_index_lease_names_taken(self._ctx, job, body, status, taken)
        status = with_pod_counts(self._ctx, job, with_selector(job, status))
        wait = write_status_soon(self._ctx, namespace, name, body, status).held_seconds
        if wait is not None:  # only counts moved, and a write went out just now
            requeue = wait if requeue is None else min(requeue, wait)
        if status.phase in (Phase.SUCCEEDED, Phase.FAILED):
            with self._guard:  # a finished job is rarely planned again: keep no parsed leases
                self._parsed.pop((namespace, name), None)
        return Plan(Action.NONE, status, requeue_after_seconds=requeue)

    def _run_steps(
        self,
        job: LeasedJob,
        body: dict[str, Any],
        steps: list[IndexStep],
        leases: Mapping[int, StoredLease],
        legacies: Mapping[int, StoredLease],
        pods: Mapping[int, dict[int, PodFacts]],
    ) -> list[tuple[IndexStep, StepDone]]:
        """Carry out the indexes' steps: at once on the step pool when there are several.

        Each step touches its own index only (its lease, its pods, its
        backoff and wait memory; :class:`Attempts` and the context's caches
        are thread-safe), so they need no order; the job's lock, held by the
        caller, keeps every other reconcile of the job out meanwhile. A step
        that raises is logged and looked at again soon
        (:data:`STEP_ERROR_RETRY_SECONDS`); the others' results stand.

        Returns:
            Each step with what it came to, in the steps' order.
        """
        namespace = str(job.metadata["namespace"])

        def run(step: IndexStep) -> StepDone:
            index = step.index
            return self._step(
                job, body, step, leases.get(index), legacies.get(index), pods.get(index)
            )

        if self._pool is None or len(steps) <= 1:
            return [(step, self._settled(namespace, step, partial(run, step))) for step in steps]
        futures: list[tuple[IndexStep, Future[StepDone]]] = [
            (step, self._pool.submit(run, step)) for step in steps
        ]
        return [(step, self._settled(namespace, step, future.result)) for step, future in futures]

    def _settled(self, namespace: str, step: IndexStep, result: Callable[[], StepDone]) -> StepDone:
        """What one step came to; an error is logged and the index looked at again soon."""
        try:
            return result()
        except LeaseNotFoundError as exc:
            # Deleted since the cache saw it (its deletion's event is on its way).
            self._ctx.lease_cache.drop(namespace, step.lease_name)
            log.info("%s: index %d: %s; planning again", namespace, step.index, exc)
        except TransientStoreError as exc:
            log.info("%s: index %d will be retried: %s", namespace, step.index, exc)
        except Exception:
            log.exception("%s: index %d: step %s failed", namespace, step.index, step.plan.action)
            return StepDone(STEP_ERROR_RETRY_SECONDS * 5)
        return StepDone(STEP_ERROR_RETRY_SECONDS)

    def _index_pods(self, job: LeasedJob, index: int, lease: LeaseRecord) -> dict[int, PodFacts]:
        """An index's attempt pods by token: listed to judge an end, else from the pod watch.

        A next claim that the pod watch's memory says must wait for an earlier
        pod (``podReplacementPolicy: Failed``) is checked against a list: a
        deletion the watch missed must not hold the index back.

        Raises:
            StoreError: the list failed.
        """
        namespace, name = str(job.metadata["namespace"]), str(job.metadata["name"])
        uid = str(job.metadata.get("uid", ""))
        listed = indexed.wants_pod_facts(job, lease)
        pods = self._attempts.pod_facts(namespace, name, index, owner_uid=uid, listed=listed)
        if not listed and replacement.pods_in_the_way(job, pods, lease.fencing_token + 1):
            pods = self._attempts.pod_facts(namespace, name, index, owner_uid=uid)
        return pods

    def _step(
        self,
        job: LeasedJob,
        body: dict[str, Any],
        step: IndexStep,
        lease: StoredLease | None,
        legacy: StoredLease | None,
        pods: dict[int, PodFacts] | None,
    ) -> StepDone:
        """Carry out one index's step; plan that index again after a write that needs it.

        Args:
            job: the LeasedJob.
            body: its raw body.
            step: the index's step.
            lease: the index's lease, if it exists.
            legacy: the index's lease under its legacy name, if one exists
                (carried over if the index's lease is created).
            pods: the index's attempt pods by token, where read.

        Returns:
            When to reconcile again for this index (a backoff, a quota), if at
            all, and the lease that holds the index's name if it is not the index's.
        """
        plan = step.plan
        for _ in range(MAX_REPLANS):
            acted = self._act(job, body, step, plan, lease, legacy, pods)
            if isinstance(acted, StepDone):
                return acted
            lease = acted
            if lease is None:
                return StepDone(None)
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
                Action.WAIT_FOR_PODS,  # retried, but its earlier pod is not terminal yet
                Action.NONE,
            ):
                return StepDone(None)
        return StepDone(None)

    def _act(
        self,
        job: LeasedJob,
        body: dict[str, Any],
        step: IndexStep,
        plan: Plan,
        lease: StoredLease | None,
        legacy: StoredLease | None = None,
        pods: dict[int, PodFacts] | None = None,
    ) -> StoredLease | StepDone | None:
        """One write of an index's step.

        Returns:
            The index's lease as written (plan again on it; ``None``: it could
            not be made), or :class:`StepDone` with when to look again.
        """
        action = plan.action
        if action is Action.CREATE_LEASE:
            return self._creator.create(job, body, step, legacy, pods)
        if lease is None:
            return StepDone(plan.requeue_after_seconds)
        store = self._ctx.store
        if action in (Action.TAKE_OVER_LEASE, Action.RESUME):
            wait = self._holds.earlier_hold_wait(lease, body)
            if wait > 0:
                return StepDone(wait)
        if action is Action.TAKE_OVER_LEASE:
            checked = self._closed_with_run(body, lease)
            if checked is None:
                return StepDone(None)  # it moved: its watch event brings the next reconcile
            lease = checked
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
            return StepDone(self._claim_and_start(job, body, step, plan, lease))
        if action is Action.START_POD:
            return StepDone(self._start(job, body, step, plan, lease, lease.record.fencing_token))
        if action is Action.WAIT_FOR_PODS:
            return StepDone(self._wait_for_pods(body, step, plan, lease))
        self._remember_backoff(lease, plan)
        if job.spec.template is not None:
            self._attempts.bind_own_pod(body, lease)
        return StepDone(plan.requeue_after_seconds)

    def _end_attempt(
        self, job: LeasedJob, step: IndexStep, plan: Plan, lease: StoredLease
    ) -> StepDone:
        """Stop or suspend an index: the lease first, then the attempt's pods.

        A suspension is the job's ``spec.suspend``, or a scale-down that removed
        the index (:func:`~leasehold.controller.plan.indexed.removed_indexes`).
        A completion that landed first stands (the write is refused).
        """
        namespace, job_name = lease.namespace, lease.record.job_name
        if plan.action is Action.STOP:
            # Refused when the lease moved. A renewal brings no reconcile (its
            # watch event is filtered), so the stop is tried again here on the
            # lease the refusal read, until it lands or a completion stands.
            for _ in range(STOP_TRIES):
                stopped = self._ctx.store.stop(lease)
                if isinstance(stopped, Accepted):
                    self._ctx.wrote_lease(stopped.lease)
                    log.info(
                        "%s/%s: index lease %s stopped at fencing token %d (no claim past it)",
                        namespace,
                        job_name,
                        lease.name,
                        stopped.lease.record.fencing_token,
                    )
                    self._attempts.delete_index_pods(namespace, job_name, step.index, None)
                    return StepDone(None)
                lease = stopped.lease
                if not owes_stop(lease.record):
                    return StepDone(None)  # a completion landed first: it stands
            return StepDone(STOP_RETRY_SECONDS)
        # A suspension refused because a renewal moved the lease is tried again
        # on the lease the refusal read, as a stop is (a renewal brings no reconcile).
        for _ in range(STOP_TRIES):
            suspended = self._ctx.store.suspend(lease)
            if isinstance(suspended, Accepted):
                break
            lease = suspended.lease
            if lease.record.completion is not None or lease.record.suspended:
                return StepDone(None)  # a completion landed first: it stands
        else:
            return StepDone(STOP_RETRY_SECONDS)
        self._ctx.wrote_lease(suspended.lease)
        if step.index >= indexed.completions(job):
            log.info(
                "%s/%s: index %d removed by a scale-down (spec.completions=%d): its lease %s"
                " suspended at fencing token %d; its worker's writes are refused from now on",
                namespace,
                job_name,
                step.index,
                indexed.completions(job),
                lease.name,
                suspended.lease.record.fencing_token,
            )
        if job.spec.template is not None:
            # The suspended attempt's pod; ended ones stay for `kubectl logs`.
            self._attempts.delete_index_pods(namespace, job_name, step.index, None, keep_ended=True)
        # Plan again at once: this reconcile's status still counts the
        # index as active, and the suspend's own watch event is skipped.
        return StepDone(0.0)

    def _reopen(
        self, body: dict[str, Any], step: IndexStep, plan: Plan, lease: StoredLease
    ) -> StoredLease | StepDone:
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
            return StepDone(None)
        self._ctx.wrote_lease(written.lease)
        if plan.action is Action.EXCUSE:
            tell_index_events(self._ctx, body, step.index, plan.events)
        return written.lease

    def _remember_backoff(self, lease: StoredLease, plan: Plan) -> None:
        after = plan.status.next_attempt_after
        if after is None or lease.record.completion is None:
            return
        key = (lease.namespace, lease.name, lease.record.fencing_token)
        with self._guard:
            self._retry_after.setdefault(key, after)

    def _closed_with_run(self, body: dict[str, Any], lease: StoredLease) -> StoredLease | None:
        """Before a take-over: close an index lease of a run that a later run closed.

        ``Forbid`` and ``Replace`` close every lease of an earlier run that
        they list; an index lease made after that list is not among them. Its
        take-over therefore reads the run's own lease first (the write of the
        index lease came before this read): closed there (or gone), the index
        lease is closed too, so the take-over caps it at its token and no claim
        takes it. (The close came before the list; a list that missed the
        index lease came before its create; so this read sees the close.)

        Returns:
            The lease to take over (closed or as it was), or ``None`` when
            the close was refused (it moved).
        """
        cron = cron_of(body)
        record = lease.record
        if cron is None or record.ceiling_fencing_token is None or lease_is_closed(record):
            return lease
        run = self._creator.run_lease(lease.namespace, record.job_name, cron)
        if run is not None and not lease_is_closed(run.record):
            return lease
        closed = self._ctx.store.close(lease)
        if not isinstance(closed, Accepted):
            return None
        self._ctx.wrote_lease(closed.lease)
        log.info(
            "%s/%s: closed at fencing token %d: its run was closed (a later run is due)",
            lease.namespace,
            lease.name,
            record.fencing_token,
        )
        return closed.lease

    def _wait_for_pods(
        self, body: dict[str, Any], step: IndexStep, plan: Plan, lease: StoredLease
    ) -> float | None:
        """The index's next claim waits for earlier pods (``podReplacementPolicy: Failed``).

        Those not being deleted yet are deleted; the wait is told once per
        index and token (an Event on the job, a log line).

        Returns:
            When to look again (the pod events bring the reconcile sooner).
        """
        namespace = lease.namespace
        if plan.delete_pods_below_token:
            self._attempts.delete_index_pods(
                namespace, lease.record.job_name, step.index, plan.delete_pods_below_token
            )
        told = (namespace, lease.name, lease.record.fencing_token)
        with self._guard:
            first = told not in self._told_waits
            self._told_waits.add(told)
        if first:
            for event in plan.events:
                message = f"Index {step.index}: {event.message}"
                log.info("%s/%s: %s", namespace, lease.record.job_name, message)
                self._ctx.events.record(body, event.type, event.reason, message)
        return plan.requeue_after_seconds

    def _claim_and_start(
        self,
        job: LeasedJob,
        body: dict[str, Any],
        step: IndexStep,
        plan: Plan,
        lease: StoredLease,
    ) -> float | None:
        namespace = lease.namespace
        started, claimed = self._attempts.claim_and_start(
            job, body, replace(plan, events=[]), lease, step.index
        )
        if started is None:  # the claim did not land: its pod is deleted
            log.info("claim of %s/%s refused: %s", namespace, lease.name, claimed)
            return None  # its lease's watch event brings the next reconcile
        job_name = lease.record.job_name
        if (
            isinstance(claimed, Accepted)
            and claimed.lease.record.holder_uid is not None
            # No LIST when the pod watch saw no earlier pod of the index (a first attempt).
            and self._ctx.pod_memory.may_have_below(
                namespace, job_name, claimed.token, index=step.index
            )
        ):
            self._attempts.delete_index_pods(namespace, job_name, step.index, claimed.token)
        tell_index_events(self._ctx, body, step.index, started.events)
        return started.requeue_after_seconds

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
        tell_index_events(self._ctx, body, step.index, started.events)
        return started.requeue_after_seconds

    def retire(self, namespace: str, name: str) -> None:
        """The job is gone: stop its index leases for good, keeping them as domains.

        A stop refused because the lease moved since it was read (a renewal
        the cache has not seen yet) is made again on the lease the refusal
        read: a held lease's renewals bring no reconcile, so a dropped
        refusal would leave the gone job's lease held and claimable.

        Args:
            namespace: the job's namespace.
            name: the job's name.

        Raises:
            TransientStoreError: a lease kept moving (try again).
            StoreError: the API server failed or refused.
        """
        moving = [
            lease.name
            for lease in self._leases(namespace, name).all()
            if not self._stop_for_good(lease)
        ]
        prefix = (namespace, f"{name}{INDEX_SEPARATOR}")
        self._ctx.status_clock.forget(namespace, name)
        with self._guard:  # the backoffs of its indexes end with it
            self._parsed.pop((namespace, name), None)
            for key in [k for k in self._retry_after if (k[0], k[1][: len(prefix[1])]) == prefix]:
                del self._retry_after[key]
            for told in [t for t in self._told_waits if (t[0], t[1][: len(prefix[1])]) == prefix]:
                self._told_waits.discard(told)
        if moving:
            raise TransientStoreError(
                f"retire {namespace}/{name}: index lease(s) {', '.join(moving)} kept moving"
            )

    def _stop_for_good(self, lease: StoredLease) -> bool:
        """Stop a gone job's index lease for good, again on what a refusal read.

        Returns:
            ``True`` once it is stopped, final or completed (a completion
            stands); ``False`` when it kept moving for :data:`STOP_TRIES` stops.
        """
        domain.release_if_namespace_goes(self._ctx, lease)
        for _ in range(STOP_TRIES):
            result = domain.stop_for_good(self._ctx, lease)
            if result is None or isinstance(result, Accepted):
                return True
            lease = result.lease
            self._ctx.lease_cache.put(lease.body)
            if lease.record.completion is not None:
                return True
        return False
