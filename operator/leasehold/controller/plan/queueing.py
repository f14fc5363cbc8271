"""The queue gate: when a LeasedJob queued by Kueue may run, and the Workload it asks with.

Why this module exists: a LeasedJob labelled ``kueue.x-k8s.io/queue-name`` is
*queued*. It runs only while its Kueue ``Workload`` (``kueue.x-k8s.io/v1beta2``,
the version Kueue v0.17 stores) is admitted; the operator enforces that itself
(the gate holds even if no webhook ever sets ``spec.suspend``). A closed gate
is a suspension: the planners (:mod:`leasehold.controller.plan.single`,
:mod:`leasehold.controller.plan.indexed`) see the job as ``spec.suspend: true``
(:func:`effective_job`), so a preemption ends the running attempt with the
same fenced write a suspend does (lease released, pods deleted, the old token
refused), and a re-admission resumes it under a higher token.

This follows the contract Kueue's own job integrations keep
(``pkg/controller/jobframework/reconciler.go``, ``ReconcileGenericJob``):
the job owns one Workload named as ``GetWorkloadNameForOwnerWithGVK`` names
it; the job starts when the Workload is admitted, with the admitted flavors'
node labels and tolerations (``PodSetInfo``) merged into its pods; it stops
when the Workload is ``Evicted``, and once nothing runs its quota reservation
is unset (``UnsetQuotaReservationWithCondition``) so Kueue can requeue it;
the Workload is marked ``Finished`` when the job ends.

Pure: plain dicts (the Workload and ResourceFlavors as the API serves them)
and pydantic models in, decisions and bodies out. No Kubernetes client or
Kopf import here; the calls are :mod:`leasehold.controller.act.queue`'s.
"""

from __future__ import annotations

import copy
import enum
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from leasehold import names
from leasehold.controller.plan import suspension
from leasehold.controller.plan.conditions import set_condition
from leasehold.controller.plan.single import JobEvent
from leasehold.lease.api import ConditionStatus, LeasedJob, LeasedJobStatus

GROUP: Final = "kueue.x-k8s.io"
"""Kueue's API group."""
VERSION: Final = "v1beta2"
"""The Workload API version Kueue v0.17 stores (and this operator writes)."""
API_VERSION: Final = f"{GROUP}/{VERSION}"
PLURAL_WORKLOADS: Final = "workloads"
PLURAL_RESOURCE_FLAVORS: Final = "resourceflavors"
PLURAL_PRIORITY_CLASSES: Final = "workloadpriorityclasses"
QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
"""The label that queues a job (Kueue's ``constants.QueueLabel``)."""
PRIORITY_LABEL: Final = "kueue.x-k8s.io/priority-class"
"""The label naming a WorkloadPriorityClass (Kueue's ``constants.WorkloadPriorityClassLabel``)."""
JOB_UID_LABEL: Final = "kueue.x-k8s.io/job-uid"
"""The Workload's label with its owner's UID, as ``ConstructWorkload`` sets it."""
POD_SET: Final = "main"
"""The one pod set's name (Kueue's ``DefaultPodSetName``)."""
WORKLOAD_NAME_MAX: Final = 253
HASH_LENGTH: Final = 5

WAITING: Final = "WaitingForAdmission"
"""``Suspended`` reason while the Workload is not admitted."""
EVICTED: Final = "Evicted"
"""``Suspended`` reason and Event while the Workload is evicted (not preempted)."""
PREEMPTED: Final = "Preempted"
"""``Suspended`` reason and Event while the Workload is evicted by preemption."""
ADMITTED: Final = "Admitted"
"""``Suspended`` False reason and Event once admitted."""
KUEUE_MISSING: Final = "KueueNotInstalled"
"""``Suspended`` reason while the cluster serves no ``workloads.kueue.x-k8s.io``."""
QUEUE_UNSUPPORTED: Final = "QueueNotSupported"
"""``Suspended`` reason of a queued job in pull mode (no pod template: no pod set)."""
EVICTED_BY_PREEMPTION: Final = "Preempted"
"""Kueue's ``Evicted`` reason for a preemption (``WorkloadEvictedByPreemption``)."""
FINISHED_SUCCEEDED: Final = "Succeeded"
FINISHED_FAILED: Final = "Failed"
UNSET_RESERVATION_REASON: Final = "Pending"
"""The ``QuotaReserved=False`` reason jobframework writes when it clears an evicted admission."""


class State(enum.StrEnum):
    """Where a queued job stands with its Workload."""

    ADMITTED = "Admitted"
    """``Admitted`` True and not evicted: the gate is open."""
    WAITING = "Waiting"
    """Not (yet, or no longer) admitted: the gate is closed."""
    EVICTED = "Evicted"
    """``Evicted`` True: the gate is closed and the running attempt must end."""
    FINISHED = "Finished"
    """``Finished`` True: the Workload is over; the gate stays as the job's phase says."""
    UNAVAILABLE = "Unavailable"
    """Kueue is not installed, or the job cannot be queued: closed, and told."""


@dataclass(frozen=True)
class PodSetInfo:
    """What an admission adds to each pod (Kueue's ``podset.PodSetInfo``, the parts used).

    Attributes:
        node_selector: the admitted flavors' ``nodeLabels``.
        tolerations: the admitted flavors' ``tolerations``.
    """

    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Gate:
    """The queue's decision for one queued job.

    Attributes:
        state: see :class:`State`.
        workload: the Workload's name.
        queue: the LocalQueue's name.
        reason: the ``Suspended`` reason while closed (or ``Admitted``).
        message: a sentence for people naming the Workload and the queue.
        cluster_queue: the admitting ClusterQueue, when admitted.
        flavors: the flavor names the admission assigned (``podSetAssignments``).
        info: what the admission adds to the pods.
    """

    state: State
    workload: str
    queue: str
    reason: str
    message: str
    cluster_queue: str | None = None
    flavors: tuple[str, ...] = ()
    info: PodSetInfo = field(default_factory=PodSetInfo)

    @property
    def open(self) -> bool:
        """Whether attempts may run (admitted; or the Workload finished with the job)."""
        return self.state in (State.ADMITTED, State.FINISHED)


def queue_name(job: LeasedJob) -> str | None:
    """The LocalQueue a job is queued in (its ``kueue.x-k8s.io/queue-name`` label), if any.

    Args:
        job: the LeasedJob.

    Returns:
        The name, or ``None`` for a job that is not queued (it runs as always).
    """
    labels = job.metadata.get("labels") or {}
    value = labels.get(QUEUE_LABEL)
    return str(value) if value else None


def workload_name(
    job_name: str, job_uid: str, *, kind: str = "LeasedJob", group: str = names.GROUP
) -> str:
    """The Workload's name, as Kueue's ``GetWorkloadNameForOwnerWithGVK`` gives it.

    ``leasedjob-<name>`` cut to leave room for ``-<hash>``, the hash being the
    first 5 hex digits of SHA-1 over kind, group, name and UID, one per line
    (``pkg/controller/jobframework/workload_names.go``, without the
    ``ShortWorkloadNames`` gate, off by default in v0.17).

    Args:
        job_name: the LeasedJob's name.
        job_uid: its ``metadata.uid``.
        kind: the owner's kind (another only to check against Kueue's own examples).
        group: the owner's API group.

    Returns:
        A DNS subdomain of at most 253 characters.
    """
    prefix = f"{kind.lower()}-{job_name}"[: WORKLOAD_NAME_MAX - 1 - HASH_LENGTH]
    digest = hashlib.sha1(
        "\n".join((kind, group, job_name, job_uid)).encode(), usedforsecurity=False
    ).hexdigest()
    return f"{prefix}-{digest[:HASH_LENGTH]}"


def pod_count(job: LeasedJob) -> int:
    """The pod set's count: the pods the job runs at once.

    As Kueue's batch/v1 Job integration (``PodSets``: ``parallelism``, at most
    ``completions``): a single job 1, an Indexed job ``min(parallelism,
    completions)``, a work queue ``parallelism``.

    Args:
        job: the LeasedJob.

    Returns:
        A count of at least 1.
    """
    parallelism = job.spec.parallelism or 1
    completions = job.spec.completions
    return max(1, min(parallelism, completions) if completions else parallelism)


@dataclass(frozen=True)
class Priority:
    """A Workload's priority, as jobframework's ``ExtractPriority`` finds it.

    Attributes:
        kind: ``WorkloadPriorityClass`` (the job's label) or ``PriorityClass``
            (the template's ``priorityClassName``).
        name: the class's name.
        value: its value.
    """

    kind: str
    name: str
    value: int


def priority_source(job: LeasedJob) -> tuple[str, str] | None:
    """Which priority class to read for a job's Workload: label first, then the template's.

    Args:
        job: the LeasedJob.

    Returns:
        ``("WorkloadPriorityClass", name)``, ``("PriorityClass", name)`` or ``None``.
    """
    labels = job.metadata.get("labels") or {}
    if labels.get(PRIORITY_LABEL):
        return "WorkloadPriorityClass", str(labels[PRIORITY_LABEL])
    template = job.spec.template
    name = (template.spec.get("priorityClassName") if template is not None else None) or ""
    return ("PriorityClass", str(name)) if name else None


def build_workload(job: LeasedJob, queue: str, priority: Priority | None) -> dict[str, Any]:
    """The Workload a queued job asks admission with (as jobframework's ``ConstructWorkload``).

    Args:
        job: the LeasedJob; it has ``spec.template`` and ``metadata.uid``.
        queue: the LocalQueue's name.
        priority: its priority, if a class was named and found.

    Returns:
        The body: owned by the job (``controller: true``, so it is deleted
        with the job), labelled with the job's UID, one pod set ``main``
        whose template is the job's (its containers' requests are what Kueue
        admits) and whose count is :func:`pod_count`.

    Raises:
        ValueError: the job has no pod template (pull mode).
    """
    if job.spec.template is None:
        raise ValueError("a LeasedJob without spec.template has no pod set to queue")
    name, uid = str(job.metadata["name"]), str(job.metadata["uid"])
    template: dict[str, Any] = {"spec": copy.deepcopy(job.spec.template.spec)}
    meta = job.spec.template.metadata
    if meta is not None and (meta.labels or meta.annotations):
        template["metadata"] = meta.model_dump(exclude_none=True)
    spec: dict[str, Any] = {
        "queueName": queue,
        "podSets": [{"name": POD_SET, "count": pod_count(job), "template": template}],
    }
    if priority is not None:
        group = GROUP if priority.kind == "WorkloadPriorityClass" else "scheduling.k8s.io"
        spec["priorityClassRef"] = {"group": group, "kind": priority.kind, "name": priority.name}
        spec["priority"] = priority.value
    return {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(name, uid),
            "labels": {JOB_UID_LABEL: uid, QUEUE_LABEL: queue},
            "ownerReferences": [
                {
                    "apiVersion": names.API_VERSION,
                    "kind": "LeasedJob",
                    "name": name,
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


def out_of_sync(workload: Mapping[str, Any], job: LeasedJob, queue: str) -> str | None:
    """What of the job its Workload no longer says: the queue, or the pod count.

    As jobframework's ``EquivalentToWorkload`` (pod counts) and its queue-name
    check: a job relabelled to another LocalQueue, or an elastic Indexed job
    whose ``parallelism`` changed, no longer matches the Workload it was
    admitted (or waits) with.

    Args:
        workload: the Workload as served.
        job: the LeasedJob.
        queue: its LocalQueue now.

    Returns:
        A sentence naming the difference, or ``None`` when it matches.
    """
    spec = workload.get("spec") or {}
    if spec.get("queueName") != queue:
        return f"the job's queue is now {queue} (the Workload's is {spec.get('queueName')})"
    counts = [int(p.get("count", 0)) for p in spec.get("podSets") or []]
    if counts != [pod_count(job)]:
        return f"the job runs {pod_count(job)} pods at once now (the Workload asks for {counts})"
    return None


def _condition(workload: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    conditions = (workload.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == type_), None)


def is_true(workload: Mapping[str, Any], type_: str) -> bool:
    """Whether the Workload's condition ``type_`` is ``True``.

    Args:
        workload: the Workload as served.
        type_: ``Admitted``, ``QuotaReserved``, ``Evicted``, ``Finished``, ...

    Returns:
        ``True`` when present and True.
    """
    found = _condition(workload, type_)
    return found is not None and found.get("status") == "True"


def admitted_flavors(workload: Mapping[str, Any]) -> tuple[str, ...]:
    """The flavor names of the Workload's admission (every resource of every pod set), sorted."""
    admission = (workload.get("status") or {}).get("admission") or {}
    found = {
        str(flavor)
        for assignment in admission.get("podSetAssignments") or []
        for flavor in (assignment.get("flavors") or {}).values()
    }
    return tuple(sorted(found))


def pod_set_info(flavors: Sequence[Mapping[str, Any]]) -> PodSetInfo:
    """What the admitted ResourceFlavors add to each pod (jobframework's ``PodSetInfo``).

    Args:
        flavors: the ResourceFlavors as served (``spec.nodeLabels``, ``spec.tolerations``).

    Returns:
        Their node labels merged (by name order) and their tolerations, each once.
    """
    selector: dict[str, str] = {}
    tolerations: list[dict[str, Any]] = []
    for flavor in sorted(flavors, key=lambda f: str((f.get("metadata") or {}).get("name"))):
        spec = flavor.get("spec") or {}
        selector.update({str(k): str(v) for k, v in (spec.get("nodeLabels") or {}).items()})
        for toleration in spec.get("tolerations") or []:
            if toleration not in tolerations:
                tolerations.append(dict(toleration))
    return PodSetInfo(selector, tolerations)


def decide(workload: Mapping[str, Any], queue: str, info: PodSetInfo | None = None) -> Gate:
    """The gate for a queued job from its Workload's status.

    Args:
        workload: the Workload as served.
        queue: the job's LocalQueue.
        info: what the admitted flavors add to pods (read by the caller once admitted).

    Returns:
        Finished, else Evicted (``Evicted`` True wins over a stale
        ``Admitted``: the attempt must end before quota is given back),
        else Admitted (``Admitted`` True), else Waiting.
    """
    name = str((workload.get("metadata") or {}).get("name", ""))
    admission = (workload.get("status") or {}).get("admission") or {}
    cluster_queue = admission.get("clusterQueue")
    flavors = admitted_flavors(workload)
    if is_true(workload, "Finished"):
        return Gate(State.FINISHED, name, queue, ADMITTED, f"Workload {name} is finished.")
    evicted = _condition(workload, "Evicted")
    if evicted is not None and evicted.get("status") == "True":
        preempted = evicted.get("reason") == EVICTED_BY_PREEMPTION
        why = str(evicted.get("message") or evicted.get("reason") or "")
        word = "preempted" if preempted else "evicted"
        message = (
            f"The job was {word} by Kueue (Workload {name}, LocalQueue {queue}): {why}. Its"
            " running attempt is ended as a suspend ends it: the lease released, so writes"
            " under its token are refused; it runs again under a higher token once re-admitted."
        )
        return Gate(State.EVICTED, name, queue, PREEMPTED if preempted else EVICTED, message)
    if is_true(workload, "Admitted"):
        where = f"ClusterQueue {cluster_queue}" if cluster_queue else "its ClusterQueue"
        flavor_text = f" (flavors {', '.join(flavors)})" if flavors else ""
        message = f"Admitted by Kueue in {where}{flavor_text}: Workload {name}, LocalQueue {queue}."
        return Gate(
            State.ADMITTED,
            name,
            queue,
            ADMITTED,
            message,
            cluster_queue,
            flavors,
            info or PodSetInfo(),
        )
    pending = _condition(workload, "QuotaReserved")
    why = f" ({pending.get('message')})" if pending is not None and pending.get("message") else ""
    message = (
        f"Waiting for admission in LocalQueue {queue} (Workload {name}){why}: no attempt"
        " starts, and its lease stays suspended, until Kueue admits it."
    )
    return Gate(State.WAITING, name, queue, WAITING, message)


def unavailable(queue: str, workload: str, reason: str, message: str) -> Gate:
    """A closed gate that cannot open by itself: Kueue absent, or the job cannot be queued.

    Args:
        queue: the job's LocalQueue.
        workload: the Workload's name (that would be).
        reason: :data:`KUEUE_MISSING` or :data:`QUEUE_UNSUPPORTED`.
        message: what is wrong and what to do.

    Returns:
        The gate.
    """
    return Gate(State.UNAVAILABLE, workload, queue, reason, message)


def effective_job(job: LeasedJob, gate: Gate | None) -> LeasedJob:
    """The job as the planners should see it under the queue's gate.

    A closed gate suspends it (``spec.suspend: true``, so the running attempt
    ends fenced and no attempt starts); an open one merges the admission's
    node selector and tolerations into the pod template, as jobframework's
    ``RunWithPodSetsInfo`` does to a Job's template. The stored job is
    unchanged: this view is only planned on and built from.

    Args:
        job: the LeasedJob as read.
        gate: its gate, or ``None`` for a job that is not queued.

    Returns:
        ``job`` itself when nothing changes, else a copy.
    """
    if gate is None:
        return job
    if not gate.open:
        return job.model_copy(update={"spec": job.spec.model_copy(update={"suspend": True})})
    info = gate.info
    if job.spec.template is None or (not info.node_selector and not info.tolerations):
        return job
    pod_spec = copy.deepcopy(job.spec.template.spec)
    pod_spec["nodeSelector"] = {**(pod_spec.get("nodeSelector") or {}), **info.node_selector}
    tolerations = list(pod_spec.get("tolerations") or [])
    pod_spec["tolerations"] = tolerations + [t for t in info.tolerations if t not in tolerations]
    if not pod_spec["tolerations"]:
        del pod_spec["tolerations"]
    template = job.spec.template.model_copy(update={"spec": pod_spec})
    return job.model_copy(update={"spec": job.spec.model_copy(update={"template": template})})


def restate(
    status: LeasedJobStatus,
    gate: Gate | None,
    *,
    spec_suspend: bool,
    now: datetime,
    generation: int | None,
) -> LeasedJobStatus:
    """The planned status told in the queue's words: why the job is suspended, or admitted.

    The planners say ``spec.suspend``; when the queue's gate is what
    suspends the job (``spec.suspend`` itself false), the ``Suspended``
    and ``Ready`` conditions name the Workload and the queue instead, and
    a ``Suspended`` condition turned False by an admission says so. The
    conditions' status (and so ``lastTransitionTime``) is the planner's.

    Args:
        status: the planned status.
        gate: the job's gate, or ``None`` (not queued: returned as is).
        spec_suspend: the stored ``spec.suspend`` (its own words then stand).
        now: the time to stamp a new condition with.
        generation: the job's ``metadata.generation``.

    Returns:
        The status to write.
    """
    if gate is None or spec_suspend:
        return status
    conditions = list(status.conditions or [])
    found = next((c for c in conditions if c.type == suspension.CONDITION), None)
    if found is None:
        return status
    if found.status == ConditionStatus.TRUE and not gate.open:
        conditions = set_condition(
            conditions,
            found.type,
            found.status,
            gate.reason,
            gate.message,
            now=now,
            generation=generation,
        )
        ready = next((c for c in conditions if c.type == "Ready"), None)
        if ready is not None and ready.status == ConditionStatus.FALSE:
            conditions = set_condition(
                conditions,
                "Ready",
                ready.status,
                gate.reason,
                gate.message,
                now=now,
                generation=generation,
            )
    elif found.status == ConditionStatus.FALSE and gate.state is State.ADMITTED:
        conditions = set_condition(
            conditions,
            found.type,
            found.status,
            ADMITTED,
            f"{gate.message} Its next attempt runs under a higher token.",
            now=now,
            generation=generation,
        )
    else:
        return status
    return status.model_copy(update={"conditions": conditions})


def restate_events(
    events: Sequence[JobEvent], gate: Gate | None, *, spec_suspend: bool
) -> list[JobEvent]:
    """The planned ``Suspended``/``Resumed`` Events told in the queue's words.

    Args:
        events: the planned Events.
        gate: the job's gate, or ``None``.
        spec_suspend: the stored ``spec.suspend`` (its own words then stand).

    Returns:
        The Events: ``Suspended`` becomes ``Preempted``/``Evicted`` (or
        ``KueueNotInstalled``, a Warning; or stays ``Suspended`` while
        waiting) with the gate's message; ``Resumed`` becomes ``Admitted``.
        Any other Event is kept as is.
    """
    if gate is None or spec_suspend:
        return list(events)
    told: list[JobEvent] = []
    for event in events:
        if event.reason == suspension.SUSPENDED and not gate.open:
            if gate.state is State.EVICTED:
                event = JobEvent("Normal", gate.reason, gate.message)
            elif gate.state is State.UNAVAILABLE:
                event = JobEvent("Warning", gate.reason, gate.message)
            else:
                event = JobEvent("Normal", suspension.SUSPENDED, gate.message)
        elif event.reason == suspension.RESUMED and gate.state is State.ADMITTED:
            event = JobEvent("Normal", ADMITTED, gate.message)
        told.append(event)
    return told


def quota_to_release(workload: Mapping[str, Any], status: LeasedJobStatus) -> bool:
    """Whether an evicted Workload's quota reservation should be unset now.

    As jobframework (step 6, "handle eviction"): once the job is stopped
    and no longer active. Here: the job's phase is ``Suspended``, no
    attempt holds a lease, and none of its pods is active or terminating.

    Args:
        workload: the Workload as served.
        status: the job's planned status.

    Returns:
        ``True`` when Evicted, the quota still reserved, and nothing runs.
    """
    if not is_true(workload, "Evicted") or not is_true(workload, "QuotaReserved"):
        return False
    return (
        status.phase == "Suspended"
        and status.holder_identity is None
        and not status.active
        and not status.terminating
    )


def released_status(workload: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """The Workload status with its quota unset (``UnsetQuotaReservationWithCondition``).

    ``QuotaReserved`` False (reason ``Pending``, the eviction's message),
    ``admission`` cleared, ``Admitted`` False (``NoReservation``), and
    ``Requeued`` set (True after a preemption, as ``SetRequeuedCondition``).

    Args:
        workload: the Workload as served (Evicted True).
        now: the time to stamp transitions with.

    Returns:
        The whole new ``status`` (for a write conditioned on the version read).
    """
    status = copy.deepcopy(dict(workload.get("status") or {}))
    evicted = _condition(workload, "Evicted") or {}
    generation = (workload.get("metadata") or {}).get("generation")
    message = str(evicted.get("message") or "evicted")
    requeued = (
        "True" if evicted.get("reason") in (EVICTED_BY_PREEMPTION, "NodeFailures") else "False"
    )
    updates = (
        ("QuotaReserved", "False", UNSET_RESERVATION_REASON, message),
        ("Admitted", "False", "NoReservation", "The workload has no reservation"),
        ("Requeued", requeued, str(evicted.get("reason") or EVICTED), message),
    )
    conditions = list(status.get("conditions") or [])
    for type_, value, reason, text in updates:
        conditions = _set_kueue_condition(conditions, type_, value, reason, text, now, generation)
    status["conditions"] = conditions
    status.pop("admission", None)
    return status


def finished_status(
    workload: Mapping[str, Any], succeeded: bool, message: str, now: datetime
) -> dict[str, Any]:
    """The Workload status with ``Finished`` True (jobframework's ``workload.Finish``).

    Args:
        workload: the Workload as served.
        succeeded: whether the job succeeded (reason ``Succeeded``, else ``Failed``).
        message: the job's ending, for people.
        now: the time to stamp the transition with.

    Returns:
        The whole new ``status``.
    """
    status = copy.deepcopy(dict(workload.get("status") or {}))
    reason = FINISHED_SUCCEEDED if succeeded else FINISHED_FAILED
    generation = (workload.get("metadata") or {}).get("generation")
    status["conditions"] = _set_kueue_condition(
        list(status.get("conditions") or []),
        "Finished",
        "True",
        reason,
        message or f"Job {reason.lower()}",
        now,
        generation,
    )
    return status


def _set_kueue_condition(
    conditions: list[dict[str, Any]],
    type_: str,
    value: str,
    reason: str,
    message: str,
    now: datetime,
    generation: Any,
) -> list[dict[str, Any]]:
    """A ``metav1.Condition`` set in a Workload's list (its time moves only when it flips)."""
    old = next((c for c in conditions if c.get("type") == type_), None)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    if old is not None and old.get("status") == value and old.get("lastTransitionTime"):
        stamp = str(old["lastTransitionTime"])
    new: dict[str, Any] = {
        "type": type_,
        "status": value,
        "reason": reason,
        "message": message[:32768],
        "lastTransitionTime": stamp,
    }
    if generation is not None:
        new["observedGeneration"] = generation
    return [c for c in conditions if c.get("type") != type_] + [new]
