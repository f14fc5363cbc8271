"""Suspend and resume (``spec.suspend``, as batch/v1 Job's), on a real control plane.

Each test runs its own ``leasehold operator`` process watching the test's
namespace; pods run as local processes through the pod runner. The rules
tested are written down in docs/lifecycle.md, "Suspend and resume".
"""

from __future__ import annotations

import functools
import time
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from leasehold import names
from leasehold.fencing import MemoryFence, StaleToken
from leasehold.fencing.kube import annotate, fenced_patch, opt_in
from leasehold.fencing.revocation import RevocationReason, RevokedTokens, TokenRevoked
from leasehold.lease.api import LeaseMode
from leasehold.lease.protocol import Outcome, Rejection
from leasehold.lease.store import Accepted, LeaseStore, Rejected
from operatorproc import OperatorProcess
from podrunner import PodRunner
from tests.integration.jobs import (
    condition,
    create_job,
    events,
    patch_spec,
    phase_is,
    pod_gone_or_going,
    status,
    wait_for,
)
from tests.integration.leases import refused_lease_patch
from tests.integration.test_attempts import on_token
from tests.integration.test_fencing_kube import fencing_policy  # noqa: F401 - a fixture


def _pods(api: client.ApiClient, namespace: str, job: str) -> list[Any]:
    return list(
        client.CoreV1Api(api)
        .list_namespaced_pod(namespace, label_selector=f"{names.LABEL_JOB}={job}")
        .items
    )


def _read_lease(api: client.ApiClient) -> Any:
    custom = client.CustomObjectsApi(api)

    def read(namespace: str, name: str) -> dict[str, Any] | None:
        try:
            body: Any = custom.get_namespaced_custom_object(
                names.GROUP, names.VERSION, namespace, names.PLURAL_JOB_LEASES, name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return dict(body)

    return read


@pytest.mark.usefixtures("fencing_policy")
def test_suspend_fences_the_running_attempt_and_resume_goes_on_above_it(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    # maxAttempts=1: were the suspended attempt counted, the resume could not claim.
    command = on_token("exec leasehold run -- sleep 120", "exec leasehold run -- true")
    create_job(api_client, namespace, "pause", command, lease_seconds=30, max_attempts=1)
    wait_for("Running", phase_is(api_client, namespace, "pause", "Running"), 30)
    local_pod_runner.wait_for_pid(namespace, "pause-1", timeout=30)
    # A target fenced by token, as attempt 1 writes to it.
    fence = MemoryFence()
    fence.admit("result", 1)
    # ... and a Kubernetes object fenced by the admission policy (deploy/fencing/).
    core = client.CoreV1Api(api_client)
    report = opt_in({"metadata": {"name": "report"}, "data": {"by": "attempt 1"}})
    core.create_namespaced_config_map(namespace, cast(Any, annotate(report, 1)))
    revoked = RevokedTokens(_read_lease(api_client))
    revoked.check(namespace, "pause", 1)  # the live token passes

    patch_spec(api_client, namespace, "pause", {"suspend": True})
    suspended_at = time.monotonic()
    wait_for("lease suspended", lambda: store.get(namespace, "pause").record.suspended)
    assert time.monotonic() - suspended_at < 10  # at once, not after the 30 s lease
    record = store.get(namespace, "pause").record
    assert (record.holder_identity, record.fencing_token) == (None, 1)
    assert (record.suspensions, record.max_fencing_token) == (1, 2)  # no budget used
    # The suspended attempt's late writes are refused: its completion ...
    late = store.complete(namespace, "pause", "pause-1", 1, Outcome.SUCCEEDED)
    assert isinstance(late, Rejected) and late.rejection is Rejection.NOT_HOLDER
    # ... and a fenced write under its token, by a target that reads the lease.
    with pytest.raises(TokenRevoked) as unheld:
        revoked.check(namespace, "pause", 1)
    assert unheld.value.revocation.reason is RevocationReason.UNHELD
    # Nothing claims a suspended lease (the CRD refuses it too).
    refused = store.claim(namespace, "pause", "intruder")
    assert isinstance(refused, Rejected) and refused.rejection is Rejection.SUSPENDED
    wait_for("pod deleted", lambda: pod_gone_or_going(api_client, namespace, "pause-1"), 30)
    wait_for("Suspended", phase_is(api_client, namespace, "pause", "Suspended"), 30)
    st = status(api_client, namespace, "pause")
    suspended = condition(st, "Suspended")
    assert (suspended["status"], suspended["reason"]) == ("True", "JobSuspended")
    assert suspended["observedGeneration"] == 2
    assert st["attemptHistory"][-1]["reason"] == "Suspended"
    assert "holderIdentity" not in st
    events(api_client, namespace, "pause", until=["Suspended"])

    patch_spec(api_client, namespace, "pause", {"suspend": False})
    wait_for("Succeeded", phase_is(api_client, namespace, "pause", "Succeeded"), 60)
    st = status(api_client, namespace, "pause")
    assert st["completion"]["fencingToken"] == 2
    assert [(a["fencingToken"], a["reason"]) for a in st["attemptHistory"]] == [
        (1, "Suspended"),
        (2, "Succeeded"),
    ]
    resumed = condition(st, "Suspended")
    assert (resumed["status"], resumed["reason"]) == ("False", "JobResumed")
    assert resumed["observedGeneration"] == 3
    events(api_client, namespace, "pause", until=["Resumed"])
    # The resumed attempt wrote under token 2: the old token is stale at the target.
    fence.admit("result", 2)
    with pytest.raises(StaleToken):
        fence.admit("result", 1)
    core.patch_namespaced_config_map("report", namespace, fenced_patch(2, {"data": {"by": "2"}}))
    with pytest.raises(ApiException) as denied:
        core.patch_namespaced_config_map(
            "report", namespace, fenced_patch(1, {"data": {"by": "the suspended attempt"}})
        )
    assert denied.value.status == 403 and "ValidatingAdmissionPolicy" in str(denied.value.body)


def test_a_job_created_suspended_creates_no_pod_until_resumed(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    create_job(
        api_client,
        namespace,
        "queued",
        "exec leasehold run -- true",
        lease_seconds=30,
        suspend=True,
    )
    wait_for("Suspended", phase_is(api_client, namespace, "queued", "Suspended"), 30)
    record = store.get(namespace, "queued").record
    assert (record.suspended, record.fencing_token, record.suspensions) == (True, 0, 0)
    st = status(api_client, namespace, "queued")
    assert condition(st, "Suspended")["reason"] == "JobSuspended"
    assert "attemptHistory" not in st
    time.sleep(1.0)  # the operator has had its chance to (wrongly) start a pod
    assert _pods(api_client, namespace, "queued") == []

    patch_spec(api_client, namespace, "queued", {"suspend": False})
    wait_for("Succeeded", phase_is(api_client, namespace, "queued", "Succeeded"), 60)
    st = status(api_client, namespace, "queued")
    assert st["completion"]["fencingToken"] == 1
    assert condition(st, "Suspended")["status"] == "False"


def test_a_pull_job_suspended_cannot_be_claimed_until_resumed(
    operator: OperatorProcess, api_client: client.ApiClient, store: LeaseStore, namespace: str
) -> None:
    create_job(api_client, namespace, "pulled", None, lease_seconds=8)
    wait_for("lease", lambda: store.list_leases(namespace))
    first = store.claim(namespace, "pulled", "worker-a")
    assert isinstance(first, Accepted) and first.token == 1
    patch_spec(api_client, namespace, "pulled", {"suspend": True})
    wait_for("lease suspended", lambda: store.get(namespace, "pulled").record.suspended)
    suspended_at = time.monotonic()
    renewed = store.renew(namespace, "pulled", "worker-a", 1)
    assert isinstance(renewed, Rejected)  # the worker lost its lease at once
    refused = store.claim(namespace, "pulled", "worker-b")
    assert isinstance(refused, Rejected) and refused.rejection is Rejection.SUSPENDED
    patch_spec(api_client, namespace, "pulled", {"suspend": False})
    # worker-a does not know yet: it may work on until its local deadline (8 s
    # from its last renewal), so the lease stays unclaimable until the operator
    # saw it unchanged for the lease's duration plus its margin.
    wait_for("lease resumed", lambda: not store.get(namespace, "pulled").record.suspended, 40)
    assert time.monotonic() - suspended_at >= 8 - 1  # not before worker-a's window could end
    events(api_client, namespace, "pulled", until=["WaitingForEarlierHolder"])
    second = store.claim(namespace, "pulled", "worker-b")
    assert isinstance(second, Accepted) and second.token == 2


def test_the_api_server_counts_a_suspension_only_in_the_write_that_suspends(
    store: LeaseStore, api_client: client.ApiClient, namespace: str
) -> None:
    refused = functools.partial(refused_lease_patch, api_client, namespace, "q")

    store.create(
        namespace, "q", job_name="q", lease_duration_seconds=60, max_fencing_token=1,
        mode=LeaseMode.PULL,
    )  # fmt: skip
    assert isinstance(store.claim(namespace, "q", "w-1"), Accepted)
    # No cap raise and no count without a suspension; a held lease is never suspended.
    assert "can only be lowered" in refused({"maxFencingToken": 2})
    assert "spec.suspensions goes up" in refused({"suspensions": 1, "maxFencingToken": 2})
    assert "is unheld" in refused({"suspended": True})
    # The suspend of a held lease must mark its token as uncounted: a resume
    # waits out a hold only the mark says was ended, and an excuse is refused
    # for a marked token (otherwise one attempt would raise the cap twice).
    unmarked = {"suspended": True, "holderIdentity": None, "suspensions": 1, "maxFencingToken": 2}
    assert "spec.suspensions goes up" in refused(unmarked)
    assert "spec.suspensions goes up" in refused({**unmarked, "lastUncountedToken": 0})
    suspended = store.suspend(store.get(namespace, "q"))
    assert isinstance(suspended, Accepted), suspended
    record = suspended.lease.record
    assert (record.holder_identity, record.suspensions, record.max_fencing_token) == (None, 1, 2)
    # The suspended attempt is uncounted once: no excuse raises the cap for it again
    # (found by the model: claim, suspend, excuse would have raised it twice).
    assert record.last_uncounted_token == 1
    assert isinstance(store.excuse(suspended.lease), Rejected)
    assert "spec.uncountedAttempts goes up" in refused(
        {"uncountedAttempts": 1, "lastUncountedToken": 1, "maxFencingToken": 3}
    )
    # Suspending an unheld lease again counts nothing; nothing claims it, by hand either.
    assert "spec.suspensions goes up" in refused({"suspensions": 2, "maxFencingToken": 3})
    assert "cannot be claimed" in refused({"fencingToken": 2, "holderIdentity": "w-2"})
    resumed = store.resume(store.get(namespace, "q"))
    assert isinstance(resumed, Accepted) and not resumed.lease.record.suspended
    again = store.claim(namespace, "q", "w-2")
    assert isinstance(again, Accepted) and again.token == 2  # within the raised cap
