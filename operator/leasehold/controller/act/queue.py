"""The queue actor: a queued LeasedJob's Workload, made, read and told how the job went.

Why this module exists: the decisions are pure
(:mod:`leasehold.controller.plan.queueing`); this actor makes the calls they
need around one reconcile of a queued job. Before the plan: find Kueue (once;
a cluster without it is told on the job), create the job's Workload if it
has none, read it and, once admitted, its flavors, and answer the gate.
After the plan: once an evicted job holds no lease and runs no pod, unset
the Workload's quota reservation (so Kueue requeues it); once the job ended,
mark the Workload ``Finished``. A job that is not queued costs no call.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final

from leasehold.controller.act.context import Context
from leasehold.controller.kube.objects import Body, Refused
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


@dataclass(frozen=True)
class Told:
    """How a plan's status and Events are told for a job under a gate (or none).

    Attributes:
        gate: the job's gate; ``None`` for a job that is not queued.
        spec_suspend: the stored ``spec.suspend`` (then its own words stand).
    """

    gate: Gate | None
    spec_suspend: bool

    def status(self, status: LeasedJobStatus, now: datetime, generation: Any) -> LeasedJobStatus:
        """``status`` in the queue's words (:func:`~leasehold.controller.plan.queueing.restate`)."""
        gen = int(generation) if generation is not None else None
        return queueing.restate(
            status, self.gate, spec_suspend=self.spec_suspend, now=now, generation=gen
        )

    def events(self, events: list[JobEvent]) -> list[JobEvent]:
        """``events`` in the queue's words (:func:`.queueing.restate_events`)."""
        return queueing.restate_events(events, self.gate, spec_suspend=self.spec_suspend)

    def plan(self, plan: Plan, now: datetime, generation: Any) -> Plan:
        """``plan`` with its status and Events in the queue's words."""
        if self.gate is None:
            return plan
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
    """

    gate: Gate
    workload: Body | None


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

    def gate(self, job: LeasedJob) -> Queued | None:
        """The gate of a job, creating its Workload first if it has none.

        Args:
            job: the LeasedJob as read (validated).

        Returns:
            ``None`` for a job that is not queued, or a finished one that
            never had a Workload; else its :class:`Queued`.

        Raises:
            StoreError: a call failed (transient ones as TransientStoreError).
        """
        queue = queueing.queue_name(job)
        if queue is None:
            return None
        namespace, name = str(job.metadata["namespace"]), str(job.metadata["name"])
        wl_name = queueing.workload_name(name, str(job.metadata.get("uid", "")))
        if not self._kueue_served():
            message = (
                f"Queued in LocalQueue {queue} (label {queueing.QUEUE_LABEL}), but the cluster"
                f" serves no workloads.{queueing.GROUP}/{queueing.VERSION}: install Kueue"
                " (README, 'Queue with Kueue') or remove the label. No attempt starts meanwhile."
            )
            gate = queueing.unavailable(queue, wl_name, queueing.KUEUE_MISSING, message)
            return Queued(gate, None)
        if job.spec.template is None:
            message = (
                f"Queued in LocalQueue {queue}, but a LeasedJob without spec.template (pull"
                " mode) has no pod set for Kueue to admit: remove the label. No attempt starts."
            )
            return Queued(
                queueing.unavailable(queue, wl_name, queueing.QUEUE_UNSUPPORTED, message), None
            )
        workload = self._workloads.get(namespace, wl_name)
        if workload is None:
            if (job.status and job.status.phase) in (Phase.SUCCEEDED, Phase.FAILED):
                return (
                    None  # over before it was queued (or its Workload was deleted): nothing to ask
                )
            workload = self._create(job, queue)
        elif not queueing.is_true(workload, "Finished"):
            synced = self._sync(job, queue, workload)
            if isinstance(synced, Gate):
                return Queued(synced, None)
            workload = synced
        info = None
        if queueing.is_true(workload, "Admitted"):
            found = [self._workloads.flavor(f) for f in queueing.admitted_flavors(workload)]
            info = queueing.pod_set_info([f for f in found if f is not None])
        return Queued(queueing.decide(workload, queue, info), workload)

    def _sync(self, job: LeasedJob, queue: str, workload: Body) -> Body | Gate:
        """Bring the Workload in line with the job (queue, pod count), as jobframework does.

        Pending (no quota reserved): its spec is updated. Quota reserved:
        it is deleted (a new one is made at the next reconcile) and the gate
        closes meanwhile, so the running attempts end fenced before more pods,
        or pods in another queue, can run.

        Returns:
            The Workload to decide on, or the closed gate while it is replaced.

        Raises:
            StoreError: a call failed (a conflict as TransientStoreError: look again).
        """
        stale = queueing.out_of_sync(workload, job, queue)
        if stale is None:
            return workload
        namespace = str(job.metadata["namespace"])
        meta = workload["metadata"]
        if queueing.is_true(workload, "QuotaReserved"):
            self._workloads.delete(namespace, meta["name"], str(meta.get("uid", "")))
            message = (
                f"Workload {meta['name']} no longer matches the job ({stale}): deleted, a new"
                f" one will queue in LocalQueue {queue}; the running attempts are suspended"
                " (fenced) until it is admitted."
            )
            log.info("%s/%s: %s", namespace, job.metadata["name"], message)
            self._ctx.events.record(_body(job), "Normal", "WorkloadReplaced", message)
            return Gate(State.WAITING, meta["name"], queue, queueing.WAITING, message)
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

    def after(self, job: LeasedJob, queued: Queued, status: LeasedJobStatus) -> float | None:
        """Tell the Workload how the job went: finished, or stopped after an eviction.

        Args:
            job: the LeasedJob as read.
            queued: its gate and Workload, from :meth:`gate`.
            status: the job's status as written.

        Returns:
            Seconds after which to reconcile again (a write lost a race), or ``None``.

        Raises:
            StoreError: a write failed otherwise.
        """
        workload = queued.workload
        if workload is None:
            return None
        namespace, name = str(job.metadata["namespace"]), str(job.metadata["name"])
        meta = workload["metadata"]
        now = self._ctx.now()
        if status.phase in (Phase.SUCCEEDED, Phase.FAILED):
            if queued.gate.state is State.FINISHED:
                return None
            succeeded = status.phase == Phase.SUCCEEDED
            new = queueing.finished_status(workload, succeeded, _ending(status), now)
            what = "finished"
        elif queueing.quota_to_release(workload, status):
            new = queueing.released_status(workload, now)
            what = "given its quota back (the evicted job holds no lease and runs no pod)"
        else:
            return None
        written = self._workloads.write_status(
            namespace, meta["name"], meta["resourceVersion"], new
        )
        if isinstance(written, Refused):
            return RETRY_SECONDS if written is Refused.CONFLICT else None
        log.info("%s/%s: Workload %s %s", namespace, name, meta["name"], what)
        if what == "finished":
            self._ctx.events.record(
                _body(job),
                "Normal",
                "FinishedWorkload",
                f"Workload {meta['name']} is declared finished ({_ending(status)}).",
            )
        return None


def _ending(status: LeasedJobStatus) -> str:
    """The job's ending in a few words, from its ``Complete``/``Failed`` condition."""
    for condition in status.conditions or []:
        if condition.type in ("Complete", "Failed") and condition.status == "True":
            return condition.message or str(condition.reason)
    return f"job {str(status.phase).lower()}"


def _body(job: LeasedJob) -> dict[str, Any]:
    """The job's body for an Event (its kind and metadata)."""
    return {"apiVersion": job.api_version, "kind": "LeasedJob", "metadata": job.metadata}
