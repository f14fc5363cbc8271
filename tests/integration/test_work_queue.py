"""Work queues on a real control plane: pull-mode params and priority, and batch/v1's form.

The operator copies a pull-mode job's ``spec.params`` and ``spec.priority``
to its JobLease; a pool's ``claim_any`` takes the highest priority first
(ties: the oldest job) and hands the claimer the params.

batch/v1's work queue (``completions`` unset, ``parallelism`` above 1; the
tests are named after the job controller's behaviour, pkg/controller/job/
job_controller.go, and test/integration/job's ``TestParallelJob``): each
worker slot is a JobLease of its own (``<job>.<slot>``); the first success
ends the job once no slot is held; no pod starts after it, and a slot not
held then is stopped at the store, so a pool's claim on it is refused. Pods
run as local processes (the pod runner).
"""

from __future__ import annotations

import shlex
import time
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from leasehold import names
from leasehold.lease.api import LeaseMode
from leasehold.lease.indexes import index_lease_name
from leasehold.lease.protocol import Outcome, Rejection
from leasehold.lease.store import Accepted, LeaseStore, Rejected, WorkItem
from leasehold.worker import pull
from operatorproc import OperatorProcess
from podrunner import PodRunner
from tests.integration.jobs import (
    condition,
    condition_true,
    create_job,
    events,
    patch_spec,
    phase_is,
    status,
    transition_time,
    wait_for,
)

SLOT_0_FIRST = "leasehold run -- sh -c " + shlex.quote(
    'if [ "$JOB_COMPLETION_INDEX" != 0 ]; then sleep 10; fi; exit 0'
)
"""Slot 0 succeeds at once, the other slots 10 s later (while the job waits for them)."""

SLOT_0_SUCCEEDS_SLOT_1_FAILS = "leasehold run -- sh -c " + shlex.quote(
    'if [ "$JOB_COMPLETION_INDEX" != 0 ]; then sleep 10; exit 1; fi; exit 0'
)
"""Slot 0 succeeds at once; slot 1 fails 10 s later, after the job's first success."""


def test_claim_any_takes_the_highest_priority_first_and_hands_over_the_params(
    operator: OperatorProcess, api_client: client.ApiClient, store: LeaseStore, namespace: str
) -> None:
    create_job(api_client, namespace, "first-low", None, lease_seconds=60, params={"n": 1})
    time.sleep(1.1)  # creation timestamps have one-second resolution
    create_job(
        api_client,
        namespace,
        "urgent",
        None,
        lease_seconds=60,
        priority=10,
        params={"n": 2, "items": [{"id": "a"}, {"id": "b"}], "deep": {"x": None}},
    )
    create_job(api_client, namespace, "later-low", None, lease_seconds=60)
    # A push-mode lease is never a pool's, whatever its priority.
    store.create(
        namespace,
        "pushed",
        job_name="pushed",
        lease_duration_seconds=60,
        mode=LeaseMode.PUSH,
        work=WorkItem(priority=1000),
    )
    wait_for("3 leases", lambda: len(store.list_leases(namespace)) == 4)
    holders = []
    for i in range(3):
        holder = pull.claim_any(namespace, f"pool-{i}", store=store)
        assert holder is not None
        holders.append(holder)
    assert pull.claim_any(namespace, "pool-3", store=store) is None  # the push lease is not
    claimed = [(h.lease_name, h.params) for h in holders]
    for holder in holders:
        holder.release()
    assert claimed == [
        ("urgent", {"n": 2, "items": [{"id": "a"}, {"id": "b"}], "deep": {"x": None}}),
        ("first-low", {"n": 1}),
        ("later-low", None),
    ]
    # The first claim goes to the highest again (released, not completed).
    again = pull.claim_any(namespace, "pool-x", store=store)
    assert again is not None and again.lease_name == "urgent" and again.params is not None
    again.release()
    assert store.get(namespace, "pushed").record.holder_identity is None


def test_params_and_priority_are_validated_and_immutable(
    operator: OperatorProcess, api_client: client.ApiClient, namespace: str
) -> None:
    for spec, field in (
        ({"priority": 1_000_001}, "spec.priority"),
        ({"params": {f"k{i}": i for i in range(257)}}, "spec.params"),
        ({"params": "not an object"}, "spec.params"),
    ):
        with pytest.raises(ApiException) as refused:
            create_job(api_client, namespace, "bad", None, **spec)
        assert refused.value.status == 422, spec
        assert field in str(refused.value.body), refused.value.body
    create_job(api_client, namespace, "fixed", None, params={"a": 1}, priority=3)
    for change, message in (
        ({"params": {"a": 2}}, "spec.params is immutable"),
        ({"priority": 4}, "spec.priority is immutable"),
    ):
        with pytest.raises(ApiException) as refused:
            patch_spec(api_client, namespace, "fixed", change)
        assert refused.value.status == 422 and message in str(refused.value.body)
    # Too large for the lease: the operator reports it and creates no lease.
    create_job(api_client, namespace, "huge", None, params={"blob": "x" * 40_000})
    wait_for("InvalidSpec", lambda: status(api_client, namespace, "huge").get("conditions"))
    ready = condition(status(api_client, namespace, "huge"), "Ready")
    assert ready["reason"] == "InvalidSpec" and "spec.params is" in ready["message"]


def _slot_leases(store: LeaseStore, namespace: str, name: str) -> dict[str, Any]:
    selector = f"{names.LABEL_JOB}={name}"
    return {
        lease.name: lease.record for lease in store.list_leases(namespace, label_selector=selector)
    }


def _pods(api: client.ApiClient, namespace: str, name: str) -> list[str]:
    found: Any = client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=f"{names.LABEL_JOB}={name}"
    )
    return sorted(p.metadata.name for p in found.items)


def test_work_queue_job_completes_when_one_pod_succeeds_and_the_others_finish(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    create_job(api_client, namespace, "wq", SLOT_0_FIRST, lease_seconds=30, parallelism=3)
    wait_for("the first success", lambda: status(api_client, namespace, "wq").get("succeeded"), 60)
    st = status(api_client, namespace, "wq")
    # batch/v1: complete = succeeded > 0 && active == 0; the running slots run on.
    assert (st["succeeded"], st["active"], st["phase"]) == (1, 2, "Running"), st
    assert not condition_true(api_client, namespace, "wq", "SuccessCriteriaMet")
    wait_for("Succeeded", phase_is(api_client, namespace, "wq", "Succeeded"), 60)
    st = status(api_client, namespace, "wq")
    met, complete = condition(st, "SuccessCriteriaMet"), condition(st, "Complete")
    assert (met["status"], met["reason"]) == ("True", "Completed")
    assert (complete["status"], complete["reason"]) == ("True", "Completed")
    assert transition_time(met) <= transition_time(complete)
    assert met["observedGeneration"] == complete["observedGeneration"] == 1
    assert (st["succeeded"], st["active"], st.get("failed", 0)) == (3, 0, 0), st
    assert "completionProgress" not in st and "leaseName" not in st
    leases = _slot_leases(store, namespace, "wq")
    assert sorted(leases) == [index_lease_name("wq", i) for i in range(3)]
    for record in leases.values():  # each slot its own fencing domain, one attempt each
        assert record.completion is not None and record.completion.outcome == Outcome.SUCCEEDED
        assert record.fencing_token == 1
    assert _pods(api_client, namespace, "wq") == [f"wq-{i}-1" for i in range(3)]


def test_work_queue_no_new_pod_after_the_first_success(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    create_job(
        api_client,
        namespace,
        "wq-once",
        SLOT_0_SUCCEEDS_SLOT_1_FAILS,
        lease_seconds=30,
        parallelism=2,
        backoffLimit=3,
    )
    wait_for(
        "the first success", lambda: status(api_client, namespace, "wq-once").get("succeeded"), 60
    )
    patch_spec(api_client, namespace, "wq-once", {"parallelism": 4})  # more slots: none starts
    wait_for("Succeeded", phase_is(api_client, namespace, "wq-once", "Succeeded"), 60)
    st = status(api_client, namespace, "wq-once")
    # batch/v1 counts the later failure (within backoffLimit) and retries nothing.
    assert (st["succeeded"], st["active"], st["failed"]) == (1, 0, 1), st
    assert condition(st, "Complete")["reason"] == "Completed"
    leases = _slot_leases(store, namespace, "wq-once")
    assert sorted(leases) == [index_lease_name("wq-once", i) for i in range(2)]
    failed = leases[index_lease_name("wq-once", 1)]
    assert failed.completion is not None and failed.completion.outcome == Outcome.FAILED
    assert failed.fencing_token == 1  # never reopened, never claimed again
    assert _pods(api_client, namespace, "wq-once") == ["wq-once-0-1", "wq-once-1-1"]


def test_work_queue_slot_not_held_at_the_first_success_is_stopped_and_refuses_a_claim(
    operator: OperatorProcess,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    """Pull mode: a pool could claim any open slot; after the first success none may land."""
    create_job(api_client, namespace, "wq-pull", None, lease_seconds=300, parallelism=3)
    wait_for("3 slot leases", lambda: len(_slot_leases(store, namespace, "wq-pull")) == 3, 30)
    first, other, idle = (index_lease_name("wq-pull", i) for i in range(3))
    for name, holder in ((first, "pool-0"), (other, "pool-1")):
        assert isinstance(store.claim(namespace, name, holder), Accepted)
    done = store.complete(namespace, first, "pool-0", 1, Outcome.SUCCEEDED)
    assert isinstance(done, Accepted)

    def idle_stopped() -> bool:
        record = store.get(namespace, idle).record
        return record.max_fencing_token == record.fencing_token == 0

    wait_for("the idle slot's lease stopped", idle_stopped, 30)
    refused = store.claim(namespace, idle, "pool-2")
    assert isinstance(refused, Rejected) and refused.rejection == Rejection.EXHAUSTED
    told = wait_for(
        "the SlotsStopped Event",
        lambda: [m for r, m in events(api_client, namespace, "wq-pull") if r == "SlotsStopped"],
        10,
    )
    assert "stopping the slot leases not held (2)" in told[0], told
    # The slot held at the first success runs on: not stopped, and the job waits for it.
    wait_for("succeeded 1", lambda: status(api_client, namespace, "wq-pull").get("succeeded"), 10)
    st = status(api_client, namespace, "wq-pull")
    assert (st["succeeded"], st["active"], st["phase"]) == (1, 1, "Running"), st
    assert not condition_true(api_client, namespace, "wq-pull", "SuccessCriteriaMet")
    assert isinstance(store.renew(namespace, other, "pool-1", 1), Accepted)
    assert isinstance(store.complete(namespace, other, "pool-1", 1, Outcome.SUCCEEDED), Accepted)
    wait_for("Succeeded", phase_is(api_client, namespace, "wq-pull", "Succeeded"), 30)
    st = status(api_client, namespace, "wq-pull")
    assert (st["succeeded"], st["active"]) == (2, 0), st
    assert condition(st, "SuccessCriteriaMet")["reason"] == "Completed"


def test_work_queue_parallelism_may_change_but_not_the_form(
    operator: OperatorProcess,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    create_job(api_client, namespace, "wq-grow", None, lease_seconds=300, parallelism=2)
    wait_for("2 slot leases", lambda: len(_slot_leases(store, namespace, "wq-grow")) == 2, 30)
    patch_spec(api_client, namespace, "wq-grow", {"parallelism": 3})  # a slot more
    wait_for("3 slot leases", lambda: len(_slot_leases(store, namespace, "wq-grow")) == 3, 30)
    create_job(api_client, namespace, "one", None, lease_seconds=300)  # parallelism 1: one lease
    wait_for("the single lease", lambda: status(api_client, namespace, "one").get("leaseName"), 30)
    assert status(api_client, namespace, "one")["leaseName"] == "one"
    assert store.get(namespace, "one").record.fencing_token == 0
    for name, parallelism in (("wq-grow", 1), ("one", 2)):
        with pytest.raises(ApiException) as refused:
            patch_spec(api_client, namespace, name, {"parallelism": parallelism})
        assert refused.value.status == 422
        assert "spec.parallelism: a job without spec.completions keeps its form" in str(
            refused.value.body
        )
