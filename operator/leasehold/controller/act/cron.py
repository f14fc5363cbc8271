"""LeasedCronJobs: a LeasedJob at each schedule time, all runs in one fencing domain.

Why this module exists: :mod:`leasehold.controller.plan.cron` decides,
purely; this actor reads what the decisions need (the cron job, its runs,
its runs' leases) through :mod:`leasehold.controller.kube` and the lease
store, and carries the decisions out: it keeps the history, closes
(``Forbid``) or stops (``Replace``) the earlier runs' leases, reserves each
run's token range, makes the run's JobLease and LeasedJob, records the
Events and writes the status. Each run's LeasedJob is then reconciled like
any other (:mod:`leasehold.controller.act.jobs`). Why the runs' tokens are
ordered and why ``Forbid`` and ``Replace`` hold at the store:
docs/schedules.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from leasehold import names
from leasehold.controller.act.context import Context
from leasehold.controller.act.holds import HoldWaits
from leasehold.controller.engines.peering import ActivityGate
from leasehold.controller.engines.queue import WorkQueue
from leasehold.controller.kube.objects import CustomObjects, Refused
from leasehold.controller.plan import cron as plan
from leasehold.controller.plan.single import JobEvent
from leasehold.lease.api import ConcurrencyPolicy, LeasedCronJob, LeasedCronJobStatus
from leasehold.lease.errors import TransientStoreError, WriteRefusedError, status_error
from leasehold.lease.store import Accepted, LeaseStore, StoredLease

log = logging.getLogger(__name__)

Body = dict[str, Any]


def _utcnow() -> datetime:
    return datetime.now(UTC)


class CronActor:
    """Reconcile LeasedCronJobs: read, decide (:mod:`~leasehold.controller.plan.cron`), act.

    Args:
        crons: the LeasedCronJobs (through an API client of the cron jobs' own:
            their reads and writes do not wait for the jobs' pool).
        jobs: the runs' LeasedJobs (the same client).
        ctx: the shared edges and state (the lease store, the Event recorder).
        holds: the waits before a replacing run's token.
        clock: this operator's wall clock: when schedule times are due (injected
            in tests; it decides when to start a run, never who owns one).
    """

    def __init__(
        self,
        crons: CustomObjects,
        jobs: CustomObjects,
        ctx: Context,
        holds: HoldWaits,
        *,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self._crons = crons
        self._jobs = jobs
        self._ctx = ctx
        self._holds = holds
        self._store: LeaseStore = ctx.store
        self._clock = clock
        self._reported: dict[str, plan.Reported] = {}

    # -- reconcile ----------------------------------------------------------------

    def reconcile(self, namespace: str, name: str) -> float | None:
        """Bring one LeasedCronJob up to date: history, status, and the run due now.

        Args:
            namespace: the cron job's namespace.
            name: its name.

        Returns:
            Seconds after which it needs another reconcile (the next schedule
            time, or a poll while ``Forbid`` waits), or ``None``.

        Raises:
            TransientStoreError: the API server failed or something moved
                meanwhile; call again later.
            StoreError: an unexpected refusal (e.g. RBAC).
        """
        key = f"{namespace}/{name}"
        body, _ = self._crons.read(namespace, name)
        if body is None:
            self._reported.pop(key, None)
            return None
        parsed = plan.parse(body)
        if isinstance(parsed, plan.Invalid):
            self._report_invalid(body, parsed)
            return None
        now = self._clock()
        runs = self._current_runs(body, parsed.cron)
        decided = plan.decide(
            parsed.cron,
            parsed.schedule,
            runs,
            now=now,
            reported=self._reported.get(key, plan.Reported()),
        )
        self._reported[key] = decided.reported
        self._record(body, decided.events)
        if decided.run is None:
            self._write_status(body, decided.status)
            return decided.requeue_after_seconds
        return self._run_due(body, parsed.cron, decided, runs, now)

    def _run_due(
        self,
        body: Body,
        cron: LeasedCronJob,
        decided: plan.CronPlan,
        runs: list[Body],
        now: datetime,
    ) -> float | None:
        """Apply the concurrency policy at the earlier runs' leases, then start the due run."""
        namespace, name = str(body["metadata"]["namespace"]), str(body["metadata"]["name"])
        leases = self._list_leases(namespace, name)
        # A run's leases: its own, and one per index for a run of several completions.
        earlier = [lease for lease in leases if plan.run_of(lease) != decided.run]
        wait: plan.Wait | None = None
        if decided.policy is not ConcurrencyPolicy.ALLOW and any(
            not plan.run_is_over(lease.record)
            or (decided.policy is ConcurrencyPolicy.REPLACE and lease.record.held)
            for lease in earlier
        ):
            body = self._commit_to(body, decided)
        if decided.policy is ConcurrencyPolicy.FORBID:
            current = self._close_earlier(earlier)
            if _closed_any(earlier, current):  # then list again: see _list_again
                leases = self._list_leases(namespace, name)
                current = self._close_earlier(self._list_again(leases, decided))
            held = [lease for lease in current if lease.record.holder_identity is not None]
            wait = plan.forbid_wait(decided, held, now)
            if wait is None:
                # Nothing held: a worker whose hold the operator ended (a
                # suspension) may still run until its window ends.
                longest = max(
                    (self._holds.earlier_hold_wait(lease, body) for lease in current),
                    default=0.0,
                )
                wait = plan.replace_wait(decided, longest, now, replaced=False)
        elif decided.policy is ConcurrencyPolicy.REPLACE:
            current, deleted = self._replace_earlier(body, earlier, runs)
            if _closed_any(earlier, current):  # then list again: see _list_again
                leases = self._list_leases(namespace, name)
                current, more = self._replace_earlier(body, self._list_again(leases, decided), runs)
                deleted |= more
            decided = plan.without_runs(decided, deleted)
            longest = max(
                (self._holds.earlier_hold_wait(lease, body) for lease in current), default=0.0
            )
            wait = plan.replace_wait(decided, longest, now)
        if wait is not None:
            self._reported[f"{namespace}/{name}"] = wait.reported
            self._record(body, wait.events)
            self._write_status(body, wait.status)
            return wait.requeue_after_seconds
        start = plan.plan_start(decided, cron, [lease.record for lease in leases], now)
        written = self._reserve(body, start)
        self._start_run(written, start)
        self._write_status(written, start.status)
        return decided.requeue_after_seconds

    # -- the concurrency policy, at the leases ---------------------------------------

    def _list_leases(self, namespace: str, name: str) -> list[StoredLease]:
        """Every lease labelled with the cron job: its runs' own and their index leases."""
        return self._store.list_leases(namespace, label_selector=f"{names.LABEL_CRON_JOB}={name}")

    @staticmethod
    def _list_again(leases: list[StoredLease], decided: plan.CronPlan) -> list[StoredLease]:
        """The earlier runs' leases of a list made after this reconcile closed some.

        A run of several completions makes its index leases itself, at any
        time: one made after the first list was not closed. Its take-over
        reads its run's own lease first (``IndexedActor._closed_with_run``);
        this list comes after that lease's close. So an index lease made
        before this list is closed here, and one made after it reads the
        close before it can be claimed. (The Spin model's
        ``index-list-before-close`` mutation is the first list alone.)
        """
        return [lease for lease in leases if plan.run_of(lease) != decided.run]

    def _commit_to(self, body: Body, decided: plan.CronPlan) -> Body:
        """Before closing earlier runs: one conditional status write on the version read.

        Closing (Forbid) or replacing (Replace) an earlier run is decided on
        the cron job as read; if it changed since (suspended, its policy or
        schedule edited, deleted), that decision is stale and must not touch
        any run. Writing ``status.waitingScheduleTime`` with the
        ``resourceVersion`` read makes the API server judge it: 409, and
        nothing is closed (the chaos run on kind saw a Replace reconcile
        that read the cron job before its suspension take back and delete the
        running run afterwards).

        Returns:
            The cron job as written: later writes are conditioned on it.

        Raises:
            TransientStoreError: it changed since read (409): decide again.
            StoreError: it is gone, or another refusal.
        """
        namespace, name = str(body["metadata"]["namespace"]), str(body["metadata"]["name"])
        assert decided.scheduled_time is not None
        patch = {
            "metadata": {"resourceVersion": body["metadata"]["resourceVersion"]},
            "status": {"waitingScheduleTime": plan.iso(decided.scheduled_time)},
        }
        written = self._crons.patch_status(namespace, name, patch)
        if written is Refused.CONFLICT:
            raise TransientStoreError(f"{namespace}/{name} changed since read: decide again")
        if written is Refused.GONE:
            raise status_error(404, "not found", f"close the earlier runs of {namespace}/{name}")
        return written

    def _close_earlier(self, earlier: list[StoredLease]) -> list[StoredLease]:
        """Forbid: close every earlier run that is not over; return every lease as it is now.

        A closed lease's holder may finish its attempt, but the store refuses
        every later claim (:meth:`LeaseStore.close`), whatever the run's own
        reconciles do: a Failed run with retries left, an excuse, a suspension
        or a take-over cannot bring it back (:func:`plan.run_is_over`).
        """
        live: list[StoredLease] = []
        for lease in earlier:
            if plan.run_is_over(lease.record):
                live.append(lease)
                continue
            result = self._store.close(lease)
            if not isinstance(result, Accepted):
                raise TransientStoreError(f"close lease {lease.name}: it moved, retrying")
            log.info(
                "closed %s/%s at fencing token %s: a later run is due (Forbid)",
                lease.namespace,
                lease.name,
                lease.record.fencing_token,
            )
            live.append(result.lease)
        return live

    def _replace_earlier(
        self, body: Body, earlier: list[StoredLease], runs: list[Body]
    ) -> tuple[list[StoredLease], set[str]]:
        """Replace: close and take back every earlier run that is not over, then delete it.

        One write per lease (:meth:`LeaseStore.close` with ``release``): the
        holder's next write is refused and no claim can take the lease again;
        a run of several completions has its run's lease (its range) and
        every index lease closed so. Only runs whose lease this call closed are
        deleted: a run that succeeded first keeps its LeasedJob (its status
        may not say so yet; :func:`plan.replaced_runs`), and a finished run's
        leases are closed quietly (:func:`plan.finished_runs`).

        Returns:
            The earlier runs' leases as they are now (closed, or as they were),
            and the names of the runs deleted.
        """
        # A run of several completions: its own lease is only its range (never
        # claimed); its Event names the index leases taken back.
        multi = {str(r["metadata"]["name"]) for r in runs if plan.is_multi_run(r)}
        finished = plan.finished_runs(runs)  # closed, not replaced: kept, no Event
        closed: list[StoredLease] = []
        current: list[StoredLease] = []
        for lease in earlier:
            if plan.run_is_over(lease.record) and lease.record.holder_identity is None:
                current.append(lease)
                continue
            taken = self._take_back(lease)
            current.append(taken)
            if plan.run_of(lease) in finished:
                continue
            closed.append(lease)
            if not (plan.is_range_lease(lease) and plan.run_of(lease) in multi):
                event = plan.replaced_event(
                    plan.run_of(lease), lease.record.fencing_token, lease.name
                )
                self._record(body, [event])
        deleted = plan.replaced_runs(closed, earlier, runs)
        for run in runs:
            meta = run["metadata"]
            if meta["name"] in deleted:
                self._jobs.delete(str(meta["namespace"]), str(meta["name"]))
        return current, deleted

    def _take_back(self, lease: StoredLease) -> StoredLease:
        """Replace's close of one lease (released in the same write); the lease as it is now.

        A lease that moved since read is read again and closed again, within
        this reconcile: the run's own reconcile may have stopped it meanwhile
        (it saw its run's lease closed), and the run must still be judged on
        the runs as read before this Replace began. Were the retry left to
        the next reconcile, the run, Failed by then because of this very
        close, would be taken for one that finished on its own and kept.

        Returns:
            The lease closed (or found over and unheld).

        Raises:
            TransientStoreError: it kept moving (three tries): decide again.
        """
        for _ in range(3):
            result = self._store.close(lease, release=True)
            if isinstance(result, Accepted):
                return result.lease
            lease = result.lease
            if plan.run_is_over(lease.record) and lease.record.holder_identity is None:
                return lease
        raise TransientStoreError(f"close lease {lease.name}: it moved, retrying")

    # -- the fencing domain ---------------------------------------------------------

    def _reserve(self, body: Body, start: plan.Start) -> Body:
        """Reserve the run's token range in one conditional status write; the body as written.

        Raises:
            TransientStoreError: the cron job changed since read (409): another
                writer may have reserved; decide again.
            StoreError: it is gone, or another refusal.
        """
        namespace, name = str(body["metadata"]["namespace"]), str(body["metadata"]["name"])
        written = self._crons.patch_status(namespace, name, plan.reserve_patch(body, start))
        if written is Refused.CONFLICT:
            raise TransientStoreError(f"reserve tokens of {namespace}/{name}: moved")
        if written is Refused.GONE:
            raise status_error(404, "not found", f"reserve tokens of {namespace}/{name}")
        return written

    def _start_run(self, body: Body, start: plan.Start) -> None:
        """Create the run's JobLease at its base (closed), then its LeasedJob, which takes it.

        A run of several completions never claims this lease: it holds the
        run's range, and each index lease is made inside it (its base, its
        ceiling) by the run's own reconciles (``IndexLeaseCreator._create_in_run``).
        """
        namespace, name = str(body["metadata"]["namespace"]), str(body["metadata"]["name"])
        try:
            self._store.create(
                namespace,
                start.run,
                job_name=start.run,
                lease_duration_seconds=start.lease_duration_seconds,
                # Capped at its base until the run's LeasedJob takes it over
                # (LeaseStore.rearm): no pool can claim it before, and the
                # take-over raises the cap to base + maxAttempts + backoffLimit.
                # The ceiling, the range's top, bounds every later raise (an
                # excuse, a suspension); a Forbid or Replace lowers it to close
                # the run for good, taken over or not.
                max_fencing_token=start.base,
                ceiling_fencing_token=start.reserved,
                initial_fencing_token=start.base,
                labels=start.labels,
                mode=start.mode,
                finalizers=[names.FINALIZER_DOMAIN],
            )
        except WriteRefusedError:
            existing = self._store.get(namespace, start.run)
            if not plan.is_own_lease(existing.body, name):
                self._record(body, [start.name_taken_event()])
                return
        if self._jobs.create(namespace, plan.build_run(body, start)) is None:
            return  # made already (409)
        self._record(body, [start.created_event()])

    # -- history and status -----------------------------------------------------------

    def _current_runs(self, body: Body, cron: LeasedCronJob) -> list[Body]:
        """The cron job's runs after the history is cleaned; gone runs' leases pruned."""
        meta = body["metadata"]
        namespace, name = str(meta["namespace"]), str(meta["name"])
        runs = [
            item
            for item in self._jobs.list(namespace, f"{names.LABEL_CRON_JOB}={name}")
            if any(
                ref.get("uid") == str(meta["uid"]) and ref.get("controller")
                for ref in item["metadata"].get("ownerReferences") or []
            )
        ]
        self._tell_ended(body, cron, runs)
        gone = plan.history_to_delete(
            runs,
            succeeded=cron.spec.successful_jobs_history_limit,
            failed=cron.spec.failed_jobs_history_limit,
        )
        for run in gone:
            self._jobs.delete(namespace, run)
            self._record(body, [plan.deleted_event(run)])
        runs = [r for r in runs if r["metadata"]["name"] not in gone]
        self._prune_leases(namespace, name, {r["metadata"]["name"] for r in runs})
        return runs

    def _tell_ended(self, body: Body, cron: LeasedCronJob, runs: list[Body]) -> None:
        """``SawCompletedJob`` and ``MissingJob`` for the active runs that ended or went.

        A run no longer listed is read first (batch/v1's controller does the
        same): one that still exists under its UID (a label removed) is not
        missing. Each is told once (:func:`plan.ended_runs`).
        """
        namespace, name = str(body["metadata"]["namespace"]), str(body["metadata"]["name"])
        key = f"{namespace}/{name}"
        ended = plan.ended_runs(cron, runs, self._reported.get(key, plan.Reported()))
        events = list(ended.events)
        for ref in ended.missing:
            found, _ = self._jobs.read(namespace, ref.name)
            if found is None or found["metadata"].get("uid") != ref.uid:
                events.append(plan.missing_event(ref))
        self._record(body, events)
        self._reported[key] = ended.reported

    def _prune_leases(self, namespace: str, name: str, runs: set[str]) -> None:
        """Delete the JobLeases of runs that are gone (:func:`plan.prune_candidates`)."""
        for lease in plan.prune_candidates(self._list_leases(namespace, name), runs):
            if self._holds.hold_window_left(lease) > 0:
                # A replaced run's worker may still run: its lease (and its
                # expiry clock) stays until its window has surely ended, so a
                # Replace that waits for it still sees it.
                continue
            if not lease.body["metadata"].get("deletionTimestamp"):
                self._store.delete(namespace, lease.name)
            self._store.drop_finalizer(namespace, lease.name, names.FINALIZER_DOMAIN)
            log.info("run %s/%s is gone: its JobLease deleted", namespace, lease.name)

    def _report_invalid(self, body: Body, invalid: plan.Invalid) -> None:
        event = plan.invalid_event(body, invalid)
        if event is not None:
            self._record(body, [event])
        self._write_status(body, plan.invalid_status(body, invalid, self._clock()))

    def _write_status(self, body: Body, status: LeasedCronJobStatus) -> None:
        patch = plan.status_patch(body, status)
        if patch is None:
            return
        namespace, name = str(body["metadata"]["namespace"]), str(body["metadata"]["name"])
        # Refused (gone, or changed since read): its own event reconciles again.
        self._crons.patch_status(namespace, name, patch)

    def _record(self, body: Body, events: Iterable[JobEvent]) -> None:
        for event in events:
            self._ctx.events.record(body, event.type, event.reason, event.message)


def _closed_any(before: list[StoredLease], after: list[StoredLease]) -> bool:
    """Whether a policy pass wrote any lease (its version moved)."""
    was = {lease.name: lease.resource_version for lease in before}
    return any(was.get(lease.name) != lease.resource_version for lease in after)


def build_queue(actor: CronActor, gate: ActivityGate, retry_delay_seconds: float) -> WorkQueue:
    """The cron jobs' own work queue: one reconcile per cron job at a time.

    Args:
        actor: the cron actor.
        gate: open while this replica may work (Kopf's peering rule); while it
            is closed, a due reconcile (a schedule time's included) is parked
            and runs when it opens, so a fail-over never drops a schedule.
        retry_delay_seconds: delay before retrying after a transient error.

    Returns:
        A queue whose reconciles re-arm themselves at the next schedule time.
    """
    queue = WorkQueue(actor.reconcile, retry_delay_seconds, may_work=lambda: gate.is_open)
    gate.on_open(queue.resume_parked)
    return queue
