"""The queue actor: a queued LeasedJob's Workload, made, read and told how the job went.

Why this module exists: the decisions are pure
(:mod:`leasehold.controller.plan.queueing`); this actor makes the calls they
need around one reconcile of a queued job. Before the plan: find Kueue (once;
a cluster without it is told on the job), read the job's Workload and, once
admitted, its flavors, and answer the gate; on a fresh read of the job only,
create the Workload if it has none, or update a pending one that no longer
matches. After the plan: once an evicted job holds no lease and runs no pod
(confirmed with a LIST of its pods and of its leases, never from caches),
unset the Workload's quota reservation (so Kueue requeues it), or delete a
Workload that must go (no longer matching while admitted; the queue label
removed); once the job ended, mark the Workload ``Finished``. A job that is
not queued and never was costs no call.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final

from leasehold import names
from leasehold.controller.act.context import Context
from leasehold.controller.kube.objects import Body, Refused
from leasehold.controller.kube.pods import owned_by
from leasehold.controller.kube.workloads import Workloads
from leasehold.controller.plan import queueing
from leasehold.controller.plan.queueing import Gate, Priority, State
from leasehold.controller.plan.single import JobEvent, Plan
from leasehold.lease.api import LeasedJob, LeasedJobStatus, Phase
from leasehold.lease.errors import TransientStoreError

log = logging.getLogger(__name__)

RECHECK_KUEUE_SECONDS: Final = 30.0
"""How long a finding that Kueue is not installed stands before discovery is asked again."""
RETRY_SECONDS: Final = 1.0
"""When to look again after a Workload write lost a race with Kueue."""
QUIET_RECHECK_SECONDS: Final = 1.0
"""When to look again while an evicted (or retiring) job still has a pod or a held lease."""


@dataclass(frozen=True)
class Told:
    """How a plan's status and Events are told for a job under a gate (or none).

    Attributes:
        gate: the job's gate; ``None`` for a job that is not queued.
        spec_suspend: the stored ``spec.suspend`` (then its own words stand).
        workload: the Workload name to keep in ``status.workload`` (``None``: none left).
    """

    gate: Gate | None
    spec_suspend: bool
    workload: str | None = None

    def status(self, status: LeasedJobStatus, now: datetime, generation: Any) -> LeasedJobStatus:
        """``status`` in the queue's words (:func:`~leasehold.controller.plan.queueing.restate`)."""
        gen = int(generation) if generation is not None else None
        told = queueing.restate(
            status, self.gate, spec_suspend=self.spec_suspend, now=now, generation=gen
        )
        if told.workload != self.workload:
            told = told.model_copy(update={"workload": self.workload})
        return told

    def events(self, events: list[JobEvent]) -> list[JobEvent]:
        """``events`` in the queue's words (:func:`.queueing.restate_events`)."""
        return queueing.restate_events(events, self.gate, spec_suspend=self.spec_suspend)

    def plan(self, plan: Plan, now: datetime, generation: Any) -> Plan:
        """``plan`` with its status and Events in the queue's words."""
        if self.gate is None:
            return replace(plan, status=self.status(plan.status, now, generation))
        return replace(
            plan,
            status=self.status(plan.status, now, generation),
            events=self.events(list(plan.events)),
        )


@dataclass(frozen=True)
class Queued:
    """A queued job's gate, and the Workload it was decided on.

    Attributes:
        gate: the decision.
        workload: the Workload as read (``None`` when there is none to write).
        writes: the Workload must be made or updated first, which is done
            on a fresh read of the job only: plan again on one.
        retire: the Workload must be deleted once the job runs nothing (it
            no longer matches while its quota is reserved, or the job's
            queue label was removed); the gate stays closed meanwhile.
        record: the Workload name to keep in the job's ``status.workload``.
    """

    gate: Gate
    workload: Body | None
    writes: bool = False
    retire: bool = False
    record: str | None = None


class QueueActor:
    """The Workload side of queued jobs.

    Args:
        ctx: the shared edges and state.
        workloads: the Kueue edge.
    """

    def __init__(self, ctx: Context, workloads: Workloads) -> None:
        self._ctx = ctx
        self._workloads = workloads
        self._served: bool | None = None
        self._asked_at = 0.0

    def _kueue_served(self) -> bool:
        """Whether Kueue's Workload API is served: found once for good; absent, asked later."""
        now = self._ctx.monotonic()
        if self._served or (self._served is False and now - self._asked_at < RECHECK_KUEUE_SECONDS):
            return bool(self._served)
        self._served, self._asked_at = self._workloads.served(), now
        if not self._served:
            log.warning("Kueue's workloads.%s/%s is not served", queueing.GROUP, queueing.VERSION)
        return self._served

    def gate(self, job: LeasedJob, *, fresh: bool) -> Queued | None:
        """The gate of a job; on a fresh read, its Workload made or updated first.

        Args:
            job: the LeasedJob as read (validated).
            fresh: ``job`` was read with a GET (not the cache): only then
                is a Workload created or updated (a cached body may carry a
                stale label, pod count or UID).

        Returns:
            ``None`` for a job that is not queued and has no Workload left,
            or a finished one that never had a Workload; else its
            :class:`Queued` (``writes`` set: plan again on a fresh read).

        Raises:
            StoreError: a call failed (transient ones as TransientStoreError).
        """
        recorded = job.status.workload if job.status else None
        queue = queueing.queue_name(job)
        if queue is None:
            return self._unqueued(job, recorded) if recorded else None
        uid = str(job.metadata.get("uid", ""))
        wl_name = queueing.workload_name(str(job.metadata["name"]), uid)
        closed = self._cannot_queue(job, queue, wl_name)
        if closed is not None:
            return Queued(closed, None, record=recorded)
        workload = self._workloads.get(str(job.metadata["namespace"]), wl_name)
        over = (job.status and job.status.phase) in (Phase.SUCCEEDED, Phase.FAILED)
        if workload is not None and not queueing.owned_by_job(workload, uid):
            return Queued(self._foreign(job, queue, wl_name), None, record=recorded)
        if workload is None:
            if over:
                return None  # over before it was queued (or its Workload was deleted)
            if not fresh:
                return Queued(_pending(queue, wl_name), None, writes=True, record=recorded)
            workload = self._create(job, queue)
            if not queueing.owned_by_job(workload, uid):  # a racing create by someone else
                return Queued(self._foreign(job, queue, wl_name), None, record=recorded)
        elif not over and not queueing.is_true(workload, "Finished"):
            stale = queueing.out_of_sync(workload, job, queue)
            if stale is not None and queueing.is_true(workload, "QuotaReserved"):
                gate = _replacing(workload, queue, stale)
                return Queued(gate, workload, retire=True, record=wl_name)
            if stale is not None:
                if not fresh:
                    return Queued(_pending(queue, wl_name), None, writes=True, record=recorded)
                workload = self._update(job, queue, workload, stale)
        info = None
        if queueing.is_true(workload, "Admitted") and not over:
            found = {f: self._workloads.flavor(f) for f in queueing.admitted_flavors(workload)}
            info = queueing.pod_set_info([f for f in found.values() if f is not None])
            missing = [f for f, body in found.items() if body is None]
            problem = (
                f"ResourceFlavor {', '.join(missing)} not found"
                if missing
                else queueing.selector_conflict(job, info)
            )
            if problem is not None and not queueing.is_true(workload, "Evicted"):
                gate = self._not_applicable(job, queue, wl_name, problem)
                return Queued(gate, workload, record=wl_name)
        gate = queueing.decide(workload, queue, info, job_over=bool(over))
        return Queued(gate, workload, record=wl_name)

    def _not_applicable(self, job: LeasedJob, queue: str, wl_name: str, problem: str) -> Gate:
        """The closed gate (and a Warning Event) of an admission the pods cannot be given."""
        message = (
            f"Admitted by Kueue (Workload {wl_name}, LocalQueue {queue}), but {problem}: no"
            " attempt starts (as jobframework refuses to start the job); looked at again"
            f" every {RECHECK_KUEUE_SECONDS:.0f} s."
        )
        log.warning("%s/%s: %s", job.metadata["namespace"], job.metadata["name"], message)
        self._ctx.events.record(_body(job), "Warning", queueing.CANNOT_START, message)
        return queueing.unavailable(queue, wl_name, queueing.CANNOT_START, message)

    def _cannot_queue(self, job: LeasedJob, queue: str, wl_name: str) -> Gate | None:
        """The closed gate of a job that cannot be queued here (no Kueue; pull mode), else None."""
        if not self._kueue_served():
            message = (
                f"Queued in LocalQueue {queue} (label {queueing.QUEUE_LABEL}), but the cluster"
                f" serves no workloads.{queueing.GROUP}/{queueing.VERSION}: install Kueue"
                " (README, 'Queue with Kueue') or remove the label. No attempt starts meanwhile."
            )
            return queueing.unavailable(queue, wl_name, queueing.KUEUE_MISSING, message)
        if job.spec.template is None:
            message = (
                f"Queued in LocalQueue {queue}, but a LeasedJob without spec.template (pull"
                " mode) has no pod set for Kueue to admit: remove the label. No attempt starts."
            )
            return queueing.unavailable(queue, wl_name, queueing.QUEUE_UNSUPPORTED, message)
        return None

    def _foreign(self, job: LeasedJob, queue: str, wl_name: str) -> Gate:
        """The closed gate of a job whose Workload name is taken by another owner's Workload."""
        message = (
            f"Workload {wl_name} exists but is not controlled by this LeasedJob (its"
            " ownerReferences name another object): it is neither adopted nor deleted, and"
            " no attempt starts. Delete that Workload (the operator then makes the job's own)."
        )
        log.warning("%s/%s: %s", job.metadata["namespace"], job.metadata["name"], message)
        return queueing.unavailable(queue, wl_name, queueing.WORKLOAD_NOT_OWNED, message)

    def _unqueued(self, job: LeasedJob, recorded: str) -> Queued | None:
        """A job whose queue label was removed: its Workload retired before it runs unqueued.

        As a change of queue (Kueue's webhook would refuse the change on a
        running job; no CEL rule can see labels): the gate stays closed, so
        a running attempt ends fenced; :meth:`after` deletes the Workload
        once nothing runs; then the job runs as an unlabelled one.

        Returns:
            ``None`` once no Workload of the job is left (``status.workload``
            is then cleared), else the closed gate with ``retire`` set.
        """
        workload = self._workloads.get(str(job.metadata["namespace"]), recorded)
        uid = str(job.metadata.get("uid", ""))
        over = (job.status and job.status.phase) in (Phase.SUCCEEDED, Phase.FAILED)
        if workload is None or not queueing.owned_by_job(workload, uid) or over:
            return None
        queue = str((workload.get("spec") or {}).get("queueName") or "")
        message = (
            f"The label {queueing.QUEUE_LABEL} was removed: Workload {recorded} (LocalQueue"
            f" {queue}) is deleted once the job runs nothing; it then runs unqueued."
        )
        gate = Gate(State.WAITING, recorded, queue, queueing.QUEUE_REMOVED, message)
        return Queued(gate, workload, retire=True, record=recorded)

    def _update(self, job: LeasedJob, queue: str, workload: Body, stale: str) -> Body:
        """Bring a pending Workload in line with the job (queue, pod count), as jobframework does.

        Returns:
            The Workload as updated.

        Raises:
            StoreError: a call failed (a conflict as TransientStoreError: look again).
        """
        namespace = str(job.metadata["namespace"])
        meta = workload["metadata"]
        spec = queueing.build_workload(job, queue, None)["spec"]
        updated = self._workloads.update_spec(
            namespace,
            meta["name"],
            meta["resourceVersion"],
            {"queueName": queue, "podSets": spec["podSets"]},
        )
        if isinstance(updated, Refused):
            raise TransientStoreError(f"Workload {namespace}/{meta['name']} moved ({stale})")
        log.info(
            "%s/%s: updated Workload %s: %s", namespace, job.metadata["name"], meta["name"], stale
        )
        return updated

    def _create(self, job: LeasedJob, queue: str) -> Body:
        """Create the job's Workload (or read the one a racing create made)."""
        namespace = str(job.metadata["namespace"])
        source = queueing.priority_source(job)
        priority = None
        if source is not None:
            value = self._workloads.priority(*source)
            priority = Priority(source[0], source[1], value) if value is not None else None
        body = queueing.build_workload(job, queue, priority)
        created = self._workloads.create(namespace, body)
        if created is None:
            existing = self._workloads.get(namespace, body["metadata"]["name"])
            if existing is None:
                raise TransientStoreError(f"Workload {namespace}/{body['metadata']['name']} moved")
            return existing
        log.info(
            "%s/%s: created Workload %s in LocalQueue %s (%d pods)",
            namespace,
            job.metadata["name"],
            body["metadata"]["name"],
            queue,
            body["spec"]["podSets"][0]["count"],
        )
        self._ctx.events.record(
            _body(job),
            "Normal",
            "CreatedWorkload",
            f"Created Workload {body['metadata']['name']} in LocalQueue {queue}: the job waits"
            " for Kueue to admit it.",
        )
        return created

    def after(
        self, job: LeasedJob, queued: Queued, status: LeasedJobStatus, *, acted: bool = False
    ) -> float | None:
        """Tell the Workload how the job went: finished, stopped after an eviction, or gone.

        The quota of an evicted Workload is unset, and a Workload that must
        go is deleted, only once the API confirms that nothing of the job
        runs (:meth:`_quiet`), and never in the reconcile whose plan acted:
        pods just deleted may still be running their grace period.

        Args:
            job: the LeasedJob as read.
            queued: its gate and Workload, from :meth:`gate`.
            status: the job's status as written.
            acted: this reconcile's plan wrote a lease or deleted pods.

        Returns:
            Seconds after which to reconcile again (a write lost a race, or
            the job still runs something), or ``None``.

        Raises:
            StoreError: a write failed otherwise.
        """
        workload = queued.workload
        if workload is None:
            return None
        namespace, name = str(job.metadata["namespace"]), str(job.metadata["name"])
        meta = workload["metadata"]
        if status.phase in (Phase.SUCCEEDED, Phase.FAILED):
            if queued.gate.state is State.FINISHED or queued.retire:
                return None
            succeeded = status.phase == Phase.SUCCEEDED
            new = queueing.finished_status(workload, succeeded, _ending(status), self._ctx.now())
            written = self._workloads.write_status(
                namespace, meta["name"], meta["resourceVersion"], new
            )
            if isinstance(written, Refused):
                return RETRY_SECONDS if written is Refused.CONFLICT else None
            log.info("%s/%s: Workload %s finished", namespace, name, meta["name"])
            self._ctx.events.record(
                _body(job),
                "Normal",
                "FinishedWorkload",
                f"Workload {meta['name']} is declared finished ({_ending(status)}).",
            )
            return None
        if not queued.retire and not queueing.quota_to_release(workload, status):
            return None
        if acted or not self._quiet(job):
            return QUIET_RECHECK_SECONDS
        if queued.retire:
            return self._retire(job, queued, workload)
        new = queueing.released_status(workload, self._ctx.now())
        written = self._workloads.write_status(
            namespace, meta["name"], meta["resourceVersion"], new
        )
        if isinstance(written, Refused):
            return RETRY_SECONDS if written is Refused.CONFLICT else None
        log.info(
            "%s/%s: Workload %s given its quota back (no pod of the job left, no lease held)",
            namespace,
            name,
            meta["name"],
        )
        return None

    def _quiet(self, job: LeasedJob) -> bool:
        """Whether nothing of the job runs, by the API (never the caches).

        A LIST of the job's pods: none of this incarnation's left that is not
        terminal (one being deleted counts until it is gone); a LIST of its
        leases (the job's and its indexes'): none held.

        Raises:
            StoreError: a list failed.
        """
        namespace, name = str(job.metadata["namespace"]), str(job.metadata["name"])
        uid = str(job.metadata.get("uid", ""))
        selector = f"{names.LABEL_JOB}={name}"
        pods = [
            p
            for p in self._ctx.pods.list(namespace, selector)
            if owned_by(p, uid)
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        leases = self._ctx.store.list_leases(namespace, label_selector=selector)
        held = [lease.name for lease in leases if lease.record.holder_identity is not None]
        if pods or held:
            log.info(
                "%s/%s: the Workload waits: %d pod(s) left, lease(s) held: %s",
                namespace,
                name,
                len(pods),
                ", ".join(held) or "none",
            )
            return False
        return True

    def _retire(self, job: LeasedJob, queued: Queued, workload: Body) -> float | None:
        """Delete a Workload that must go (its UID as precondition); look again at once."""
        namespace, meta = str(job.metadata["namespace"]), workload["metadata"]
        self._workloads.delete(namespace, meta["name"], str(meta.get("uid", "")))
        reason = queued.gate.reason
        message = f"{queued.gate.message} Deleted: nothing of the job runs."
        log.info("%s/%s: %s", namespace, job.metadata["name"], message)
        self._ctx.events.record(_body(job), "Normal", reason, message)
        return 0.0


def _pending(queue: str, wl_name: str) -> Gate:
    """The closed gate while the job's Workload is being made or updated (on a fresh read)."""
    message = (
        f"Waiting for admission in LocalQueue {queue} (Workload {wl_name} is being made or"
        " updated): no attempt starts until Kueue admits it."
    )
    return Gate(State.WAITING, wl_name, queue, queueing.WAITING, message)


def _replacing(workload: Body, queue: str, stale: str) -> Gate:
    """The closed gate while an admitted Workload that no longer matches the job goes."""
    name = workload["metadata"]["name"]
    message = (
        f"Workload {name} no longer matches the job ({stale}): the running attempts are"
        " suspended (fenced), then it is deleted and a new one queues in LocalQueue"
        f" {queue}."
    )
    return Gate(State.WAITING, name, queue, queueing.WORKLOAD_REPLACED, message)


def _ending(status: LeasedJobStatus) -> str:
    """The job's ending in a few words, from its ``Complete``/``Failed`` condition."""
    for condition in status.conditions or []:
        if condition.type in ("Complete", "Failed") and condition.status == "True":
            return condition.message or str(condition.reason)
    return f"job {str(status.phase).lower()}"


def _body(job: LeasedJob) -> dict[str, Any]:
    """The job's body for an Event (its kind and metadata)."""
    return {"apiVersion": job.api_version, "kind": "LeasedJob", "metadata": job.metadata}
