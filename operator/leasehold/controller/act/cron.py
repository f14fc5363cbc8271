"""LeasedCronJobs: a LeasedJob at each schedule time, all runs in one fencing domain.

Why this module exists: it carries out a cron job's schedule
(:func:`leasehold.lease.schedule.due` decides what is due) against the API:
it makes each run's JobLease and LeasedJob, enforces the concurrency policy
through the runs' leases, keeps the history and reports the status. Each
run's LeasedJob is then reconciled like any other
(:mod:`leasehold.controller.act.jobs`). Why the runs' tokens are ordered and
why ``Forbid`` and ``Replace`` hold at the store: docs/architecture.md,
"LeasedCronJob".
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from leasehold import names
from leasehold.controller.act.context import COMPONENT, Context
from leasehold.controller.act.holds import HoldWaits
from leasehold.controller.engines.peering import ActivityGate
from leasehold.controller.engines.queue import WorkQueue
from leasehold.controller.plan.conditions import set_condition
from leasehold.controller.plan.cron import (
    _scheduled_key,
    history_to_delete,
    lease_is_final,
    reserved_floor,
)
from leasehold.lease import models, schedule
from leasehold.lease.cronmodels import (
    MAX_CRON_NAME_LENGTH,
    ConcurrencyPolicy,
    LeasedCronJob,
    LeasedCronJobStatus,
    RunReference,
)
from leasehold.lease.errors import TransientStoreError, WriteRefusedError, api_error
from leasehold.lease.store import Accepted, LeaseStore, StoredLease

log = logging.getLogger(__name__)

WAIT_POLL_SECONDS: Final = 5.0
"""While ``Forbid`` waits for an earlier run's lease, look again this often (the
run's LeasedJob events usually come first)."""

FINISHED: Final = (models.Phase.SUCCEEDED.value, models.Phase.FAILED.value)


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class _Reported:
    """What was reported per cron job (Events are not repeated at every reconcile)."""

    missed_deadline: datetime | None = None
    too_many: datetime | None = None
    waiting: datetime | None = None


# -- the service ------------------------------------------------------------------


class CronService:
    """Reconcile LeasedCronJobs.

    Args:
        api_client: a configured ``kubernetes.client.ApiClient``.
        ctx: the shared edges and state (the lease store, the Event recorder).
        holds: the waits before a replacing run's token.
        clock: this operator's wall clock: when schedule times are due (injected
            in tests; it decides when to start a run, never who owns one).
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        ctx: Context,
        holds: HoldWaits,
        *,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self._custom = client.CustomObjectsApi(api_client)
        self._ctx = ctx
        self._holds = holds
        self._store: LeaseStore = ctx.store
        self._clock = clock
        self._reported: dict[str, _Reported] = {}

    # -- reading ------------------------------------------------------------------

    def _get(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            body: Any = self._custom.get_namespaced_custom_object(
                names.GROUP, names.VERSION, namespace, names.PLURAL_LEASED_CRON_JOBS, name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise api_error(exc, f"get LeasedCronJob {namespace}/{name}") from exc
        return cast("dict[str, Any]", body)

    def _runs(self, namespace: str, name: str, uid: str) -> list[dict[str, Any]]:
        try:
            body: Any = self._custom.list_namespaced_custom_object(
                names.GROUP,
                names.VERSION,
                namespace,
                names.PLURAL_LEASED_JOBS,
                label_selector=f"{names.LABEL_CRON_JOB}={name}",
            )
        except ApiException as exc:
            raise api_error(exc, f"list runs of {namespace}/{name}") from exc
        return [
            item
            for item in cast("dict[str, Any]", body).get("items", [])
            if any(
                ref.get("uid") == uid and ref.get("controller")
                for ref in item["metadata"].get("ownerReferences") or []
            )
        ]

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
        body = self._get(namespace, name)
        if body is None:
            self._reported.pop(f"{namespace}/{name}", None)
            return None
        generation = body["metadata"].get("generation")
        try:
            cron = LeasedCronJob.model_validate(body)
            if len(name) > MAX_CRON_NAME_LENGTH:
                raise schedule.InvalidScheduleError(
                    f"metadata.name is longer than {MAX_CRON_NAME_LENGTH} characters: a run's"
                    " name (<name>-<unix minutes>) must stay a valid label value"
                )
            sched = schedule.parse(cron.spec.schedule, cron.spec.time_zone)
        except (ValidationError, schedule.InvalidScheduleError) as exc:
            self._report_invalid(body, exc)
            return None
        now = self._clock()
        status = (cron.status or LeasedCronJobStatus()).model_copy(deep=True)
        status.observed_generation = generation
        runs = self._runs(namespace, name, str(body["metadata"]["uid"]))
        runs = self._clean_history(body, cron, runs)
        self._prune_leases(namespace, name, {r["metadata"]["name"] for r in runs})
        self._observe_runs(status, runs)
        reported = self._reported.setdefault(f"{namespace}/{name}", _Reported())

        if cron.spec.suspend:
            self._condition(status, "Ready", "True", "Suspended", "Suspended: no new runs.", now)
            self._not_waiting(status, now)
            self._write_status(body, status)
            return None
        self._condition(status, "Ready", "True", "Scheduling", "The schedule is valid.", now)
        created = _time(body["metadata"]["creationTimestamp"])
        d = schedule.due(
            sched,
            now=now,
            last_schedule_time=status.last_schedule_time,
            created=created,
            starting_deadline_seconds=cron.spec.starting_deadline_seconds,
        )
        until_next = (d.next_time - now).total_seconds() if d.next_time else None
        if d.missed_deadline is not None and reported.missed_deadline != d.missed_deadline:
            reported.missed_deadline = d.missed_deadline
            self._event(
                body,
                "Warning",
                "MissSchedule",
                f"Missed scheduled time to start a run: {_iso(d.missed_deadline)} is more than"
                f" startingDeadlineSeconds ({cron.spec.starting_deadline_seconds}) ago.",
            )
        if d.scheduled_time is None:
            self._not_waiting(status, now)
            self._write_status(body, status)
            return until_next
        if d.too_many_missed and reported.too_many != d.scheduled_time:
            reported.too_many = d.scheduled_time
            self._event(
                body,
                "Warning",
                "TooManyMissedTimes",
                f"Too many missed start times (more than {schedule.TOO_MANY_MISSED}); only the"
                " latest is started. Set or decrease spec.startingDeadlineSeconds or check the"
                " operator's clock.",
            )
        run = schedule.run_name(name, d.scheduled_time)
        if any(r["metadata"]["name"] == run for r in runs):
            self._not_waiting(status, now)
            status.last_schedule_time = d.scheduled_time
            self._write_status(body, status)
            return until_next

        leases = self._store.list_leases(namespace, label_selector=f"{names.LABEL_CRON_JOB}={name}")
        earlier = [lease for lease in leases if lease.name != run]
        policy = ConcurrencyPolicy(cron.spec.concurrency_policy)
        if policy is ConcurrencyPolicy.FORBID:
            held = self._close_earlier(earlier)
            if held:
                message = (
                    f"Run for {_iso(d.scheduled_time)} waits: the lease of "
                    + ", ".join(
                        f"{lease.name} (token {lease.record.fencing_token})" for lease in held
                    )
                    + " is still held; it starts once released, reclaimed or completed."
                )
                self._condition(status, "Waiting", "True", "EarlierRunHoldsLease", message, now)
                if reported.waiting != d.scheduled_time:
                    reported.waiting = d.scheduled_time
                    self._event(body, "Normal", "EarlierRunHoldsLease", message)
                self._write_status(body, status)
                return min(WAIT_POLL_SECONDS, until_next or WAIT_POLL_SECONDS)
        elif policy is ConcurrencyPolicy.REPLACE:
            current = self._replace_earlier(body, earlier, runs)
            # A replaced run's worker learns of it only when a renewal is
            # refused: the new run (a higher token of the same domain) starts
            # once every such window has surely ended (HoldWaits.earlier_hold_wait).
            wait = max(
                (self._holds.earlier_hold_wait(lease, body) for lease in current), default=0.0
            )
            if wait > 0:
                message = (
                    f"Run for {_iso(d.scheduled_time)} waits {wait:.0f}s: a replaced run's"
                    " worker may still run until its lease window ends."
                )
                self._condition(status, "Waiting", "True", "ReplacedRunMayStillRun", message, now)
                self._write_status(body, status)
                return min(wait, until_next or wait)
        self._not_waiting(status, now)
        body, base = self._reserve(body, status, cron, leases)
        self._start_run(body, cron, run, d.scheduled_time, base)
        status.last_schedule_time = d.scheduled_time
        status.active = [
            *(status.active or []),
            RunReference(name=run, scheduled_time=d.scheduled_time),
        ]
        self._write_status(body, status)
        return until_next

    # -- the concurrency policy, at the leases ---------------------------------------

    def _close_earlier(self, earlier: list[StoredLease]) -> list[StoredLease]:
        """Forbid: no earlier run may claim again; return the leases still held."""
        held: list[StoredLease] = []
        for lease in earlier:
            record = lease.record
            if lease_is_final(record):
                continue
            cap = record.max_fencing_token
            if cap is None or cap > record.fencing_token:
                result = self._store.close(lease)
                if not isinstance(result, Accepted):
                    raise TransientStoreError(f"close lease {lease.name}: it moved, retrying")
                lease = result.lease
            if lease.record.holder_identity is not None:
                held.append(lease)
        return held

    def _replace_earlier(
        self, body: dict[str, Any], earlier: list[StoredLease], runs: list[dict[str, Any]]
    ) -> list[StoredLease]:
        """Replace: take every earlier run's lease back now, then delete its LeasedJob.

        Only runs whose lease this call stopped are deleted: a run that completed
        first keeps its LeasedJob (its status may not say so yet).

        Returns:
            The earlier runs' leases as they are now (stopped, or as they were).
        """
        stopped: set[str] = set()
        current: list[StoredLease] = []
        for lease in earlier:
            if lease_is_final(lease.record):
                current.append(lease)
                continue
            result = self._store.stop(lease)
            current.append(result.lease)
            if not isinstance(result, Accepted) and result.lease.record.completion is None:
                raise TransientStoreError(f"stop lease {lease.name}: it moved, retrying")
            if isinstance(result, Accepted):
                stopped.add(lease.name)
                self._event(
                    body,
                    "Normal",
                    "Replaced",
                    f"Run {lease.name} replaced: its lease was taken back at fencing token"
                    f" {lease.record.fencing_token}; its late writes are refused.",
                )
        for run in runs:
            meta = run["metadata"]
            if meta["name"] in stopped:
                self._delete_run(str(meta["namespace"]), str(meta["name"]))
        return current

    # -- the fencing domain ---------------------------------------------------------

    def _reserve(
        self,
        body: dict[str, Any],
        status: LeasedCronJobStatus,
        cron: LeasedCronJob,
        leases: list[StoredLease],
    ) -> tuple[dict[str, Any], int]:
        """Reserve the next run's token range in one conditional status write.

        The range starts above every earlier reservation and every run lease's cap
        and token; the write carries the resourceVersion read, so two writers can
        never reserve the same range. Sets ``status.reserved_fencing_token`` to the
        range's top; returns the cron job's body as written and the range's base.
        """
        template = cron.spec.job_template.spec
        base = max(status.reserved_fencing_token or 0, reserved_floor([x.record for x in leases]))
        budget = template.max_attempts + template.backoff_limit
        patch = {
            "metadata": {"resourceVersion": body["metadata"]["resourceVersion"]},
            "status": {"reservedFencingToken": base + budget},
        }
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        try:
            written: Any = self._custom.patch_namespaced_custom_object_status(
                names.GROUP,
                names.VERSION,
                namespace,
                names.PLURAL_LEASED_CRON_JOBS,
                name,
                patch,
                field_manager=COMPONENT,
            )
        except ApiException as exc:
            if exc.status == 409:
                raise TransientStoreError(f"reserve tokens of {namespace}/{name}: moved") from exc
            raise api_error(exc, f"reserve tokens of {namespace}/{name}") from exc
        status.reserved_fencing_token = base + budget
        return cast("dict[str, Any]", written), base

    def _start_run(
        self, body: dict[str, Any], cron: LeasedCronJob, run: str, scheduled: datetime, base: int
    ) -> None:
        """Create the run's JobLease at ``base`` (closed), then its LeasedJob, which takes it."""
        meta = body["metadata"]
        namespace, name = str(meta["namespace"]), str(meta["name"])
        template = cron.spec.job_template
        spec = template.spec
        try:
            self._store.create(
                namespace,
                run,
                job_name=run,
                lease_duration_seconds=spec.lease_duration_seconds,
                # Closed until the run's LeasedJob takes it over (LeaseStore.rearm):
                # no pool can claim it before, and the take-over raises the cap
                # to base + maxAttempts + backoffLimit, the range reserved.
                max_fencing_token=base,
                initial_fencing_token=base,
                labels={names.LABEL_JOB: run, names.LABEL_CRON_JOB: name},
                mode=models.LeaseMode.PUSH if spec.template is not None else models.LeaseMode.PULL,
                finalizers=[names.FINALIZER_DOMAIN],
            )
        except WriteRefusedError:
            existing = self._store.get(namespace, run)
            labels = existing.body["metadata"].get("labels") or {}
            if labels.get(names.LABEL_CRON_JOB) != name:
                self._event(
                    body,
                    "Warning",
                    "RunNameTaken",
                    f"A JobLease {run} that is not this cron job's exists; run skipped.",
                )
                return
        raw = body["spec"]["jobTemplate"]
        job = {
            "apiVersion": names.API_VERSION,
            "kind": "LeasedJob",
            "metadata": {
                "name": run,
                "namespace": namespace,
                "labels": {
                    **(raw.get("metadata") or {}).get("labels", {}),
                    names.LABEL_CRON_JOB: name,
                },
                "annotations": {
                    **(raw.get("metadata") or {}).get("annotations", {}),
                    names.ANNOTATION_SCHEDULED_TIME: _iso(scheduled),
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
        try:
            self._custom.create_namespaced_custom_object(
                names.GROUP, names.VERSION, namespace, names.PLURAL_LEASED_JOBS, job
            )
        except ApiException as exc:
            if exc.status != 409:
                raise api_error(exc, f"create LeasedJob {namespace}/{run}") from exc
            return
        self._event(
            body,
            "Normal",
            "SuccessfulCreate",
            f"Created run {run} for {_iso(scheduled)}; its fencing tokens start above {base}.",
        )

    # -- history and status -----------------------------------------------------------

    def _clean_history(
        self, body: dict[str, Any], cron: LeasedCronJob, runs: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        gone = set(
            history_to_delete(
                runs,
                succeeded=cron.spec.successful_jobs_history_limit,
                failed=cron.spec.failed_jobs_history_limit,
            )
        )
        for run in gone:
            self._delete_run(str(body["metadata"]["namespace"]), run)
            self._event(body, "Normal", "SuccessfulDelete", f"Deleted finished run {run}.")
        return [r for r in runs if r["metadata"]["name"] not in gone]

    def _prune_leases(self, namespace: str, name: str, runs: set[str]) -> None:
        """Delete the JobLeases of runs that are gone, all but the domain's top one.

        A run's lease outlives its LeasedJob (the domain finalizer); once the run
        left the history, only the lease with the highest cap or token is kept
        (it carries the domain if the cron job is created again under its
        name; ``status.reservedFencingToken`` carries it otherwise), so a cron
        job keeps about as many leases as runs.
        """
        leases = self._store.list_leases(namespace, label_selector=f"{names.LABEL_CRON_JOB}={name}")
        if not leases:
            return
        top = max(leases, key=lambda x: reserved_floor([x.record]))
        for lease in leases:
            if lease is top or lease.name in runs or not lease_is_final(lease.record):
                continue
            if self._holds.hold_window_left(lease) > 0:
                # A replaced run's worker may still run: its lease (and its
                # expiry clock) stays until its window has surely ended, so a
                # Replace that waits for it still sees it.
                continue
            if not lease.body["metadata"].get("deletionTimestamp"):
                self._store.delete(namespace, lease.name)
            self._store.drop_finalizer(namespace, lease.name, names.FINALIZER_DOMAIN)
            log.info("run %s/%s is gone: its JobLease deleted", namespace, lease.name)

    def _delete_run(self, namespace: str, run: str) -> None:
        try:
            self._custom.delete_namespaced_custom_object(
                names.GROUP,
                names.VERSION,
                namespace,
                names.PLURAL_LEASED_JOBS,
                run,
                propagation_policy="Background",
            )
        except ApiException as exc:
            if exc.status != 404:
                raise api_error(exc, f"delete LeasedJob {namespace}/{run}") from exc

    def _observe_runs(self, status: LeasedCronJobStatus, runs: list[dict[str, Any]]) -> None:
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
            elif st.get("phase") == models.Phase.SUCCEEDED.value and st.get("completionTime"):
                done = _time(st["completionTime"])
                if status.last_successful_time is None or done > status.last_successful_time:
                    status.last_successful_time = done
        status.active = active or None

    def _not_waiting(self, status: LeasedCronJobStatus, now: datetime) -> None:
        if any(c.type == "Waiting" and c.status == "True" for c in status.conditions or []):
            self._condition(status, "Waiting", "False", "NotWaiting", "No run waits.", now)

    def _condition(
        self,
        status: LeasedCronJobStatus,
        type_: str,
        cstatus: str,
        reason: str,
        message: str,
        now: datetime,
    ) -> None:
        status.conditions = set_condition(
            list(status.conditions or []),
            type_,
            models.ConditionStatus(cstatus),
            reason,
            message,
            now=now,
            generation=status.observed_generation,
        )

    def _report_invalid(
        self, body: dict[str, Any], exc: ValidationError | schedule.InvalidScheduleError
    ) -> None:
        if isinstance(exc, ValidationError):
            first = exc.errors()[0]
            message = (
                f"Invalid LeasedCronJob: {'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
            )
            reason = "InvalidSpec"
        else:
            message, reason = str(exc), "InvalidSchedule"
        generation = body["metadata"].get("generation")
        old = (body.get("status") or {}).get("conditions") or []
        already = any(
            c.get("type") == "Ready"
            and c.get("reason") == reason
            and c.get("message") == message
            and c.get("observedGeneration") == generation
            for c in old
        )
        if not already:
            self._event(body, "Warning", reason, message)
        status = LeasedCronJobStatus.model_validate(body.get("status") or {})
        status.observed_generation = generation
        self._condition(status, "Ready", "False", reason, message, self._clock())
        self._write_status(body, status)

    def _write_status(self, body: dict[str, Any], status: LeasedCronJobStatus) -> None:
        new = status.model_dump(mode="json", by_alias=True, exclude_none=True)
        old = body.get("status") or {}
        if new == old:
            return
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        patch: dict[str, Any] = {
            "metadata": {"resourceVersion": body["metadata"]["resourceVersion"]},
            "status": {**{k: None for k in old if k not in new}, **new},
        }
        try:
            self._custom.patch_namespaced_custom_object_status(
                names.GROUP,
                names.VERSION,
                namespace,
                names.PLURAL_LEASED_CRON_JOBS,
                name,
                patch,
                field_manager=COMPONENT,
            )
        except ApiException as exc:
            if exc.status in (404, 409):
                return  # gone, or changed since read: its event reconciles again
            raise api_error(exc, f"patch status of LeasedCronJob {namespace}/{name}") from exc

    def _event(self, body: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self._ctx.events.record(body, type_, reason, message)


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_queue(service: CronService, gate: ActivityGate, retry_delay_seconds: float) -> WorkQueue:
    """The cron jobs' own work queue: one reconcile per cron job at a time.

    Args:
        service: the cron service.
        gate: open while this replica may work (Kopf's peering rule); a paused
            replica's timers fire but reconcile nothing.
        retry_delay_seconds: delay before retrying after a transient error.

    Returns:
        A queue whose reconciles re-arm themselves at the next schedule time.
    """

    def work(namespace: str, name: str) -> float | None:
        if not gate.is_open:
            return None
        return service.reconcile(namespace, name)

    return WorkQueue(work, retry_delay_seconds)
