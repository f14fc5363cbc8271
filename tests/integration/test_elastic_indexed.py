"""Elastic Indexed LeasedJobs on a real control plane: ``completions`` scaled with ``parallelism``.

batch/v1's elastic Indexed Job (pkg/apis/batch/validation/validation.go,
validateCompletions; pkg/controller/job/job_controller.go): an Indexed job may
change ``spec.completions`` when it changes ``spec.parallelism`` to the same
value. Here the indexes removed are stopped at their JobLeases (suspended:
unheld, no claim) before their pods go, so a removed worker's renewals and
completion are refused; an index added back runs under a token above every
earlier one. Each test runs its own operator; pods run as local processes.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from leasehold import names
from leasehold.lease.errors import LeaseNotFoundError
from leasehold.lease.protocol import Outcome
from leasehold.lease.store import LeaseStore, Rejected
from operatorproc import OperatorProcess
from podrunner import PodRunner
from tests.integration.jobs import (
    G,
    V,
    create_job,
    end_reason,
    events,
    patch_spec,
    phase_is,
    pod_gone_or_going,
    status,
    wait_for,
)


def sh(script: str) -> str:
    return f"leasehold run -- sh -c '{script}'"


def _held_by_pod(store: LeaseStore, namespace: str, lease: str) -> bool:
    """Whether the JobLease is held and bound to its pod (``False`` before it exists)."""
    try:
        return store.get(namespace, lease).record.holder_uid is not None
    except LeaseNotFoundError:
        return False


def _suspended(store: LeaseStore, namespace: str, lease: str) -> bool:
    record = store.get(namespace, lease).record
    return record.suspended and record.holder_identity is None


def _planned_for(api: client.ApiClient, namespace: str, name: str, total: int) -> bool:
    """Whether the job's status was written for ``total`` completions (the Scaled Event's base)."""
    progress = str(status(api, namespace, name).get("completionProgress", ""))
    return progress.endswith(f"/{total}")


def _scaled_messages(api: client.ApiClient, namespace: str, name: str) -> list[str]:
    """The job's ``Scaled`` Events' messages, once its end's Event is posted (all are then)."""
    told = events(api, namespace, name, until=[end_reason(api, namespace, name)])
    return [m for r, m in told if r == "Scaled"]


def test_scaling_up_an_indexed_job_runs_the_new_indexes(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
    tmp_path: Path,
) -> None:
    # batch/v1 e2e "should allow to scale up an Indexed Job" (ElasticIndexedJob):
    # completions and parallelism raised together; the new indexes run. The
    # first two end only once the scale-up was made (``go``): had both ended
    # before it on a slow machine, the job would be over.
    go = tmp_path / "go"
    create_job(
        api_client,
        namespace,
        "up",
        sh(f'[ "$JOB_COMPLETION_INDEX" -ge 2 ] || until [ -e {go} ]; do sleep 0.2; done; exit 0'),
        lease_seconds=10,
        completions=2,
        parallelism=2,
        completionMode="Indexed",
    )
    wait_for("index 0 held", functools.partial(_held_by_pod, store, namespace, "up.0"), 60)
    wait_for("status of 2", functools.partial(_planned_for, api_client, namespace, "up", 2), 30)
    patch_spec(api_client, namespace, "up", {"completions": 4, "parallelism": 4})
    go.touch()
    wait_for("Succeeded", phase_is(api_client, namespace, "up", "Succeeded"), 90)
    st = status(api_client, namespace, "up")
    assert (st["completedIndexes"], st["succeeded"], st["completionProgress"]) == ("0-3", 4, "4/4")
    tokens = [store.get(namespace, f"up.{i}").record.fencing_token for i in range(4)]
    assert tokens == [1, 1, 1, 1]
    scaled = _scaled_messages(api_client, namespace, "up")
    assert len(scaled) == 1 and "completions=2 to 4: indexes 2,3 start" in scaled[0]


def test_scaling_down_an_indexed_job_stops_the_removed_indexes_and_completes_on_the_rest(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
    tmp_path: Path,
) -> None:
    # batch/v1 e2e "should allow to scale down an Indexed Job": the pods of the
    # indexes at or above the new completions are deleted and not counted, and
    # the job completes on the rest. Fenced: their leases are stopped first.
    # Indexes 0 and 1 end only once the scale-down was seen (``go``): had they
    # ended before, the job would be over at once and its removed leases
    # stopped for good without the scale-down's suspension (a CI run).
    go = tmp_path / "go"
    create_job(
        api_client,
        namespace,
        "down",
        sh(
            f'[ "$JOB_COMPLETION_INDEX" -ge 2 ] && sleep 120; until [ -e {go} ]; do sleep 0.2; done'
        ),
        lease_seconds=10,
        max_attempts=1,
        completions=4,
        parallelism=4,
        completionMode="Indexed",
    )
    for index in (2, 3):
        lease = f"down.{index}"
        wait_for(f"{lease} held", functools.partial(_held_by_pod, store, namespace, lease), 60)
        local_pod_runner.wait_for_pid(namespace, f"down-{index}-1", timeout=30)
    wait_for("status of 4", functools.partial(_planned_for, api_client, namespace, "down", 4), 30)
    patch_spec(api_client, namespace, "down", {"completions": 2, "parallelism": 2})
    for index in (2, 3):
        lease = f"down.{index}"
        wait_for(f"{lease} stopped", functools.partial(_suspended, store, namespace, lease), 30)
        record = store.get(namespace, lease).record
        # unheld at its token, without a completion (the cap: below, once the job ended)
        assert (record.fencing_token, record.holder_identity, record.completion) == (1, None, None)
        gone = functools.partial(pod_gone_or_going, api_client, namespace, f"down-{index}-1")
        wait_for(f"pod down-{index}-1 deleted", gone, 30)
        # The removed worker is fenced: its renewal and completion are refused.
        pod = f"down-{index}-1"
        assert isinstance(store.renew(namespace, lease, pod, 1), Rejected)
        late = store.complete(namespace, lease, pod, 1, Outcome.SUCCEEDED)
        assert isinstance(late, Rejected)
    go.touch()
    wait_for("Succeeded", phase_is(api_client, namespace, "down", "Succeeded"), 60)
    st = status(api_client, namespace, "down")
    assert (st["completedIndexes"], st["succeeded"], st["completionProgress"]) == ("0,1", 2, "2/2")
    assert st.get("failed", 0) == 0 and "failedIndexes" not in st
    # Stopped for good once the job finished: no claim can ever take them.
    for index in (2, 3):
        record = store.get(namespace, f"down.{index}").record
        assert record.max_fencing_token == record.fencing_token == 1
    scaled = _scaled_messages(api_client, namespace, "down")
    assert len(scaled) == 1
    assert (
        "completions=4 to 2" in scaled[0]
        and "the leases of indexes 2,3 were stopped" in (scaled[0])
    )


def test_changing_completions_without_parallelism_is_refused_naming_spec_completions(
    api_client: client.ApiClient, crds_installed: Path, namespace: str
) -> None:
    # batch/v1 validateCompletions: "spec.completions: Invalid value: 3: can only
    # be modified in tandem with spec.parallelism"; NonIndexed: immutable. The
    # spec's other rules still hold on the new value (maxFailedIndexes and
    # succeededCount at most completions), as batch/v1's validateJobSpec on update.
    api = client.CustomObjectsApi(api_client)
    sleep = sh("sleep 60")
    indexed: dict[str, Any] = {"completions": 3, "parallelism": 3, "completionMode": "Indexed"}
    create_job(api_client, namespace, "idx", sleep, **indexed)
    create_job(api_client, namespace, "plain", sleep, completions=3, parallelism=3)
    create_job(
        api_client,
        namespace,
        "budget",
        sleep,
        backoffLimitPerIndex=1,
        maxFailedIndexes=3,
        **indexed,
    )
    create_job(
        api_client,
        namespace,
        "policy",
        sleep,
        successPolicy={"rules": [{"succeededCount": 3}]},
        **indexed,
    )
    for name, spec, message in (
        ("idx", {"completions": 4}, "spec.completions can only be modified in tandem with"),
        ("idx", {"completions": 4, "parallelism": 5}, "in tandem with spec.parallelism"),
        ("plain", {"completions": 4, "parallelism": 4}, "only with completionMode: Indexed"),
        ("budget", {"completions": 2, "parallelism": 2}, "spec.maxFailedIndexes"),
        ("policy", {"completions": 2, "parallelism": 2}, "succeededCount must be less than"),
    ):
        with pytest.raises(client.ApiException) as refused:
            api.patch_namespaced_custom_object(
                G, V, namespace, names.PLURAL_LEASED_JOBS, name, {"spec": spec}
            )
        assert refused.value.status == 422, (name, spec)
        assert message in str(refused.value.body), (name, spec, refused.value.body)
    # In tandem: accepted; parallelism alone may change as before.
    patch_spec(api_client, namespace, "idx", {"completions": 5, "parallelism": 5})
    patch_spec(api_client, namespace, "idx", {"parallelism": 2})
    patch_spec(api_client, namespace, "plain", {"parallelism": 1})


def test_scaling_an_indexed_job_down_then_up_runs_the_index_again_above_its_old_token(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
    tmp_path: Path,
) -> None:
    # batch/v1: an index removed by a scale-down runs again after a scale-up.
    # Fenced: under a token above the stopped attempt's, issued only once the
    # stopped worker's lease window has passed.
    go = tmp_path / "go"
    create_job(
        api_client,
        namespace,
        "again",
        sh(
            # index 0 runs on through both scales (the job must not end at the scale-down)
            f'[ "$JOB_COMPLETION_INDEX" = 0 ] && until [ -e {go} ]; do sleep 0.2; done;'
            ' [ "$JOB_COMPLETION_INDEX" = 1 ] && [ "$LEASEHOLD_FENCING_TOKEN" = 1 ] && sleep 120;'
            " exit 0"
        ),
        lease_seconds=10,  # one attempt each: no lease lost to a loaded machine's stall
        max_attempts=1,
        completions=2,
        parallelism=2,
        completionMode="Indexed",
    )
    wait_for("again.1 held", functools.partial(_held_by_pod, store, namespace, "again.1"), 60)
    local_pod_runner.wait_for_pid(namespace, "again-1-1", timeout=30)
    wait_for("status of 2", functools.partial(_planned_for, api_client, namespace, "again", 2), 30)
    patch_spec(api_client, namespace, "again", {"completions": 1, "parallelism": 1})
    wait_for("again.1 stopped", functools.partial(_suspended, store, namespace, "again.1"), 30)
    planned = functools.partial(_planned_for, api_client, namespace, "again", 1)
    wait_for("status of 1", planned, 30)
    patch_spec(api_client, namespace, "again", {"completions": 2, "parallelism": 2})
    go.touch()
    wait_for("Succeeded", phase_is(api_client, namespace, "again", "Succeeded"), 90)
    record = store.get(namespace, "again.1").record
    assert record.completion is not None
    assert (record.fencing_token, record.completion.fencing_token) == (2, 2)
    assert record.completion.outcome == Outcome.SUCCEEDED
    # The stopped attempt's token stays fenced: its completion is refused.
    late = store.complete(namespace, "again.1", "again-1-1", 1, Outcome.SUCCEEDED)
    assert isinstance(late, Rejected)
    st = status(api_client, namespace, "again")
    assert (st["completedIndexes"], st["succeeded"], st["completionProgress"]) == ("0,1", 2, "2/2")
    assert len(_scaled_messages(api_client, namespace, "again")) == 2
