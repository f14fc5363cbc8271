"""Pure decisions for one LeasedCronJob: what is due, what the policy waits for, the run to start.

Why this module exists: a cron job's reconcile is a few decisions on plain
inputs (the cron job, its runs, its runs' leases, what was already told, the
time) with lease writes between them, and the decisions are tested without
an API server (``tests/unit/controller/plan/test_cron.py``). :func:`decide` says what is due
(:func:`leasehold.lease.schedule.due` says when); after the actor has closed
(``Forbid``) or stopped (``Replace``) the earlier runs' leases,
:func:`forbid_wait` and :func:`replace_wait` say whether the new run waits,
and :func:`plan_start` says what to reserve, create and report. The actor
(:mod:`leasehold.controller.act.cron`) reads, carries the decisions out and
holds the only state (what was told, :class:`Reported`). Why the runs'
tokens are ordered and why ``Forbid`` and ``Replace`` hold at the store:
docs/schedules.md.

No Kubernetes client here: inputs are pydantic models, raw bodies and the
protocol's :class:`~leasehold.lease.protocol.LeaseRecord`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Final, Protocol, TypeVar

from pydantic import ValidationError

from leasehold import names
from leasehold.controller.plan.conditions import set_condition
from leasehold.controller.plan.single import JobEvent
from leasehold.lease import api, schedule
from leasehold.lease.api import (
    MAX_CRON_NAME_LENGTH,
    RUN_UNCOUNTED_ROOM,
    ConcurrencyPolicy,
    LeasedCronJob,
    LeasedCronJobStatus,
    RunReference,
)
from leasehold.lease.protocol import LeaseRecord, Outcome, lease_is_closed, lease_is_final

WAIT_POLL_SECONDS: Final = 5.0
"""While ``Forbid`` waits for an earlier run's lease, look again this often (the
run's LeasedJob events usually come first)."""

FINISHED: Final = (api.Phase.SUCCEEDED.value, api.Phase.FAILED.value)

Body = dict[str, Any]
"""An object as the API serves it (JSON, camelCase)."""


class RunLease(Protocol):
    """A run's lease as the decisions see it (the store's ``StoredLease`` is one)."""

    @property
    def name(self) -> str:
        """The lease's name (= its run's name)."""

    @property
    def record(self) -> LeaseRecord:
        """The rules' view of the lease."""


L = TypeVar("L", bound=RunLease)


# -- the leases and the history -------------------------------------------------


def run_is_over(record: LeaseRecord) -> bool:
    """``Forbid``/``Replace``: whether an earlier run's lease needs no close: no claim can take it.

    Only what the store enforces counts: a Succeeded completion (the CRD
    refuses to reopen it) or a lease closed (its ceiling at its token, which
    nothing may raise). A Failed completion with retries left is not over (a
    reopen and a claim would follow), nor is a lease stopped at its cap
    alone (an excuse, a suspension or a take-over may raise a cap), nor a
    lease its run has not taken over yet.

    Args:
        record: the earlier run's lease.

    Returns:
        ``True`` if it is over for good (a ``Forbid`` still waits while it is held).
    """
    done = record.completion
    if done is not None and done.outcome == Outcome.SUCCEEDED:
        return True
    return lease_is_closed(record)


def reserved_floor(records: Sequence[LeaseRecord]) -> int:
    """The highest token any run's lease has used or may still use.

    Args:
        records: every run's lease (they outlive their runs: the domain finalizer).

    Returns:
        The largest ceiling, cap or token, ``0`` with no leases.
    """
    return max(
        (
            max(r.fencing_token, r.max_fencing_token or 0, r.ceiling_fencing_token or 0)
            for r in records
        ),
        default=0,
    )


def history_to_delete(runs: list[Body], *, succeeded: int, failed: int) -> list[str]:
    """Finished runs beyond the history limits, oldest first.

    Args:
        runs: the runs' LeasedJob bodies.
        succeeded: ``spec.successfulJobsHistoryLimit``.
        failed: ``spec.failedJobsHistoryLimit``.

    Returns:
        The names of the runs to delete.
    """
    out: list[str] = []
    for phase, keep in (
        (api.Phase.SUCCEEDED.value, succeeded),
        (api.Phase.FAILED.value, failed),
    ):
        done = sorted(
            (r for r in runs if (r.get("status") or {}).get("phase") == phase),
            key=_scheduled_key,
        )
        out += [r["metadata"]["name"] for r in done[: max(0, len(done) - keep)]]
    return out


def _scheduled_key(run: Body) -> tuple[str, str]:
    meta = run["metadata"]
    return (
        (meta.get("annotations") or {}).get(names.ANNOTATION_SCHEDULED_TIME, ""),
        str(meta.get("creationTimestamp", "")),
    )


def prune_candidates(leases: Sequence[L], runs: set[str]) -> list[L]:
    """The leases of runs that left the history, all but the domain's top one.

    A run's lease outlives its LeasedJob (the domain finalizer); once the run
    left the history, only the lease with the highest cap or token is kept (it
    carries the domain if the cron job is created again under its name;
    ``status.reservedFencingToken`` carries it otherwise), so a cron job keeps
    about as many leases as runs. The actor still spares a lease whose
    replaced worker may run on (its hold window).

    Args:
        leases: every lease labelled with the cron job.
        runs: the names of the runs that exist.

    Returns:
        The final leases of gone runs, but the top one, in ``leases`` order.
    """
    if not leases:
        return []
    top = max(leases, key=lambda x: reserved_floor([x.record]))
    return [
        lease
        for lease in leases
        if lease is not top and lease.record.job_name not in runs and lease_is_final(lease.record)
    ]


def run_of(lease: RunLease) -> str:
    """The run a lease belongs to: its run's lease, or one of its run's index leases.

    A run of several completions has its run's lease (named like the run:
    its token range, never claimed) and one index lease per index
    (``<run>.<index>``), all labelled with the cron job; ``spec.jobName`` is
    the run's name on each.
    """
    return lease.record.job_name


def is_range_lease(lease: RunLease) -> bool:
    """Whether ``lease`` is a run's own lease (named like its run), not an index lease."""
    return lease.name == lease.record.job_name


def is_multi_run(run: Body) -> bool:
    """Whether a run's LeasedJob has several completions (one lease per index).

    As :func:`leasehold.controller.plan.indexed.is_multi`, on the raw body.
    """
    spec = run.get("spec") or {}
    return spec.get("completionMode") == "Indexed" or int(spec.get("completions") or 1) > 1


def finished_runs(runs: list[Body]) -> set[str]:
    """The runs whose LeasedJob finished (phase ``Succeeded`` or ``Failed``).

    ``Replace`` deletes only the active runs, as batch/v1's CronJob does; a
    finished run is planned no further (it never claims again), so its leases
    are closed without a ``Replaced`` Event and it stays in the history. A work
    queue's slots stopped at its first success, or an index stopped by a
    successPolicy or a scale-down, are stopped at their cap, not at their
    ceiling: :func:`run_is_over` alone would take them for a run still going.

    Args:
        runs: the runs' LeasedJob bodies.

    Returns:
        Their names.
    """
    final = {api.Phase.SUCCEEDED.value, api.Phase.FAILED.value}
    return {
        str(r["metadata"]["name"]) for r in runs if (r.get("status") or {}).get("phase") in final
    }


def replaced_runs(closed: Sequence[L], leases: Sequence[L], runs: list[Body]) -> set[str]:
    """``Replace``: the runs to delete, given the earlier leases this reconcile closed.

    A run one of whose leases was taken back is replaced (deleted), but a
    run of several completions whose only lease closed was its run's lease
    (its range, never claimed) and that is over (its LeasedJob Succeeded, or
    every index lease Succeeded) keeps its LeasedJob, as a single run that
    succeeded first does (its status may not say so yet).

    Args:
        closed: the leases this reconcile closed (and released).
        leases: every earlier lease of the cron job, as read.
        runs: the runs' LeasedJob bodies.

    Returns:
        The names of the runs to delete.
    """
    by_name = {str(r["metadata"]["name"]): r for r in runs}
    out: set[str] = set()
    for lease in closed:
        run = run_of(lease)
        body = by_name.get(run)
        if body is None:
            continue
        if is_range_lease(lease) and is_multi_run(body) and _run_succeeded(body, leases):
            continue
        out.add(run)
    return out


def _run_succeeded(run: Body, leases: Sequence[RunLease]) -> bool:
    """A run of several completions that succeeded: its phase, or all its index leases say so."""
    if (run.get("status") or {}).get("phase") == api.Phase.SUCCEEDED.value:
        return True
    name = str(run["metadata"]["name"])
    indexes = [x for x in leases if run_of(x) == name and not is_range_lease(x)]
    wanted = int((run.get("spec") or {}).get("completions") or 1)
    return len(indexes) >= wanted and all(
        x.record.completion is not None and x.record.completion.outcome == Outcome.SUCCEEDED
        for x in indexes
    )


def deleted_event(run: str) -> JobEvent:
    """The Event of a finished run deleted beyond the history limits."""
    return JobEvent("Normal", "SuccessfulDelete", f"Deleted finished run {run}.")


def replaced_event(run: str, token: int, lease: str | None = None) -> JobEvent:
    """The Event of an earlier run whose lease ``Replace`` took back at ``token``.

    ``lease``: the lease's name when it is one of the run's index leases.
    """
    which = "its lease" if lease is None or lease == run else f"its index lease {lease}"
    return JobEvent(
        "Normal",
        "Replaced",
        f"Run {run} replaced: {which} was taken back at fencing token {token};"
        " its late writes are refused.",
    )


# -- an invalid cron job --------------------------------------------------------


@dataclass(frozen=True)
class Parsed:
    """A valid cron job and its schedule."""

    cron: LeasedCronJob
    schedule: schedule.CronSchedule


@dataclass(frozen=True)
class Invalid:
    """Why a cron job cannot be scheduled: the ``Ready=False`` reason and message."""

    reason: str
    message: str


def parse(body: Body) -> Parsed | Invalid:
    """Validate a cron job's body, its name's length and its schedule.

    Args:
        body: the LeasedCronJob as read.

    Returns:
        The parsed cron job, or why it is invalid (the first error).
    """
    try:
        cron = LeasedCronJob.model_validate(body)
        if len(str(body["metadata"]["name"])) > MAX_CRON_NAME_LENGTH:
            raise schedule.InvalidScheduleError(
                f"metadata.name is longer than {MAX_CRON_NAME_LENGTH} characters: a run's"
                " name (<name>-<unix minutes>) must stay a valid label value"
            )
        return Parsed(cron, schedule.parse(cron.spec.schedule, cron.spec.time_zone))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return Invalid("InvalidSpec", f"Invalid LeasedCronJob: {where}: {first['msg']}")
    except schedule.InvalidScheduleError as exc:
        return Invalid("InvalidSchedule", str(exc))


def invalid_event(body: Body, invalid: Invalid) -> JobEvent | None:
    """The Warning Event for an invalid cron job, unless its status already tells it.

    Args:
        body: the LeasedCronJob as read.
        invalid: why it is invalid.

    Returns:
        The Event, or ``None`` when ``Ready`` already says so for this generation.
    """
    generation = body["metadata"].get("generation")
    old = (body.get("status") or {}).get("conditions") or []
    already = any(
        c.get("type") == "Ready"
        and c.get("reason") == invalid.reason
        and c.get("message") == invalid.message
        and c.get("observedGeneration") == generation
        for c in old
    )
    return None if already else JobEvent("Warning", invalid.reason, invalid.message)


def invalid_status(body: Body, invalid: Invalid, now: datetime) -> LeasedCronJobStatus:
    """The status of an invalid cron job: its status as read, with ``Ready=False``."""
    status = LeasedCronJobStatus.model_validate(body.get("status") or {})
    status.observed_generation = body["metadata"].get("generation")
    return _condition(status, "Ready", "False", invalid.reason, invalid.message, now)


# -- what is due -----------------------------------------------------------------


@dataclass(frozen=True)
class Reported:
    """What was reported per cron job (Events are not repeated at every reconcile)."""

    missed_deadline: datetime | None = None
    too_many: datetime | None = None
    waiting: datetime | None = None
    ended: frozenset[str] = frozenset()
    """Runs of ``status.active`` (UID, else name) whose end or absence was told."""


@dataclass(frozen=True)
class CronPlan:
    """The decision for one cron job at one moment, before its runs' leases are touched.

    Attributes:
        status: the status to write when no run starts; else the one the next
            decisions build on.
        reported: what was told, these ``events`` included (the actor keeps it).
        events: Events to record on the cron job now.
        requeue_after_seconds: until the next schedule time (``None``:
            suspended, or the schedule never fires again).
        run: the run to start now (its name), or ``None``: write the status, done.
        scheduled_time: the schedule time ``run`` is for.
        policy: the concurrency policy the new run starts under.
    """

    status: LeasedCronJobStatus
    reported: Reported
    events: list[JobEvent] = field(default_factory=list)
    requeue_after_seconds: float | None = None
    run: str | None = None
    scheduled_time: datetime | None = None
    policy: ConcurrencyPolicy = ConcurrencyPolicy.ALLOW


def decide(
    cron: LeasedCronJob,
    sched: schedule.CronSchedule,
    runs: list[Body],
    *,
    now: datetime,
    reported: Reported,
) -> CronPlan:
    """Decide what a cron job does now: nothing (suspended, nothing due, run made), or a run.

    Args:
        cron: the cron job.
        sched: its parsed schedule.
        runs: its runs (LeasedJobs it controls) after the history was cleaned.
        now: the operator's wall clock (when a run is due; never who owns one).
        reported: what was told already.

    Returns:
        The plan; with ``run`` set, the actor applies the concurrency policy next.
    """
    status = observe_runs(cron, runs)
    if cron.spec.suspend:
        status = _condition(status, "Ready", "True", "Suspended", "Suspended: no new runs.", now)
        return CronPlan(_not_waiting(status, now), reported)
    status = _condition(status, "Ready", "True", "Scheduling", "The schedule is valid.", now)
    d = schedule.due(
        sched,
        now=now,
        last_schedule_time=status.last_schedule_time,
        created=_time(cron.metadata["creationTimestamp"]),
        starting_deadline_seconds=cron.spec.starting_deadline_seconds,
        waiting_time=status.waiting_schedule_time,
    )
    until_next = (d.next_time - now).total_seconds() if d.next_time else None
    if d.missed_deadline is not None and _run_exists(cron, d.missed_deadline, runs):
        # Started in time: its run was made before status.lastScheduleTime said so
        # (a reconcile between the run's create and that status write).
        d = replace(d, missed_deadline=None)
    events, reported = _schedule_events(cron, d, reported)
    if d.scheduled_time is None:
        return CronPlan(_not_waiting(status, now), reported, events, until_next)
    run = schedule.run_name(str(cron.metadata["name"]), d.scheduled_time)
    if any(r["metadata"]["name"] == run for r in runs):
        status = _not_waiting(status, now)
        status.last_schedule_time = d.scheduled_time
        return CronPlan(status, reported, events, until_next)
    return CronPlan(
        status,
        reported,
        events,
        until_next,
        run=run,
        scheduled_time=d.scheduled_time,
        policy=ConcurrencyPolicy(cron.spec.concurrency_policy),
    )


def _run_exists(cron: LeasedCronJob, scheduled_time: datetime, runs: list[Body]) -> bool:
    """Whether the run for ``scheduled_time`` is among ``runs`` (made already)."""
    run = schedule.run_name(str(cron.metadata["name"]), scheduled_time)
    return any(r["metadata"]["name"] == run for r in runs)


def _schedule_events(
    cron: LeasedCronJob, d: schedule.Due, reported: Reported
) -> tuple[list[JobEvent], Reported]:
    """A missed deadline and too many missed times, each told once per schedule time."""
    events: list[JobEvent] = []
    if d.missed_deadline is not None and reported.missed_deadline != d.missed_deadline:
        reported = replace(reported, missed_deadline=d.missed_deadline)
        events.append(
            JobEvent(
                "Warning",
                "MissSchedule",
                f"Missed scheduled time to start a run: {iso(d.missed_deadline)} is more than"
                f" startingDeadlineSeconds ({cron.spec.starting_deadline_seconds}) ago.",
            )
        )
    if d.scheduled_time is not None and d.too_many_missed and reported.too_many != d.scheduled_time:
        reported = replace(reported, too_many=d.scheduled_time)
        events.append(
            JobEvent(
                "Warning",
                "TooManyMissedTimes",
                f"Too many missed start times (more than {schedule.TOO_MANY_MISSED}); only the"
                " latest is started. Set or decrease spec.startingDeadlineSeconds or check the"
                " operator's clock.",
            )
        )
    return events, reported


def observe_runs(cron: LeasedCronJob, runs: list[Body]) -> LeasedCronJobStatus:
    """The cron job's status as read, with its generation, active runs and last success.

    Args:
        cron: the cron job.
        runs: its runs' LeasedJob bodies.

    Returns:
        A new status (the cron job's is not modified).
    """
    status = (cron.status or LeasedCronJobStatus()).model_copy(deep=True)
    status.observed_generation = cron.metadata.get("generation")
    active = []
    for run in sorted(runs, key=_scheduled_key):
        meta = run["metadata"]
        st = run.get("status") or {}
        scheduled = (meta.get("annotations") or {}).get(names.ANNOTATION_SCHEDULED_TIME)
        if st.get("phase") not in FINISHED:
            active.append(
                RunReference(
                    name=meta["name"],
                    uid=meta.get("uid"),
                    scheduled_time=_time(scheduled) if scheduled else None,
                )
            )
        elif st.get("phase") == api.Phase.SUCCEEDED.value and st.get("completionTime"):
            done = _time(st["completionTime"])
            if status.last_successful_time is None or done > status.last_successful_time:
                status.last_successful_time = done
    status.active = active or None
    return status


# -- runs that ended or went (Events) ----------------------------------------------


@dataclass(frozen=True)
class EndedRuns:
    """What became of the runs ``status.active`` lists (batch/v1's cronjob controller).

    Attributes:
        events: ``SawCompletedJob`` for each active run that finished.
        missing: active runs not listed any more: each is ``MissingJob`` once a
            read confirms it is gone (:func:`missing_event`).
        reported: what was told, these included (the actor keeps it).
    """

    events: list[JobEvent]
    missing: list[RunReference]
    reported: Reported


def ended_runs(cron: LeasedCronJob, runs: list[Body], reported: Reported) -> EndedRuns:
    """The runs ``status.active`` lists that finished or went, each told once.

    As ``syncCronJob`` in Kubernetes' ``pkg/controller/cronjob/cronjob_controllerv2.go``:
    an active job seen finished gets ``SawCompletedJob`` ("Saw completed job:
    <name>, condition: Complete|Failed"), an active job that no longer exists
    ``MissingJob``; both leave ``status.active`` (here: it is made again from
    the runs listed, :func:`observe_runs`). A run listed without a UID was
    never seen made (its create may have been refused): it is matched by name
    and never called missing.

    Args:
        cron: the cron job as read (its ``status.active`` is the list before).
        runs: its runs as listed now, before the history is cleaned.
        reported: what was told already.

    Returns:
        The Events, the runs to confirm missing, and what was told.
    """
    active = (cron.status.active if cron.status else None) or []
    by_uid = {str(r["metadata"].get("uid")): r for r in runs}
    by_name = {str(r["metadata"]["name"]): r for r in runs}
    told = {key for key in reported.ended if key in {ref.uid or ref.name for ref in active}}
    events: list[JobEvent] = []
    missing: list[RunReference] = []
    for ref in active:
        key = ref.uid or ref.name
        run = by_uid.get(ref.uid) if ref.uid else by_name.get(ref.name)
        if key in told or (run is None and ref.uid is None):
            continue
        phase = (run.get("status") or {}).get("phase") if run is not None else None
        if run is None:
            missing.append(ref)
        elif phase in FINISHED:
            condition = "Complete" if phase == api.Phase.SUCCEEDED.value else "Failed"
            events.append(
                JobEvent(
                    "Normal",
                    "SawCompletedJob",
                    f"Saw completed job: {ref.name}, condition: {condition}",
                )
            )
        else:
            continue
        told.add(key)
    return EndedRuns(events, missing, replace(reported, ended=frozenset(told)))


def missing_event(ref: RunReference) -> JobEvent:
    """The Event of an active run that no longer exists (batch/v1's ``MissingJob``)."""
    return JobEvent("Normal", "MissingJob", f"Active job went missing: {ref.name}")


def without_runs(decided: CronPlan, gone: set[str]) -> CronPlan:
    """``decided`` with the runs named in ``gone`` (deleted by a ``Replace``) not active.

    As batch/v1's controller drops a job it deleted from ``status.active`` at
    once, so the next reconcile does not call it missing.
    """
    if not gone:
        return decided
    status = decided.status.model_copy(deep=True)
    status.active = [r for r in status.active or [] if r.name not in gone] or None
    return replace(decided, status=status)


# -- the concurrency policy --------------------------------------------------------


@dataclass(frozen=True)
class Wait:
    """The due run waits for an earlier one: the status to write, and when to look again.

    Attributes:
        status: the status with ``Waiting=True``.
        reported: what was told, ``events`` included.
        events: Events to record on the cron job.
        requeue_after_seconds: when to reconcile again.
    """

    status: LeasedCronJobStatus
    reported: Reported
    events: list[JobEvent]
    requeue_after_seconds: float


def forbid_wait(plan: CronPlan, live: Sequence[RunLease], now: datetime) -> Wait | None:
    """``Forbid``: whether the due run waits, once the earlier runs' leases are closed.

    Args:
        plan: the due run's plan (:func:`decide`).
        live: the earlier runs' leases that were not final, as they are after
            the actor closed them (no claim can take them again).
        now: the operator's wall clock.

    Returns:
        The wait while any of them is still held (told once per schedule
        time), else ``None``: start.
    """
    held = [lease for lease in live if lease.record.holder_identity is not None]
    if not held or plan.scheduled_time is None:
        return None
    message = (
        f"Run for {iso(plan.scheduled_time)} waits: the lease of "
        + ", ".join(f"{lease.name} (token {lease.record.fencing_token})" for lease in held)
        + " is still held; it starts once released, reclaimed or completed."
    )
    status = _condition(plan.status, "Waiting", "True", "EarlierRunHoldsLease", message, now)
    status.waiting_schedule_time = plan.scheduled_time
    reported, events = plan.reported, []
    if reported.waiting != plan.scheduled_time:
        reported = replace(reported, waiting=plan.scheduled_time)
        events.append(JobEvent("Normal", "EarlierRunHoldsLease", message))
    until_next = plan.requeue_after_seconds
    return Wait(status, reported, events, min(WAIT_POLL_SECONDS, until_next or WAIT_POLL_SECONDS))


def replace_wait(
    plan: CronPlan, wait: float, now: datetime, *, replaced: bool = True
) -> Wait | None:
    """Whether the due run waits for an earlier run's worker whose hold the operator ended.

    ``Replace``: a replaced run's worker learns of it only when a renewal is
    refused. ``Forbid``: an earlier run suspended while it held its lease
    (unheld, not expired) has a worker that may still run until its window
    ends, though no lease is held any more (the Spin model found it:
    ``forbid-no-hold-wait`` in model/schedules.pml). Either way the new run
    (a higher token of the same domain) starts once every such window has
    surely ended (``HoldWaits.earlier_hold_wait``, which the actor asks).

    Args:
        plan: the due run's plan (:func:`decide`).
        wait: the longest hold window left of the earlier runs' leases.
        now: the operator's wall clock.
        replaced: ``Replace`` (reason ``ReplacedRunMayStillRun``), else
            ``Forbid`` (``EarlierRunMayStillRun``).

    Returns:
        The wait while a window is left, else ``None``: start.
    """
    if wait <= 0 or plan.scheduled_time is None:
        return None
    who = "a replaced run's" if replaced else "an earlier run's"
    message = (
        f"Run for {iso(plan.scheduled_time)} waits {wait:.0f}s: {who}"
        " worker may still run until its lease window ends."
    )
    reason = "ReplacedRunMayStillRun" if replaced else "EarlierRunMayStillRun"
    status = _condition(plan.status, "Waiting", "True", reason, message, now)
    status.waiting_schedule_time = plan.scheduled_time
    until_next = plan.requeue_after_seconds
    return Wait(status, plan.reported, [], min(wait, until_next or wait))


# -- starting the run ----------------------------------------------------------------


@dataclass(frozen=True)
class Start:
    """The due run, started: its token range, its lease, and the status after.

    Attributes:
        run: the run's name (its LeasedJob's and its JobLease's).
        scheduled_time: the schedule time it is for.
        base: its lease is created at this token, its cap there until its
            LeasedJob takes it over; its tokens are above it.
        budget: ``maxAttempts + backoffLimit`` (the template's; ``backoffLimitPerIndex``
            in place of ``backoffLimit`` where set): a take-over's cap is
            ``base + budget``, for the run's lease or each of its index leases.
        reserved: the range's top (``status.reservedFencingToken``, its lease's
            ``spec.ceilingFencingToken``): ``base + budget + RUN_UNCOUNTED_ROOM``.
        lease_duration_seconds: its lease's duration.
        mode: its lease's mode (push with a pod template, else pull).
        labels: its lease's labels.
        status: the status to write once the run is made.
    """

    run: str
    scheduled_time: datetime
    base: int
    budget: int
    reserved: int
    lease_duration_seconds: int
    mode: api.LeaseMode
    labels: dict[str, str]
    status: LeasedCronJobStatus

    def created_event(self) -> JobEvent:
        """The Event of the run's LeasedJob made."""
        return JobEvent(
            "Normal",
            "SuccessfulCreate",
            f"Created run {self.run} for {iso(self.scheduled_time)}; its fencing tokens"
            f" start above {self.base}.",
        )

    def name_taken_event(self) -> JobEvent:
        """The Event of a run skipped: a JobLease of its name is not this cron job's."""
        return JobEvent(
            "Warning",
            "RunNameTaken",
            f"A JobLease {self.run} that is not this cron job's exists; run skipped.",
        )


def plan_start(
    plan: CronPlan, cron: LeasedCronJob, records: Sequence[LeaseRecord], now: datetime
) -> Start:
    """Start the due run: its token range above every earlier reservation and lease.

    Args:
        plan: the due run's plan (:func:`decide`), not waiting.
        cron: the cron job.
        records: every lease labelled with the cron job (the run's own included).
        now: the operator's wall clock.

    Returns:
        What to reserve and create, and the status after.

    Raises:
        ValueError: ``plan`` has no run to start.
    """
    if plan.run is None or plan.scheduled_time is None:
        raise ValueError("plan_start needs a plan with a due run")
    status = _not_waiting(plan.status, now)
    spec = cron.spec.job_template.spec
    base = max(status.reserved_fencing_token or 0, reserved_floor(records))
    # Per lease: each index of a run of several completions is a lease of its
    # own, taken over at the run's base with at most this many claims above it.
    per_index = spec.backoff_limit_per_index
    budget = spec.max_attempts + (spec.backoff_limit if per_index is None else per_index)
    reserved = base + budget + RUN_UNCOUNTED_ROOM
    status.reserved_fencing_token = reserved
    status.last_schedule_time = plan.scheduled_time
    status.active = [
        *(status.active or []),
        RunReference(name=plan.run, scheduled_time=plan.scheduled_time),
    ]
    return Start(
        run=plan.run,
        scheduled_time=plan.scheduled_time,
        base=base,
        budget=budget,
        reserved=reserved,
        lease_duration_seconds=spec.lease_duration_seconds,
        mode=api.LeaseMode.PUSH if spec.template is not None else api.LeaseMode.PULL,
        labels={names.LABEL_JOB: plan.run, names.LABEL_CRON_JOB: str(cron.metadata["name"])},
        status=status,
    )


def reserve_patch(body: Body, start: Start) -> Body:
    """The status write reserving the run's range, conditioned on the version read.

    Two writers can never reserve the same range: the second one's write
    carries a resourceVersion that moved (409).
    """
    return {
        "metadata": {"resourceVersion": body["metadata"]["resourceVersion"]},
        "status": {"reservedFencingToken": start.reserved},
    }


def is_own_lease(lease_body: Body, cron_name: str) -> bool:
    """Whether an existing JobLease of a run's name is labelled with this cron job."""
    labels = lease_body["metadata"].get("labels") or {}
    return bool(labels.get(names.LABEL_CRON_JOB) == cron_name)


def build_run(body: Body, start: Start) -> Body:
    """The run's LeasedJob: the cron job's template, labelled, annotated and owned.

    Args:
        body: the cron job as written by the reservation.
        start: the run.

    Returns:
        The LeasedJob body to create.
    """
    meta = body["metadata"]
    namespace, name = str(meta["namespace"]), str(meta["name"])
    raw = body["spec"]["jobTemplate"]
    return {
        "apiVersion": names.API_VERSION,
        "kind": "LeasedJob",
        "metadata": {
            "name": start.run,
            "namespace": namespace,
            "labels": {
                **(raw.get("metadata") or {}).get("labels", {}),
                names.LABEL_CRON_JOB: name,
            },
            "annotations": {
                **(raw.get("metadata") or {}).get("annotations", {}),
                names.ANNOTATION_SCHEDULED_TIME: iso(start.scheduled_time),
            },
            "ownerReferences": [
                {
                    "apiVersion": names.API_VERSION,
                    "kind": "LeasedCronJob",
                    "name": name,
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": raw["spec"],
    }


# -- status ---------------------------------------------------------------------------


def status_patch(body: Body, status: LeasedCronJobStatus) -> Body | None:
    """The status write (conditioned on the version read), or ``None`` when unchanged.

    Fields the new status drops are written as ``null`` (a merge patch keeps them otherwise).
    """
    new = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    old = body.get("status") or {}
    if new == old:
        return None
    return {
        "metadata": {"resourceVersion": body["metadata"]["resourceVersion"]},
        "status": {**{k: None for k in old if k not in new}, **new},
    }


def _not_waiting(status: LeasedCronJobStatus, now: datetime) -> LeasedCronJobStatus:
    """A copy of ``status`` with no run waiting (``Waiting=False``, no waiting schedule time)."""
    out = status.model_copy(deep=True, update={"waiting_schedule_time": None})
    if any(c.type == "Waiting" and c.status == "True" for c in status.conditions or []):
        return _condition(out, "Waiting", "False", "NotWaiting", "No run waits.", now)
    return out


def _condition(
    status: LeasedCronJobStatus,
    type_: str,
    cstatus: str,
    reason: str,
    message: str,
    now: datetime,
) -> LeasedCronJobStatus:
    """A copy of ``status`` with one condition set (stamped with its observed generation)."""
    out = status.model_copy(deep=True)
    out.conditions = set_condition(
        list(status.conditions or []),
        type_,
        api.ConditionStatus(cstatus),
        reason,
        message,
        now=now,
        generation=status.observed_generation,
    )
    return out


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def iso(moment: datetime) -> str:
    """A time as the API writes it: UTC, whole seconds, ``Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
