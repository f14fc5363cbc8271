"""Index lease names on a real control plane: no job's lease can take an index's (issue 27, case 4).

A job's lease is named like the job and outlives it; an index's lease is
``<job>.<index>`` and a job's name has no dot (CEL), so a long-deleted job
``etl-1`` no longer blocks index 1 of a new Indexed job ``etl``. An index
lease an earlier version named ``<job>-<index>`` is carried over, its token
kept; a JobLease made by hand under an index's name is reported on the job.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client

from leasehold import names
from leasehold.lease.api.crds import leased_job_crd
from leasehold.lease.api.leasedjob import MAX_JOB_NAME_LENGTH
from leasehold.lease.errors import LeaseNotFoundError
from leasehold.lease.indexes import index_lease_name
from leasehold.lease.protocol import Outcome
from leasehold.lease.store import Accepted, LeaseStore, Rejected
from operatorproc import OperatorProcess
from podrunner import PodRunner
from tests.integration.jobs import (
    G,
    V,
    create_job,
    end_reason,
    events,
    get_job,
    phase_is,
    status,
    wait_for,
)
from tests.integration.test_claim_bind import Watched


def sh(script: str) -> str:
    return f"leasehold run -- sh -c {shlex.quote(script)}"


def delete_job(api: client.ApiClient, namespace: str, name: str) -> None:
    custom = client.CustomObjectsApi(api)
    custom.delete_namespaced_custom_object(G, V, namespace, names.PLURAL_LEASED_JOBS, name)

    def gone() -> bool:
        try:
            custom.get_namespaced_custom_object(G, V, namespace, names.PLURAL_LEASED_JOBS, name)
        except client.ApiException as exc:
            return bool(exc.status == 404)
        return False

    wait_for(f"LeasedJob {name} to go", gone, 30)


def refusal(exc: client.ApiException) -> str:
    return str(json.loads(exc.body or "{}")["message"])


def test_a_deleted_single_jobs_lease_does_not_block_an_index_of_a_new_indexed_job(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    """Issue 27, case 4: lease ``etl-1`` of a long-deleted job held index 1's name.

    Index 1 of ``etl`` then logged one line and took the only parallelism
    slot on every reconcile: the job hung, with no condition and no Event.
    Pods keep batch Job's hostname form, so ``etl-1``'s pod ``etl-1-1`` may
    still be there (until garbage collection): index 1 then never adopts
    it and runs as ``etl-1-2`` under token 2.
    """
    create_job(api_client, namespace, "etl-1", sh("exit 0"), lease_seconds=10)
    wait_for("etl-1 Succeeded", phase_is(api_client, namespace, "etl-1", "Succeeded"), 60)
    delete_job(api_client, namespace, "etl-1")
    kept = store.get(namespace, "etl-1").record  # the name's fencing domain stays
    assert (kept.job_name, kept.fencing_token) == ("etl-1", 1)

    create_job(
        api_client,
        namespace,
        "etl",
        sh("echo index $JOB_COMPLETION_INDEX"),
        lease_seconds=10,
        completions=3,
        parallelism=1,
        completionMode="Indexed",
    )
    wait_for("etl Succeeded", phase_is(api_client, namespace, "etl", "Succeeded"), 90)
    st = status(api_client, namespace, "etl")
    assert (st["completedIndexes"], st["completionProgress"]) == ("0-2", "3/3")
    for index in range(3):
        lease = store.get(namespace, index_lease_name("etl", index))
        assert lease.name == f"etl.{index}"
        done = lease.record.completion
        assert lease.record.job_name == "etl" and done is not None
        assert done.outcome == Outcome.SUCCEEDED
        assert done.fencing_token == 1 or (index, done.fencing_token) == (1, 2)
        pod = f"etl-{index}-{done.fencing_token}"
        assert f"index {index}" in local_pod_runner.log(namespace, pod)
    after = store.get(namespace, "etl-1").record  # the old job's domain, untouched
    assert (after.job_name, after.fencing_token) == ("etl-1", 1)


def test_a_job_name_with_a_dot_is_refused_naming_metadata_name(
    api_client: client.ApiClient, namespace: str
) -> None:
    """An index lease is ``<job>.<index>``: a job named ``etl.1`` could take index 1's."""
    with pytest.raises(client.ApiException) as caught:
        create_job(api_client, namespace, "etl.1", None, lease_seconds=30)
    assert caught.value.status == 422
    assert "metadata.name must not contain '.'" in refusal(caught.value)
    # A LeasedCronJob's runs are LeasedJobs named after it: the same rule.
    cron = {
        "apiVersion": names.API_VERSION,
        "kind": "LeasedCronJob",
        "metadata": {"name": "nightly.etl"},
        "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"leaseDurationSeconds": 30}}},
    }
    with pytest.raises(client.ApiException) as caught:
        client.CustomObjectsApi(api_client).create_namespaced_custom_object(
            G, V, namespace, names.PLURAL_LEASED_CRON_JOBS, cron
        )
    assert caught.value.status == 422
    assert "metadata.name must not contain '.'" in refusal(caught.value)
    create_job(api_client, namespace, "etl-1", None, lease_seconds=30)  # a dash is fine
    assert get_job(api_client, namespace, "etl-1")["metadata"]["name"] == "etl-1"
    assert len("etl-1") <= MAX_JOB_NAME_LENGTH


PROBE_GROUP = "names-probe.leasehold.dev"


@pytest.fixture
def probe_crd(api_client: client.ApiClient, namespace: str) -> Iterator[dict[str, Any]]:
    """A throwaway CRD (its own group) to try the name rule's shape on, without the rule yet."""
    ext = client.ApiextensionsV1Api(api_client)
    crd: dict[str, Any] = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"probes.{PROBE_GROUP}"},
        "spec": {
            "group": PROBE_GROUP,
            "scope": "Namespaced",
            "names": {"kind": "Probe", "plural": "probes", "singular": "probe"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    ext.create_custom_resource_definition(cast(Any, crd))

    def established() -> bool:
        got: Any = ext.read_custom_resource_definition(crd["metadata"]["name"])
        return any(
            c.type == "Established" and c.status == "True" for c in got.status.conditions or []
        )

    wait_for("the probe CRD", established, 30)
    yield crd
    ext.delete_custom_resource_definition(crd["metadata"]["name"])


def test_the_name_rule_refuses_at_create_only(
    api_client: client.ApiClient, namespace: str, probe_crd: dict[str, Any]
) -> None:
    """The rule's shape on this API server: an object made before the rule stays writable."""
    custom = client.CustomObjectsApi(api_client)
    ext = client.ApiextensionsV1Api(api_client)

    def create(name: str) -> None:
        body = {"apiVersion": f"{PROBE_GROUP}/v1", "kind": "Probe", "metadata": {"name": name}}
        custom.create_namespaced_custom_object(PROBE_GROUP, "v1", namespace, "probes", body)

    create("old.one")  # before the rule: as a LeasedJob with a dot made by an earlier version
    root = leased_job_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    rule = next(r for r in root["x-kubernetes-validations"] if "optionalOldSelf" in r)
    schema = probe_crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    patch = {"spec": {"versions": [{**probe_crd["spec"]["versions"][0]}]}}
    patch["spec"]["versions"][0]["schema"] = {
        "openAPIV3Schema": {**schema, "x-kubernetes-validations": [rule]}
    }
    ext.patch_custom_resource_definition(probe_crd["metadata"]["name"], patch)

    def refused_now() -> bool:
        try:
            create("new.one")
        except client.ApiException as exc:
            return exc.status == 422 and "metadata.name must not contain '.'" in refusal(exc)
        custom.delete_namespaced_custom_object(PROBE_GROUP, "v1", namespace, "probes", "new.one")
        return False

    wait_for("the rule in force", refused_now, 30)
    updated: Any = custom.patch_namespaced_custom_object(
        PROBE_GROUP, "v1", namespace, "probes", "old.one", {"spec": {"touched": True}}
    )
    assert updated["spec"] == {"touched": True}
    create("new-one")


def test_a_legacy_named_index_lease_is_carried_over_at_its_token(
    crds_installed: Path,
    worker_rbac: None,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
    tmp_path: Path,
) -> None:
    """An earlier version's index lease ``mig-1`` (token 3, held): the index goes on above it.

    Made before the operator starts (a running operator stops a lease whose job is gone).
    """
    store.create(
        namespace,
        "mig-1",
        job_name="mig",
        lease_duration_seconds=300,
        max_fencing_token=10,
        labels={names.LABEL_JOB: "mig", names.LABEL_COMPLETION_INDEX: "1"},
        finalizers=[names.FINALIZER_DOMAIN],
    )
    for token in (1, 2):
        claimed = store.claim(namespace, "mig-1", f"mig-1-{token}")
        assert isinstance(claimed, Accepted) and claimed.token == token
        assert isinstance(store.release(namespace, "mig-1", f"mig-1-{token}", token), Accepted)
    stale = store.claim(namespace, "mig-1", "old-worker")  # an attempt still running
    assert isinstance(stale, Accepted) and stale.token == 3

    create_job(
        api_client,
        namespace,
        "mig",
        sh("echo token $LEASEHOLD_FENCING_TOKEN"),
        lease_seconds=10,
        completions=2,
        parallelism=2,
        completionMode="Indexed",
    )
    operator = OperatorProcess(crds_installed, namespace, tmp_path / "operator.log")
    operator.start()
    try:
        wait_for("mig Succeeded", phase_is(api_client, namespace, "mig", "Succeeded"), 90)
    finally:
        operator.stop()
    index1 = store.get(namespace, "mig.1").record
    assert (index1.base_fencing_token, index1.fencing_token) == (3, 4)  # never back below 3
    assert index1.completion is not None and index1.completion.outcome == Outcome.SUCCEEDED
    assert "token 4" in local_pod_runner.log(namespace, "mig-1-4")
    assert store.get(namespace, "mig.0").record.fencing_token == 1
    legacy = store.get(namespace, "mig-1").record  # stopped for good: no pool can claim it
    assert (legacy.holder_identity, legacy.max_fencing_token) == (None, 3)
    assert isinstance(store.claim(namespace, "mig-1", "pool-x"), Rejected)
    late = store.complete(namespace, "mig-1", "old-worker", 3, Outcome.SUCCEEDED)
    assert isinstance(late, Rejected)
    told = events(api_client, namespace, "mig", until=[end_reason(api_client, namespace, "mig")])
    renamed = [m for r, m in told if r == "LeaseRenamed"]
    assert len(renamed) == 1 and renamed[0].startswith("Index 1: JobLease mig-1"), renamed
    assert "fencing token 3" in renamed[0]


def name_taken(
    api: client.ApiClient, namespace: str, job: str
) -> Callable[[], dict[str, Any] | None]:
    """A wait for the job's ``Ready=False`` with reason ``LeaseNameTaken`` (the condition)."""

    def reported() -> dict[str, Any] | None:
        conditions = status(api, namespace, job).get("conditions", [])
        ready = next((c for c in conditions if c["type"] == "Ready"), None)
        return ready if ready is not None and ready["reason"] == "LeaseNameTaken" else None

    return reported


def test_a_jobless_lease_under_an_index_name_is_reported_on_the_job(
    operator: OperatorProcess,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    """A JobLease made by hand as ``hand.0``: index 0 cannot start, and the job says so."""
    store.create(namespace, "hand.0", job_name="someone-else", lease_duration_seconds=30)
    create_job(
        api_client,
        namespace,
        "hand",
        None,
        lease_seconds=30,
        completions=2,
        parallelism=2,
        completionMode="Indexed",
    )

    ready = wait_for("Ready=False LeaseNameTaken", name_taken(api_client, namespace, "hand"), 30)
    assert ready["status"] == "False"
    assert ready["message"].startswith("Index 0: JobLease hand.0 belongs to job someone-else")
    told = events(api_client, namespace, "hand", until=["LeaseNameTaken"])
    warnings = [m for r, m in told if r == "LeaseNameTaken"]
    assert warnings and warnings[0] == ready["message"]
    assert store.get(namespace, "hand.0").record.job_name == "someone-else"  # left alone
    assert store.get(namespace, "hand.1").record.job_name == "hand"  # index 1 started


def test_a_foreign_lease_under_an_index_name_gets_no_pod_in_push_mode(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    """A push job's index whose lease name another lease holds makes no pod for it.

    The index's first attempt is claimed in its lease's create (its pod made
    first): with the name taken that create could only be refused, so no
    pod is made for it at all; the job reports the name as taken and the
    other index runs (held create) to the end.
    """
    store.create(namespace, "push.0", job_name="someone-else", lease_duration_seconds=30)
    made = Watched(client.CoreV1Api(api_client).list_namespaced_pod, namespace)
    create_job(
        api_client,
        namespace,
        "push",
        sh("sleep 0.2"),
        lease_seconds=30,
        completions=2,
        parallelism=2,
        completionMode="Indexed",
    )

    wait_for("Ready=False LeaseNameTaken", name_taken(api_client, namespace, "push"), 30)
    one = wait_for(
        "index 1 completed",
        lambda: store.get(namespace, "push.1").record.completion,
        60,
    )
    assert one.outcome == Outcome.SUCCEEDED
    made.stop()
    assert sorted({o.metadata.name for kind, o in made.seen if kind == "ADDED"}) == ["push-1-1"]
    assert store.get(namespace, "push.0").record.job_name == "someone-else"  # left alone


def test_a_missing_index_lease_is_recreated_above_its_pods_tokens(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    # Issue 27, case 13: an index lease that went missing (its finalizer forced
    # off) came back at token 0: its next claim took token 1 again, a token its
    # running pod already had.
    create_job(
        api_client,
        namespace,
        "gone",
        sh("sleep 600"),
        lease_seconds=10,
        completions=2,
        parallelism=2,
        completionMode="Indexed",
    )
    local_pod_runner.wait_for_pid(namespace, "gone-0-1", timeout=30)
    api = client.CustomObjectsApi(api_client)
    api.patch_namespaced_custom_object(
        G, V, namespace, names.PLURAL_JOB_LEASES, "gone.0", {"metadata": {"finalizers": None}}
    )
    api.delete_namespaced_custom_object(G, V, namespace, names.PLURAL_JOB_LEASES, "gone.0")

    def recreated() -> int | None:
        try:
            record = store.get(namespace, "gone.0").record
        except LeaseNotFoundError:
            return None
        return record.fencing_token if record.fencing_token > 1 else None

    token = wait_for("index 0's lease recreated and claimed above token 1", recreated, 60)
    assert token == 2, token
    events(api_client, namespace, "gone", until=["LeaseRecreated"])
