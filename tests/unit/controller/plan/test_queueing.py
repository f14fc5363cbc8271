"""The queue gate (Kueue): from a Workload's status to a decision, and the Workload built."""

from __future__ import annotations

from typing import Any

from leasehold.controller.plan import queueing
from leasehold.controller.plan import single as reconcile
from leasehold.controller.plan.queueing import Gate, PodSetInfo, Priority, State
from leasehold.controller.plan.single import Action, JobEvent
from leasehold.lease.api import LeasedJob
from tests.unit.controller.plan.test_single import NOW, job, lease


def _queued(**spec: Any) -> LeasedJob:
    j = job(**spec)
    meta = {**j.metadata, "labels": {queueing.QUEUE_LABEL: "team-a"}}
    return j.model_copy(update={"metadata": meta})


def _workload(*conditions: tuple[str, str, str], admission: Any = None) -> dict[str, Any]:
    status: dict[str, Any] = {
        "conditions": [
            {"type": t, "status": s, "reason": r, "message": f"{t} {r}"} for t, s, r in conditions
        ]
    }
    if admission is not None:
        status["admission"] = admission
    return {"metadata": {"name": "wl", "generation": 1, "resourceVersion": "7"}, "status": status}


ADMISSION = {
    "clusterQueue": "cq",
    "podSetAssignments": [{"name": "main", "flavors": {"cpu": "spot", "memory": "spot"}}],
}
ADMITTED = (("QuotaReserved", "True", "QuotaReserved"), ("Admitted", "True", "Admitted"))
PREEMPTED = ("Evicted", "True", "Preempted")


def test_workload_name_is_kueues_get_workload_name_for_owner_with_gvk() -> None:
    # pkg/controller/jobframework/workload_names_test.go: "job-name-ef3a1" for batch/Job name/uid.
    assert queueing.workload_name("name", "uid", kind="Job", group="batch") == "job-name-ef3a1"
    name = queueing.workload_name("x" * 300, "u")
    assert len(name) == 253 and name.startswith("leasedjob-xxx")


def test_an_unlabelled_job_is_not_queued_and_planned_as_written() -> None:
    j = job()
    assert queueing.queue_name(j) is None
    assert queueing.effective_job(j, None) is j


def test_pod_count_is_parallelism_at_most_completions() -> None:
    assert queueing.pod_count(job()) == 1
    assert queueing.pod_count(job(completionMode="Indexed", completions=5, parallelism=2)) == 2
    assert queueing.pod_count(job(completionMode="Indexed", completions=2, parallelism=4)) == 2
    assert queueing.pod_count(job(parallelism=3)) == 3  # a work queue


def test_build_workload_owns_one_pod_set_from_the_template_and_the_priority() -> None:
    j = _queued(completionMode="Indexed", completions=4, parallelism=3)
    wl = queueing.build_workload(j, "team-a", Priority("WorkloadPriorityClass", "high", 1000))
    owner = wl["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("LeasedJob", "u-1", True)
    assert wl["metadata"]["name"] == queueing.workload_name("hello", "u-1")
    assert wl["metadata"]["labels"][queueing.JOB_UID_LABEL] == "u-1"
    assert wl["spec"]["queueName"] == "team-a"
    (pod_set,) = wl["spec"]["podSets"]
    assert (pod_set["name"], pod_set["count"]) == ("main", 3)
    assert pod_set["template"]["spec"]["containers"][0]["image"] == "busybox"
    assert wl["spec"]["priority"] == 1000
    assert wl["spec"]["priorityClassRef"] == {
        "group": "kueue.x-k8s.io",
        "kind": "WorkloadPriorityClass",
        "name": "high",
    }


def test_priority_source_label_first_then_the_templates_priority_class() -> None:
    assert queueing.priority_source(job()) is None
    j = _queued()
    meta = {**j.metadata, "labels": {queueing.PRIORITY_LABEL: "high"}}
    assert queueing.priority_source(j.model_copy(update={"metadata": meta})) == (
        "WorkloadPriorityClass",
        "high",
    )
    template = j.spec.template
    assert template is not None
    pod = template.model_copy(update={"spec": {**template.spec, "priorityClassName": "urgent"}})
    j2 = j.model_copy(update={"spec": j.spec.model_copy(update={"template": pod})})
    assert queueing.priority_source(j2) == ("PriorityClass", "urgent")


def test_a_workload_not_admitted_closes_the_gate_and_names_the_queue() -> None:
    gate = queueing.decide(_workload(("QuotaReserved", "False", "Pending")), "team-a")
    assert gate.state is State.WAITING and not gate.open
    assert "LocalQueue team-a" in gate.message and "Workload wl" in gate.message
    assert queueing.effective_job(_queued(), gate).spec.suspend is True


def test_an_admitted_workload_opens_the_gate_with_the_flavors_node_labels() -> None:
    flavors = [
        {"metadata": {"name": "spot"}, "spec": {"nodeLabels": {"pool": "spot"}, "tolerations": [
            {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]}},
    ]  # fmt: skip
    info = queueing.pod_set_info(flavors)
    wl = _workload(*ADMITTED, admission=ADMISSION)
    assert queueing.admitted_flavors(wl) == ("spot",)
    gate = queueing.decide(wl, "team-a", info)
    assert gate.open and gate.cluster_queue == "cq"
    view = queueing.effective_job(_queued(), gate)
    assert view.spec.suspend is False
    assert view.spec.template is not None
    assert view.spec.template.spec["nodeSelector"] == {"pool": "spot"}
    assert view.spec.template.spec["tolerations"][0]["key"] == "spot"
    stored = _queued()
    assert stored.spec.template is not None and "nodeSelector" not in stored.spec.template.spec


def test_evicted_wins_over_a_stale_admitted_and_says_preempted() -> None:
    gate = queueing.decide(_workload(*ADMITTED, PREEMPTED, admission=ADMISSION), "team-a")
    assert gate.state is State.EVICTED and gate.reason == queueing.PREEMPTED
    assert "preempted by Kueue" in gate.message


def test_a_preempted_running_job_is_suspended_fenced_by_the_planner() -> None:
    gate = queueing.decide(_workload(*ADMITTED, PREEMPTED, admission=ADMISSION), "team-a")
    view = queueing.effective_job(_queued(), gate)
    p = reconcile.plan(view, lease(2, "hello-2"), now=NOW, pod_created_for_holder=True)
    assert p.action is Action.SUSPEND and p.delete_pods_below_token == 3
    told = queueing.restate(p.status, gate, spec_suspend=False, now=NOW, generation=2)
    suspended = next(c for c in told.conditions or [] if c.type == "Suspended")
    assert (suspended.status, suspended.reason) == ("True", "Preempted")
    assert "Workload wl" in suspended.message
    events = queueing.restate_events(p.events, gate, spec_suspend=False)
    assert [e.reason for e in events] == ["Preempted"]


def test_readmission_resumes_and_is_told_admitted() -> None:
    waiting = queueing.decide(_workload(), "team-a")
    first = reconcile.plan(
        queueing.effective_job(_queued(), waiting),
        lease(2, suspended=True),
        now=NOW,
        pod_created_for_holder=False,
    )
    status = queueing.restate(first.status, waiting, spec_suspend=False, now=NOW, generation=2)
    admitted = queueing.decide(_workload(*ADMITTED, admission=ADMISSION), "team-a")
    j = _queued().model_copy(update={"status": status})
    p = reconcile.plan(
        queueing.effective_job(j, admitted),
        lease(2, suspended=True),
        now=NOW,
        pod_created_for_holder=False,
    )
    assert p.action is Action.RESUME
    events = queueing.restate_events(p.events, admitted, spec_suspend=False)
    assert [e.reason for e in events] == ["Admitted"]
    told = queueing.restate(p.status, admitted, spec_suspend=False, now=NOW, generation=2)
    cond = next(c for c in told.conditions or [] if c.type == "Suspended")
    assert (cond.status, cond.reason) == ("False", "Admitted")


def test_spec_suspend_keeps_its_own_words_under_a_closed_gate() -> None:
    gate = queueing.decide(_workload(), "team-a")
    event = JobEvent("Normal", "Suspended", "spec.suspend")
    assert queueing.restate_events([event], gate, spec_suspend=True) == [event]


def test_kueue_absent_is_a_warning_naming_the_fix() -> None:
    gate = queueing.unavailable("team-a", "wl", queueing.KUEUE_MISSING, "install Kueue")
    assert not gate.open
    (event,) = queueing.restate_events(
        [JobEvent("Normal", "Suspended", "x")], gate, spec_suspend=False
    )
    assert (event.type, event.reason) == ("Warning", "KueueNotInstalled")


def test_quota_is_given_back_only_once_nothing_runs() -> None:
    wl = _workload(*ADMITTED, PREEMPTED, admission=ADMISSION)
    gate = queueing.decide(wl, "team-a")
    view = queueing.effective_job(_queued(), gate)
    running = reconcile.plan(view, lease(2, "hello-2"), now=NOW, pod_created_for_holder=True)
    still = running.status.model_copy(update={"active": 1})
    assert not queueing.quota_to_release(wl, still)  # its pod still runs
    done = reconcile.plan(
        view, lease(2, suspended=True), now=NOW, pod_created_for_holder=False
    ).status.model_copy(update={"active": 0, "terminating": 0})
    assert queueing.quota_to_release(wl, done)
    released = queueing.released_status(wl, NOW)
    by_type = {c["type"]: c for c in released["conditions"]}
    assert (by_type["QuotaReserved"]["status"], by_type["QuotaReserved"]["reason"]) == (
        "False",
        "Pending",
    )
    assert by_type["Admitted"]["status"] == "False"
    assert by_type["Requeued"]["status"] == "True"
    assert "admission" not in released
    assert not queueing.quota_to_release({**wl, "status": released}, done)


def test_finished_status_says_succeeded_or_failed() -> None:
    wl = _workload(*ADMITTED, admission=ADMISSION)
    for ok, reason in ((True, "Succeeded"), (False, "Failed")):
        st = queueing.finished_status(wl, ok, "done", NOW)
        finished = next(c for c in st["conditions"] if c["type"] == "Finished")
        assert (finished["status"], finished["reason"]) == ("True", reason)
    assert queueing.decide({**wl, "status": st}, "q").state is State.FINISHED


def test_gate_open_only_when_admitted_or_finished() -> None:
    for state, is_open in ((State.ADMITTED, True), (State.FINISHED, True), (State.WAITING, False),
                           (State.EVICTED, False), (State.UNAVAILABLE, False)):  # fmt: skip
        assert Gate(state, "wl", "q", "r", "m", info=PodSetInfo()).open is is_open


def test_a_workload_out_of_sync_names_the_queue_or_the_pod_count() -> None:
    j = _queued(completionMode="Indexed", completions=4, parallelism=2)
    wl = queueing.build_workload(j, "team-a", None)
    assert queueing.out_of_sync(wl, j, "team-a") is None
    assert "queue is now team-b" in (queueing.out_of_sync(wl, j, "team-b") or "")
    scaled = j.model_copy(update={"spec": j.spec.model_copy(update={"parallelism": 3})})
    assert "3 pods at once" in (queueing.out_of_sync(wl, scaled, "team-a") or "")
