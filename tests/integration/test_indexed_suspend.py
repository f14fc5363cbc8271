"""Indexed LeasedJobs on a real control plane: suspend, params and priority per index.

Each test runs its own operator; pods run as local processes (the pod
runner) whose ``leasehold run`` wrappers renew against the real API server.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from leasehold import names, worker
from leasehold.lease.errors import LeaseNotFoundError
from leasehold.lease.indexes import index_lease_name
from leasehold.lease.protocol import Outcome
from leasehold.lease.store import Accepted, LeaseStore, Rejected
from operatorproc import OperatorProcess
from podrunner import PodRunner
from tests.integration.jobs import (
    condition,
    create_job,
    end_reason,
    events,
    patch_spec,
    phase_is,
    pod_gone_or_going,
    status,
    wait_for,
)
from tests.integration.test_failure_policy import evict


def sh(script: str) -> str:
    return f"leasehold run -- sh -c '{script}'"


FIRST_TOKEN_HANGS = sh(
    '[ "$LEASEHOLD_FENCING_TOKEN" = 1 ] && [ "$JOB_COMPLETION_INDEX" != 2 ] && sleep 120; exit 0'
)
"""A worker that hangs under token 1 (but index 2's) and succeeds under any later token."""


def test_suspending_an_indexed_job_suspends_every_index_and_resume_runs_them_on(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    create_job(
        api_client,
        namespace,
        "sus",
        FIRST_TOKEN_HANGS,
        lease_seconds=10,
        max_attempts=1,  # a suspension uses no budget: token 2 is still allowed
        completions=3,
        parallelism=2,
        completionMode="Indexed",
    )

    def both_bound() -> bool:
        records = [store.get(namespace, f"sus.{i}").record for i in (0, 1)]
        return all(r.holder_uid is not None for r in records)

    wait_for("indexes 0 and 1 held by their pods", lambda: _try(both_bound), 60)
    for index in (0, 1):
        local_pod_runner.wait_for_pid(namespace, f"sus-{index}-1", timeout=30)
    patch_spec(api_client, namespace, "sus", {"suspend": True})
    wait_for("Suspended", phase_is(api_client, namespace, "sus", "Suspended"), 30)
    for index in (0, 1):
        # The phase shows Suspended at once; each index's suspend write follows
        # in its own step of the reconcile (status `active` counts it till then).
        wait_for(
            f"index {index}'s lease suspended",
            functools.partial(_lease_suspended, store, namespace, f"sus.{index}"),
            30,
        )
        record = store.get(namespace, f"sus.{index}").record
        assert record.suspended and record.holder_identity is None
        assert (record.fencing_token, record.suspensions, record.max_fencing_token) == (1, 1, 2)
        gone = functools.partial(pod_gone_or_going, api_client, namespace, f"sus-{index}-1")
        wait_for(f"pod sus-{index}-1 deleted", gone, 30)
        # The suspended attempt is fenced: its late completion is refused.
        late = store.complete(namespace, f"sus.{index}", f"sus-{index}-1", 1, Outcome.SUCCEEDED)
        assert isinstance(late, Rejected)
    # `active` drops to 0 in the status write of the reconcile after the last
    # index's suspend write (the suspend writes' own watch events bring it).
    wait_for("no index active", lambda: status(api_client, namespace, "sus").get("active") == 0, 30)
    st = status(api_client, namespace, "sus")
    assert (condition(st, "Suspended")["status"], condition(st, "Suspended")["reason"]) == (
        "True",
        "JobSuspended",
    )
    selector = f"{names.LABEL_JOB}=sus"
    time.sleep(2.0)  # nothing starts while suspended: no claim, no new index
    assert sorted(le.name for le in store.list_leases(namespace, label_selector=selector)) == [
        "sus.0",
        "sus.1",
    ]
    assert all(
        le.record.fencing_token == 1 for le in store.list_leases(namespace, label_selector=selector)
    )
    patch_spec(api_client, namespace, "sus", {"suspend": False})
    wait_for("Succeeded", phase_is(api_client, namespace, "sus", "Succeeded"), 90)
    st = status(api_client, namespace, "sus")
    assert (st["completedIndexes"], st["completionProgress"]) == ("0-2", "3/3")
    assert (condition(st, "Suspended")["status"], condition(st, "Suspended")["reason"]) == (
        "False",
        "JobResumed",
    )
    tokens = {i: store.get(namespace, f"sus.{i}").record.fencing_token for i in range(3)}
    assert tokens == {0: 2, 1: 2, 2: 1}  # resumed under the next token; index 2 never suspended
    ended = end_reason(api_client, namespace, "sus")
    told = [r for r, _ in events(api_client, namespace, "sus", until=["Suspended", ended])]
    assert (told.count("Suspended"), told.count("Resumed")) == (1, 1)


def test_suspending_a_non_indexed_job_of_several_completions_fences_each_held_completion(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    # batch/v1 e2e "should delete pods when suspended", for NonIndexed with
    # completions above 1: each completion's lease is suspended as an index's.
    create_job(
        api_client,
        namespace,
        "pair",
        sh('[ "$LEASEHOLD_FENCING_TOKEN" = 1 ] && sleep 120; exit 0'),
        lease_seconds=10,
        max_attempts=1,
        completions=2,
        parallelism=2,
    )

    def both_bound() -> bool:
        return all(store.get(namespace, f"pair.{i}").record.holder_uid for i in (0, 1))

    wait_for("both completions held by their pods", lambda: _try(both_bound), 60)
    for index in (0, 1):
        local_pod_runner.wait_for_pid(namespace, f"pair-{index}-1", timeout=30)
    patch_spec(api_client, namespace, "pair", {"suspend": True})
    for index in (0, 1):
        wait_for(
            f"completion {index}'s lease suspended",
            functools.partial(_lease_suspended, store, namespace, f"pair.{index}"),
            30,
        )
        gone = functools.partial(pod_gone_or_going, api_client, namespace, f"pair-{index}-1")
        wait_for(f"pod pair-{index}-1 deleted", gone, 30)
        late = store.complete(namespace, f"pair.{index}", f"pair-{index}-1", 1, Outcome.SUCCEEDED)
        assert isinstance(late, Rejected)
    wait_for("Suspended", phase_is(api_client, namespace, "pair", "Suspended"), 30)
    patch_spec(api_client, namespace, "pair", {"suspend": False})
    wait_for("Succeeded", phase_is(api_client, namespace, "pair", "Succeeded"), 90)
    st = status(api_client, namespace, "pair")
    assert (st["succeeded"], st["completionProgress"]) == (2, "2/2")
    assert "completedIndexes" not in st  # NonIndexed: the index only names the lease
    assert [store.get(namespace, f"pair.{i}").record.fencing_token for i in (0, 1)] == [2, 2]


def _lease_suspended(store: LeaseStore, namespace: str, name: str) -> bool:
    """Whether the JobLease ``namespace/name`` is suspended and unheld."""
    record = store.get(namespace, name).record
    return record.suspended and record.holder_identity is None


def _try(check: Callable[[], bool]) -> bool:
    """``check()``, or ``False`` while a lease it reads does not exist yet."""
    try:
        return check()
    except LeaseNotFoundError:
        return False


def test_each_index_lease_carries_params_and_priority_and_a_suspended_job_has_none_to_claim(
    operator: OperatorProcess,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
    worker_rbac: None,
) -> None:
    shards = {"shards": ["a", "b", "c"]}
    common: dict[str, Any] = {"lease_seconds": 60, "completionMode": "Indexed"}
    create_job(api_client, namespace, "low", None, completions=2, parallelism=2, **common)
    create_job(
        api_client,
        namespace,
        "high",
        None,
        completions=3,
        parallelism=3,
        priority=9,
        params=shards,
        **common,
    )
    create_job(
        api_client,
        namespace,
        "held",
        None,
        completions=2,
        parallelism=2,
        priority=99,
        suspend=True,
        **common,
    )
    wait_for(
        "5 index leases",
        lambda: len(store.list_leases(namespace, label_selector=names.LABEL_JOB)) == 5,
        30,
    )
    wait_for("held Suspended", phase_is(api_client, namespace, "held", "Suspended"), 30)
    for index in range(3):
        lease = store.get(namespace, index_lease_name("high", index))
        assert (lease.params, lease.priority) == (shards, 9)
    # The pool takes the priority-9 job's indexes first, each with the whole params;
    # the suspended job's indexes (priority 99) have no lease to claim.
    order: list[tuple[str, int]] = []
    for n in range(5):
        holder = worker.claim_any(namespace, f"pool-{n}", names.LABEL_JOB, store=store)
        assert holder is not None
        job_name = holder.lease_name.rsplit(".", 1)[0]
        assert holder.completion_index is not None  # which part of the params is its own
        order.append((job_name, holder.completion_index))
        if job_name == "high":
            assert holder.params == shards
        assert isinstance(holder.complete(Outcome.SUCCEEDED), Accepted)
        holder.close()
    assert [job for job, _ in order] == ["high"] * 3 + ["low"] * 2
    assert sorted(i for job, i in order if job == "high") == [0, 1, 2]
    assert worker.claim_any(namespace, "pool-x", names.LABEL_JOB, store=store) is None
    # Resumed, its indexes get their leases and the pool can take them.
    patch_spec(api_client, namespace, "held", {"suspend": False})
    wait_for(
        "held's index leases",
        lambda: len(store.list_leases(namespace, label_selector=f"{names.LABEL_JOB}=held")) == 2,
        30,
    )
    resumed = worker.claim_any(namespace, "pool-y", names.LABEL_JOB, store=store)
    assert resumed is not None and resumed.lease_name.startswith("held.")
    resumed.close()


INDEX_1_HANGS_FIRST = (
    '[ "$LEASEHOLD_FENCING_TOKEN" = 1 ] && [ "$JOB_COMPLETION_INDEX" = 1 ] && sleep 120; exit 0'
)


def test_an_evicted_index_is_not_counted_against_its_budget(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    # One attempt per index, no retry: a counted end of index 1's attempt would fail it.
    create_job(
        api_client,
        namespace,
        "ev",
        sh(INDEX_1_HANGS_FIRST),
        lease_seconds=30,
        max_attempts=1,
        completions=3,
        parallelism=3,
        completionMode="Indexed",
        backoffLimitPerIndex=0,
    )
    local_pod_runner.wait_for_pid(namespace, "ev-1-1", timeout=60)
    wait_for("ev.1 bound to its pod", lambda: store.get(namespace, "ev.1").record.holder_uid, 30)
    evict(api_client, namespace, "ev-1-1")
    wait_for("Succeeded", phase_is(api_client, namespace, "ev", "Succeeded"), 90)
    st = status(api_client, namespace, "ev")
    assert (st["completedIndexes"], st.get("failedIndexes"), st.get("failed", 0)) == (
        "0-2",
        None,
        0,
    )
    record = store.get(namespace, "ev.1").record
    assert (record.fencing_token, record.failures, record.uncounted_attempts) == (2, 0, 1)
    assert record.max_fencing_token == 2  # the excuse raised the cap by one
    assert record.completion is not None and record.completion.outcome == Outcome.SUCCEEDED
    told = events(api_client, namespace, "ev", until=[end_reason(api_client, namespace, "ev")])
    messages = [m for r, m in told if r == "Evicted"]
    assert len(messages) == 1 and messages[0].startswith("Index 1: "), messages
    assert "DisruptionTarget=True" in messages[0]
    # The evicted attempt is fenced: its token is stale.
    late = store.complete(namespace, "ev.1", "ev-1-1", 1, Outcome.SUCCEEDED)
    assert isinstance(late, Rejected)
