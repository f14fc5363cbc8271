"""Pull mode as a work queue, on a real control plane: params and priority.

The operator copies a pull-mode job's ``spec.params`` and ``spec.priority``
to its JobLease; a pool's ``claim_any`` takes the highest priority first
(ties: the oldest job) and hands the claimer the params.
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from leasehold.lease.api import LeaseMode
from leasehold.lease.store import LeaseStore, WorkItem
from leasehold.worker import pull
from operatorproc import OperatorProcess
from tests.integration.jobs import condition, create_job, patch_spec, status, wait_for


@pytest.fixture
def store(api_client: client.ApiClient) -> LeaseStore:
    return LeaseStore(api_client)


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
