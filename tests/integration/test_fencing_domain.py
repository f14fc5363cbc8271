"""Fencing across a job's whole life: one fencing domain per job name, a holder is its pod UID.

A JobLease is its job name's fencing domain: it outlives every LeasedJob of
that name, so a job deleted and created again never reuses a token, a pod
name or an idempotency key; the operator adopts only what carries the job's
own UID; a holder is its pod's UID, not its name.
"""

from __future__ import annotations

import json
import time
from typing import Any, cast

import pytest
from kubernetes import client

from leasehold import names
from leasehold.controller.runtime import Actors
from leasehold.lease.api import LeaseMode
from leasehold.lease.errors import LeaseNotFoundError
from leasehold.lease.protocol import Outcome, Rejection
from leasehold.lease.store import Accepted, LeaseStore, Rejected
from leasehold.worker import pull
from localcluster.kubectl import Kubectl
from operatorproc import OperatorProcess
from podrunner import PodRunner
from tests.integration.jobs import (
    NO_BACKOFF,
    create_job,
    events,
    get_job,
    phase_is,
    run,
    status,
    wait_for,
)

G, V = names.GROUP, names.VERSION
UID_A = "00000000-0000-0000-0000-00000000000a"
UID_B = "00000000-0000-0000-0000-00000000000b"


def delete_job(api: client.ApiClient, namespace: str, name: str) -> None:
    custom = client.CustomObjectsApi(api)
    custom.delete_namespaced_custom_object(G, V, namespace, "leasedjobs", name)

    def gone() -> bool:
        try:
            custom.get_namespaced_custom_object(G, V, namespace, "leasedjobs", name)
        except client.ApiException as exc:
            return bool(exc.status == 404)
        return False

    wait_for(f"LeasedJob {name} to go", gone, 30)


# -- the store: a new incarnation takes the domain over ------------------------


def test_a_new_incarnation_continues_the_tokens_and_fences_the_old_one(
    store: LeaseStore, api_client: client.ApiClient, namespace: str
) -> None:
    custom = client.CustomObjectsApi(api_client)

    def patch_spec(spec: dict[str, Any]) -> str:
        with pytest.raises(client.ApiException) as caught:
            custom.patch_namespaced_custom_object(
                G, V, namespace, "jobleases", "job", {"spec": spec}
            )
        assert caught.value.status == 422
        return str(json.loads(caught.value.body or "{}")["message"])

    # Owned by something, as leases were before they outlived their jobs.
    owner: Any = client.CoreV1Api(api_client).create_namespaced_config_map(
        namespace, cast(Any, {"metadata": {"name": "owner"}})
    )
    owned_by = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    store.create(
        namespace,
        "job",
        job_name="job",
        lease_duration_seconds=60,
        max_fencing_token=3,
        job_uid=UID_A,
        mode=LeaseMode.PULL,
        owner_references=[owned_by],
    )
    first = store.claim(namespace, "job", "job-1")
    assert isinstance(first, Accepted) and first.token == 1
    assert isinstance(store.complete(namespace, "job", "job-1", 1, Outcome.SUCCEEDED), Accepted)
    # Without a new incarnation the completion and the cap stand.
    assert "never raised" in patch_spec({"maxFencingToken": 10})
    assert "recorded once" in patch_spec({"completion": None})

    taken = store.rearm(
        store.get(namespace, "job"),
        job_uid=UID_B,
        mode=LeaseMode.PULL,
        lease_duration_seconds=30,
        max_attempts=3,
    )
    assert isinstance(taken, Accepted), taken
    record = taken.lease.record
    assert (record.fencing_token, record.base_fencing_token) == (1, 1)
    assert (record.completion, record.holder_identity, record.job_uid) == (None, None, UID_B)
    assert record.max_fencing_token == 4
    assert not taken.lease.body["metadata"].get("ownerReferences")

    second = store.claim(namespace, "job", "job-2")
    assert isinstance(second, Accepted) and second.token == 2
    # The old incarnation's holder can do nothing to the new one's lease.
    for late in (
        store.renew(namespace, "job", "job-1", 1),
        store.complete(namespace, "job", "job-1", 1, Outcome.SUCCEEDED),
        store.release(namespace, "job", "job-1", 1),
    ):
        assert isinstance(late, Rejected) and late.rejection is Rejection.STALE_TOKEN
    # A take-over keeps no holder and cannot move the token (the CRD's rules).
    assert "new incarnation" in patch_spec({"jobUID": UID_A, "baseFencingToken": 2})
    held = store.get(namespace, "job").body["spec"]
    assert "new incarnation" in patch_spec({"jobUID": UID_A, "fencingToken": held["fencingToken"]})


# -- the operator ---------------------------------------------------------------------


def test_a_job_created_again_never_reuses_a_token_pod_or_key(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    kubectl: Kubectl,
    namespace: str,
) -> None:
    # Leases of 10 s: nothing here waits for an expiry, and a 3 s lease can
    # be lost by a worker starved of CPU (a reclaim would use token 2 early).
    create_job(api_client, namespace, "again", run(0.2), lease_seconds=10)
    wait_for("Succeeded", phase_is(api_client, namespace, "again", "Succeeded"), 60)
    assert status(api_client, namespace, "again")["completion"]["fencingToken"] == 1
    first_uid = get_job(api_client, namespace, "again")["metadata"]["uid"]
    delete_job(api_client, namespace, "again")
    time.sleep(1.0)  # the garbage collector's turn, had the lease an owner
    # The lease outlives the job: it is the name's fencing domain.
    kept = store.get(namespace, "again")
    assert kept.record.fencing_token == 1
    assert not kept.body["metadata"].get("ownerReferences")
    assert kept.body["spec"]["jobUID"] == first_uid

    create_job(api_client, namespace, "again", run(0.2), lease_seconds=10)
    wait_for("Succeeded again", phase_is(api_client, namespace, "again", "Succeeded"), 60)
    st = status(api_client, namespace, "again")
    assert st["completion"]["fencingToken"] == 2
    assert st["completion"]["holderIdentity"] == "again-2"
    assert st["attempts"] == 1
    assert "token 2" in local_pod_runner.log(namespace, "again-2")
    second_uid = get_job(api_client, namespace, "again")["metadata"]["uid"]
    assert store.get(namespace, "again").record.job_uid == second_uid != first_uid

    # Deleting the lease itself does not reset the domain: the finalizer
    # keeps it (Terminating) while its namespace lives.
    kubectl("delete", "joblease", "again", "-n", namespace, "--wait=false")
    delete_job(api_client, namespace, "again")
    time.sleep(0.5)
    assert store.get(namespace, "again").record.fencing_token == 2
    create_job(api_client, namespace, "again", run(0.2), lease_seconds=10)
    wait_for("Succeeded a third time", phase_is(api_client, namespace, "again", "Succeeded"), 60)
    assert status(api_client, namespace, "again")["completion"]["fencingToken"] == 3


def test_a_pod_the_job_did_not_create_is_never_adopted(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    # Someone made the first attempt's pod before the job existed (or an
    # earlier incarnation's pod of that name is still terminating).
    impostor: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "taken-1", "labels": {"app": "impostor"}},
        "spec": {
            "restartPolicy": "Never",
            "schedulingGates": [{"name": "leasehold.dev/never"}],
            "containers": [{"name": "w", "image": "x", "command": ["sleep", "600"]}],
        },
    }
    client.CoreV1Api(api_client).create_namespaced_pod(namespace, cast(Any, impostor))
    # A long lease: had the impostor been taken for the attempt's pod, the
    # job would wait a minute for its lease to expire.
    create_job(api_client, namespace, "taken", run(0.2), lease_seconds=60, backoff=NO_BACKOFF)
    wait_for("Succeeded", phase_is(api_client, namespace, "taken", "Succeeded"), 30)
    st = status(api_client, namespace, "taken")
    assert st["completion"]["fencingToken"] == 2
    assert st["completion"]["holderIdentity"] == "taken-2"
    events(api_client, namespace, "taken", until=["PodNameTaken"])


def test_a_pod_replaced_under_the_same_name_is_not_the_holder(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    kubectl: Kubectl,
    namespace: str,
) -> None:
    create_job(api_client, namespace, "swap", run(6), lease_seconds=4)
    local_pod_runner.wait_for_pid(namespace, "swap-1", timeout=30)
    original = kubectl.json("get", "pod", "swap-1", "-n", namespace)
    bound = wait_for(
        "the lease bound to the pod",
        lambda: store.get(namespace, "swap").record.holder_uid,
        10,
    )
    assert bound == original["metadata"]["uid"]
    # `kubectl replace --force --grace-period=0`: same name, new UID, new process.
    manifest = dict(original)
    manifest.pop("status", None)
    manifest["metadata"] = {
        k: v
        for k, v in original["metadata"].items()
        if k not in ("uid", "resourceVersion", "creationTimestamp", "managedFields")
    }
    kubectl(
        *("replace", "--force", "--grace-period=0", "-n", namespace, "-f", "-"),
        input=json.dumps(manifest),
    )
    replaced = kubectl.json("get", "pod", "swap-1", "-n", namespace)["metadata"]["uid"]
    assert replaced != bound
    # The new pod runs under the old token's name, but it is not the holder:
    # its renewal is refused; the job goes on under a fresh claim.
    wait_for("Succeeded", phase_is(api_client, namespace, "swap", "Succeeded"), 60)
    st = status(api_client, namespace, "swap")
    # Token 2 as a rule; a later one when a starved worker lost a short lease
    # too (seen in CI). Never token 1: the replaced pod is not its holder.
    token = st["completion"]["fencingToken"]
    assert token >= 2 and st["completion"]["holderIdentity"] == f"swap-{token}"
    late = store.complete(namespace, "swap", "swap-1", 1, Outcome.SUCCEEDED, holder_uid=replaced)
    assert isinstance(late, Rejected)


def test_a_pod_the_operator_did_not_create_cannot_bind_the_lease_by_renewing(
    store: LeaseStore, namespace: str
) -> None:
    # The operator claimed for pod w-1, its pod create got 409 (someone made
    # w-1 first, UID_B) and it has yet to release. The foreign pod, holding
    # the name and a worker token, renews in that window: it must not bind.
    store.create(namespace, "w", job_name="w", lease_duration_seconds=60, mode=LeaseMode.PUSH)
    claimed = store.claim(namespace, "w", "w-1")
    assert isinstance(claimed, Accepted) and claimed.lease.record.holder_uid is None
    renewed = store.renew(namespace, "w", "w-1", claimed.token, holder_uid=UID_B)
    assert isinstance(renewed, Rejected) and renewed.rejection is Rejection.NOT_BOUND
    done = store.complete(namespace, "w", "w-1", claimed.token, Outcome.SUCCEEDED, holder_uid=UID_B)
    assert isinstance(done, Rejected) and done.rejection is Rejection.NOT_BOUND
    gone = store.release(namespace, "w", "w-1", claimed.token, holder_uid=UID_B)
    assert isinstance(gone, Rejected) and gone.rejection is Rejection.NOT_BOUND
    record = store.get(namespace, "w").record
    assert (record.holder_uid, record.completion, record.renew_time) == (
        None,
        None,
        claimed.lease.record.renew_time,
    )
    # The operator releases (its pod was never created); the token is spent.
    assert isinstance(store.release(namespace, "w", "w-1", claimed.token), Accepted)
    late = store.complete(namespace, "w", "w-1", claimed.token, Outcome.SUCCEEDED, holder_uid=UID_B)
    assert isinstance(late, Rejected) and late.rejection is Rejection.NOT_HOLDER

    # The next attempt: the operator binds its own pod (UID_A); only that pod
    # renews and completes, a pod of the same name with another UID never.
    again = store.claim(namespace, "w", "w-2")
    assert isinstance(again, Accepted)
    assert isinstance(store.bind(namespace, "w", "w-2", again.token, UID_A), Accepted)
    other = store.renew(namespace, "w", "w-2", again.token, holder_uid=UID_B)
    assert isinstance(other, Rejected) and other.rejection is Rejection.NOT_HOLDER
    assert isinstance(store.renew(namespace, "w", "w-2", again.token, holder_uid=UID_A), Accepted)
    finished = store.complete(
        namespace, "w", "w-2", again.token, Outcome.SUCCEEDED, holder_uid=UID_A
    )
    assert isinstance(finished, Accepted)


def test_a_pool_skips_push_mode_leases(store: LeaseStore, namespace: str) -> None:
    # The push-mode lease is the oldest and unheld (as after a reclaim): the
    # operator claims it for the pod it creates, never a pool.
    store.create(
        namespace, "a-push", job_name="a-push", lease_duration_seconds=60, mode=LeaseMode.PUSH
    )
    store.create(
        namespace, "b-pull", job_name="b-pull", lease_duration_seconds=60, mode=LeaseMode.PULL
    )
    mine = pull.claim_any(namespace, "pool-1", store=store)
    assert mine is not None
    try:
        assert mine.lease_name == "b-pull"
        assert store.get(namespace, "a-push").record.holder_identity is None
    finally:
        mine.release()


def test_the_domain_goes_with_its_namespace(
    operator: OperatorProcess, api_client: client.ApiClient, store: LeaseStore, namespace: str
) -> None:
    # The finalizer that keeps a deleted lease must not keep its namespace:
    # the operator drops it once the namespace is being deleted.
    create_job(api_client, namespace, "pulled", None)

    def lease_body() -> dict[str, Any] | None:
        try:
            return store.get(namespace, "pulled").body
        except LeaseNotFoundError:
            return None

    lease = wait_for("the lease", lease_body, 30)
    assert names.FINALIZER_DOMAIN in lease["metadata"]["finalizers"]
    core = client.CoreV1Api(api_client)
    core.delete_namespace(namespace)

    def gone() -> bool:
        try:
            core.read_namespace(namespace)
        except client.ApiException as exc:
            return bool(exc.status == 404)
        return False

    wait_for("the namespace to go", gone, 90)


def test_deleting_a_job_named_like_another_jobs_index_lease_leaves_that_lease_alone(
    api_client: client.ApiClient, namespace: str, store: LeaseStore
) -> None:
    """Issue 27, case 3: a job told its lease name is taken, then deleted as told.

    Index leases are ``<job>.<index>`` now, but an earlier version named
    index 0 of Indexed job ``a`` ``a-0``: LeasedJob ``a-0``'s lease name. Its
    reconcile reports LeaseNameTaken. Deleting it must not stop that index's
    lease: the lease is job ``a``'s domain (``spec.jobName``), not ``a-0``'s.
    """
    actors = Actors.connect(api_client)
    store.create(  # as an earlier version made index 0's lease
        namespace,
        "a-0",
        job_name="a",
        lease_duration_seconds=30,
        max_fencing_token=3,
        labels={names.LABEL_JOB: "a", names.LABEL_COMPLETION_INDEX: "0"},
        finalizers=[names.FINALIZER_DOMAIN],
    )
    index = store.get(namespace, "a-0")
    create_job(api_client, namespace, "a-0", None, lease_seconds=30)
    actors.jobs.reconcile(namespace, "a-0")
    assert any(
        c["reason"] == "LeaseNameTaken" for c in status(api_client, namespace, "a-0")["conditions"]
    )
    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
        G, V, namespace, "leasedjobs", "a-0"
    )
    actors.jobs.reconcile(namespace, "a-0")  # gone: its lease is retired, if it is its own
    after = store.get(namespace, "a-0")
    assert after.record.max_fencing_token == index.record.max_fencing_token, "index 0 was stopped"
    assert after.record.job_name == "a"


def test_a_job_name_too_long_for_a_label_value_is_refused_naming_the_field(
    api_client: client.ApiClient, namespace: str
) -> None:
    """Issue 27, case 9: a LeasedJob's name is at most 63 characters, as a Job's.

    A name of 64-253 characters was accepted, then its lease's create got 422
    (the name is the lease's label value) and was retried for ever.
    """
    with pytest.raises(client.ApiException) as caught:
        create_job(api_client, namespace, "j" * 64, None, lease_seconds=30)
    assert caught.value.status == 422
    message = str(json.loads(caught.value.body or "{}")["message"])
    assert "metadata.name must be at most 63 characters" in message
    create_job(api_client, namespace, "j" * 63, None, lease_seconds=30)  # as a Job's name
    assert get_job(api_client, namespace, "j" * 63)["metadata"]["name"] == "j" * 63
