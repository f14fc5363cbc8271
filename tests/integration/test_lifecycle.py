"""A job's whole life on a real control plane: spec edits, deadlines, slow starts, API errors.

Each test runs its own ``leasehold operator`` process watching the test's
namespace; pods run as local processes through the pod runner. The rules
tested are written down in docs/lifecycle.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from leasehold import names
from leasehold.controller.runtime import Actors
from leasehold.lease.errors import LeaseNotFoundError
from leasehold.lease.protocol import Outcome
from leasehold.lease.store import Accepted, LeaseStore, StoredLease
from operatorproc import OperatorProcess
from podrunner import PodRunner
from tests.integration.jobs import (
    condition,
    condition_true,
    create_job,
    events,
    get_job,
    no_pods_allowed,
    patch_spec,
    phase_is,
    run,
    status,
    wait_for,
)

G, V = names.GROUP, names.VERSION


# -- item: timing comes from the lease ------------------------------------------


@pytest.mark.parametrize(("field", "value"), [("leaseDurationSeconds", 60), ("maxAttempts", 5)])
def test_timing_fields_of_a_job_cannot_be_edited(
    api_client: client.ApiClient, namespace: str, field: str, value: int
) -> None:
    create_job(api_client, namespace, "fixed", "true", lease_seconds=10, max_attempts=2)
    with pytest.raises(ApiException) as refused:
        patch_spec(api_client, namespace, "fixed", {field: value})
    assert refused.value.status == 422
    assert f"spec.{field} is immutable" in str(refused.value.body)
    spec = get_job(api_client, namespace, "fixed")["spec"]
    assert (spec["leaseDurationSeconds"], spec["maxAttempts"]) == (10, 2)


def test_a_template_cannot_be_added_or_removed(
    api_client: client.ApiClient, namespace: str
) -> None:
    """Issue 27, case 8: push and pull are fixed when the job's lease is made.

    Removing the template left a Push lease no pool may claim (stuck for
    ever); adding one ran pods with no startup window.
    """
    create_job(api_client, namespace, "pushed", "true")
    create_job(api_client, namespace, "pulled", None)
    template = {"spec": {"containers": [{"name": "w", "image": "local", "command": ["true"]}]}}
    for name, change in (("pushed", {"template": None}), ("pulled", {"template": template})):
        with pytest.raises(ApiException) as refused:
            patch_spec(api_client, namespace, name, change)
        assert refused.value.status == 422
        assert "spec.template cannot be added or removed" in str(refused.value.body)
    assert "template" in get_job(api_client, namespace, "pushed")["spec"]
    assert "template" not in get_job(api_client, namespace, "pulled")["spec"]


def test_deadline_and_template_of_a_job_may_be_edited(
    api_client: client.ApiClient, namespace: str
) -> None:
    create_job(api_client, namespace, "soft", "true", activeDeadlineSeconds=30)
    patch_spec(api_client, namespace, "soft", {"activeDeadlineSeconds": 60})
    template = {"spec": {"containers": [{"name": "w", "image": "local", "command": ["false"]}]}}
    patch_spec(api_client, namespace, "soft", {"template": template})
    spec = get_job(api_client, namespace, "soft")["spec"]
    assert spec["activeDeadlineSeconds"] == 60
    assert spec["template"]["spec"]["containers"][0]["command"] == ["false"]


# -- item: transient API errors are transient -------------------------------------


def test_pod_refused_by_a_quota_is_retried_with_a_condition_saying_why(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    core = no_pods_allowed(api_client, namespace)
    # One attempt, a startup bound of 3 s: the quota outlasts it (issue 27,
    # case 10). As batch/v1 Job, the job waits for the quota; no attempt is
    # used, none reclaimed as StartupDeadlineExceeded.
    create_job(
        api_client,
        namespace,
        "quota",
        run(0.5),
        lease_seconds=20,
        max_attempts=1,
        startupDeadlineSeconds=3,
    )

    def refused() -> dict[str, Any] | None:
        conds = status(api_client, namespace, "quota").get("conditions", [])
        found = [c for c in conds if c["type"] == "PodCreated" and c["reason"] == "QuotaExceeded"]
        return found[0] if found else None

    cond = wait_for("PodCreated=False/QuotaExceeded", refused, 30)
    assert cond["status"] == "False"
    assert "exceeded quota" in cond["message"]
    time.sleep(10.0)  # retries while the quota still refuses, past the startup bound
    st = status(api_client, namespace, "quota")
    assert st["phase"] == "Pending", st
    # Nothing is claimed while no pod can be created (the pod comes first, its
    # claim after it): no token spent, no lease held for a pod that is not there.
    assert not st.get("fencingToken") and not st.get("attempts"), st
    events(api_client, namespace, "quota", until=["QuotaExceeded"])
    core.delete_namespaced_resource_quota("no-pods", namespace)
    wait_for("Succeeded", phase_is(api_client, namespace, "quota", "Succeeded"), 90)
    st = status(api_client, namespace, "quota")
    assert st["attempts"] == 1
    assert condition(st, "PodCreated")["status"] == "True"


# -- item: deadlines that fire, on a clock that cannot jump -----------------------

FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


def skewed(offset: str) -> dict[str, str]:
    """Libfaketime's environment: the process's wall clock moved by ``offset``."""
    assert FAKETIME_LIB.exists(), "libfaketime is needed to skew the operator's clock"
    return {"LD_PRELOAD": str(FAKETIME_LIB), "FAKETIME": offset}


def created_at(api: client.ApiClient, namespace: str, name: str) -> float:
    """When the API server says the job was created, as seconds ago on our monotonic clock."""
    _, _, headers = client.CustomObjectsApi(api).get_namespaced_custom_object_with_http_info(
        G, V, namespace, names.PLURAL_LEASED_JOBS, name
    )
    created = get_job(api, namespace, name)["metadata"]["creationTimestamp"]
    age = parsedate_to_datetime(headers["Date"]) - datetime.fromisoformat(
        created.replace("Z", "+00:00")
    )
    return time.monotonic() - age.total_seconds()


def _decided(api: client.ApiClient, namespace: str, name: str) -> Callable[[], bool]:
    """The job is decided failed: ``FailureTarget`` (``Failed`` follows once its pods ended).

    A deadline is timed at the decision, as batch/v1 decides it; the pod's
    termination after it (SIGTERM, the wrapper's exit, the pod's status) is not
    the deadline's.
    """
    return lambda: (
        condition_true(api, namespace, name, "FailureTarget")
        or (status(api, namespace, name).get("phase") == "Failed")
    )


def test_deadline_fires_while_the_worker_keeps_renewing(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    deadline = 5
    create_job(
        api_client, namespace, "late", run(120), lease_seconds=4, activeDeadlineSeconds=deadline
    )  # a 3 s window: token 1 must hold until the deadline (asserted below)
    origin = created_at(api_client, namespace, "late")
    local_pod_runner.wait_for_pid(namespace, "late-1", timeout=30)
    wait_for("the deadline decided", _decided(api_client, namespace, "late"), deadline + 15)
    took = time.monotonic() - origin
    assert deadline - 1 <= took <= deadline + 4, f"decided {took:.1f}s after creation"
    wait_for("Failed", phase_is(api_client, namespace, "late", "Failed"), 30)
    failed = condition(status(api_client, namespace, "late"), "Failed")
    assert failed["reason"] == "DeadlineExceeded"
    record = store.get(namespace, "late").record
    assert (record.holder_identity, record.max_fencing_token) == (None, 1)
    # The worker's next renewal is refused: it stops working (lease lost).
    assert local_pod_runner.wait_for_exit(namespace, "late-1", timeout=30) != 0


def test_operator_clock_ahead_does_not_fire_a_deadline_early(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    create_job(api_client, namespace, "ahead", run(6), lease_seconds=3, activeDeadlineSeconds=3600)
    local_pod_runner.wait_for_pid(namespace, "ahead-1", timeout=30)
    wait_for("Running", phase_is(api_client, namespace, "ahead", "Running"), 15)
    operator.kill()
    operator.env = skewed("+2h")  # a restarted operator whose clock is 2 h ahead
    operator.start()
    wait_for("Succeeded", phase_is(api_client, namespace, "ahead", "Succeeded"), 60)
    told = events(api_client, namespace, "ahead", until=["Completed"])
    assert "DeadlineExceeded" not in [r for r, _ in told]


def test_operator_clock_behind_does_not_delay_a_deadline(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    deadline = 8
    create_job(
        api_client, namespace, "behind", run(120), lease_seconds=3, activeDeadlineSeconds=deadline
    )
    origin = created_at(api_client, namespace, "behind")
    local_pod_runner.wait_for_pid(namespace, "behind-1", timeout=30)
    wait_for("Running", phase_is(api_client, namespace, "behind", "Running"), 15)
    operator.kill()
    operator.env = skewed("-1h")  # a restarted operator whose clock is an hour behind
    operator.start()
    # The deadline cannot fire before the restarted operator is up: under load
    # its start alone took 25 s (the job then failed at once, as it should). A
    # clock an hour behind that delayed the deadline would be an hour late.
    up = time.monotonic() - origin
    decided = _decided(api_client, namespace, "behind")
    wait_for("the deadline decided", decided, max(deadline, up) + 20)
    took = time.monotonic() - origin
    assert deadline - 1 <= took <= max(deadline, up) + 5, (
        f"decided {took:.1f}s after creation; the operator was up after {up:.1f}s"
    )
    wait_for("Failed", phase_is(api_client, namespace, "behind", "Failed"), 30)
    assert condition(status(api_client, namespace, "behind"), "Failed")["reason"] == (
        "DeadlineExceeded"
    )


def test_completion_that_lands_before_the_deadline_stop_wins(
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The operator's service in this process, on the real API server; the
    # worker's completion is sent right before the service's stop write, so
    # it lands first, as when a worker finishes just as the deadline fires.
    service = Actors.connect(api_client)
    # The deadline leaves time to create and claim the lease on a busy machine
    # (at 1 s a slow first reconcile already found it passed and closed the lease).
    create_job(api_client, namespace, "race", None, lease_seconds=30, activeDeadlineSeconds=4)
    service.jobs.reconcile(namespace, "race")  # creates the lease
    claimed = store.claim(namespace, "race", "pool-1")
    assert isinstance(claimed, Accepted)
    time.sleep(5.5)  # past the deadline (the Date header has one-second resolution)
    stop = service.ctx.store.stop

    def completion_first(judged: StoredLease) -> Any:
        done = store.complete(namespace, "race", "pool-1", claimed.token, Outcome.SUCCEEDED)
        assert isinstance(done, Accepted)
        return stop(judged)

    monkeypatch.setattr(service.ctx.store, "stop", completion_first)
    plan = service.jobs.reconcile(namespace, "race")
    assert plan is not None
    st = status(api_client, namespace, "race")
    assert st["phase"] == "Succeeded", st
    assert condition(st, "Complete")["reason"] == "Completed"
    assert st["completion"]["fencingToken"] == claimed.token
    assert service.ctx.events.flush(timeout_seconds=30)  # posted off the reconcile
    assert "DeadlineExceeded" not in [r for r, _ in events(api_client, namespace, "race")]


# -- item: starting is not stalling ---------------------------------------------


def create_pending_job(
    api: client.ApiClient, namespace: str, name: str, command: str, **spec: Any
) -> str:
    """A push-mode job whose pods stay Pending (unschedulable) until the node gets a label.

    Returns:
        The node label (``key``) that lets its pods be scheduled.
    """
    label = f"leasehold.test/{namespace}"
    body = {
        "apiVersion": names.API_VERSION,
        "kind": "LeasedJob",
        "metadata": {"name": name},
        "spec": {
            **spec,
            "template": {
                "spec": {
                    "nodeSelector": {label: "yes"},
                    "containers": [
                        {"name": "worker", "image": "local", "command": ["sh", "-c", command]}
                    ],
                }
            },
        },
    }
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        G, V, namespace, names.PLURAL_LEASED_JOBS, body
    )
    return label


def lease_token(store: LeaseStore, namespace: str, name: str) -> int | None:
    """The lease's fencing token, or ``None`` while it does not exist yet."""
    try:
        return store.get(namespace, name).record.fencing_token
    except LeaseNotFoundError:
        return None


def label_node(api: client.ApiClient, node: str, label: str, value: str | None) -> None:
    client.CoreV1Api(api).patch_node(node, {"metadata": {"labels": {label: value}}})


def test_a_pod_slower_to_start_than_its_lease_is_not_reclaimed(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    duration = 3
    label = create_pending_job(
        api_client, namespace, "slow", run(1), leaseDurationSeconds=duration, maxAttempts=3
    )
    try:
        wait_for("the claim", lambda: lease_token(store, namespace, "slow") == 1, 15)
        time.sleep(2 * duration + 2)  # Pending (unschedulable) for longer than two leases
        record = store.get(namespace, "slow").record
        assert (record.holder_identity, record.fencing_token) == ("slow-1", 1)
        assert "Reclaimed" not in [r for r, _ in events(api_client, namespace, "slow")]
        label_node(api_client, local_pod_runner.node_name, label, "yes")  # a node turns up
        wait_for("Succeeded", phase_is(api_client, namespace, "slow", "Succeeded"), 60)
    finally:
        label_node(api_client, local_pod_runner.node_name, label, None)
    st = status(api_client, namespace, "slow")
    assert (st["attempts"], st["completion"]["fencingToken"]) == (1, 1)


def test_a_running_pod_whose_wrapper_starts_after_a_lease_duration_keeps_its_claim(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    """The container runs; its ``leasehold run`` starts later than the lease lasts.

    What a starved node does to a wrapper's start-up (17 s on kind at n=200).
    The first renewal is due within two lease durations of the pod running
    (the start grace), so the attempt keeps its claim: one attempt, token 1.
    Before the grace it was reclaimed one lease duration after the pod ran,
    before its wrapper had even started.
    """
    duration = 8
    create_job(
        api_client,
        namespace,
        "late-start",
        f"sleep {duration + 2}; exec leasehold run -- true",
        lease_seconds=duration,
    )
    wait_for("Succeeded", phase_is(api_client, namespace, "late-start", "Succeeded"), 90)
    st = status(api_client, namespace, "late-start")
    assert (st["attempts"], st["completion"]["fencingToken"]) == (1, 1)
    told = events(api_client, namespace, "late-start", until=["Completed"])
    assert "Reclaimed" not in [r for r, _ in told]


def test_an_attempt_past_its_startup_deadline_is_reported_as_such(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    create_pending_job(
        api_client,
        namespace,
        "never",
        run(1),
        leaseDurationSeconds=2,
        maxAttempts=2,
        startupDeadlineSeconds=3,
    )
    began = time.monotonic()
    wait_for("Failed", phase_is(api_client, namespace, "never", "Failed"), 30)
    took = time.monotonic() - began
    assert took >= 2 * 3, f"failed {took:.1f}s after creation: a startup bound was cut short"
    failed = condition(status(api_client, namespace, "never"), "Failed")
    assert failed["reason"] == "StartupDeadlineExceeded"
    assert "did not start within startupDeadlineSeconds=3" in failed["message"]

    def told_twice() -> list[str] | None:  # one per attempt (and the failure)
        told = [r for r, _ in events(api_client, namespace, "never")]
        return told if told.count("StartupDeadlineExceeded") >= 2 else None

    assert "Reclaimed" not in wait_for("two StartupDeadlineExceeded Events", told_twice)
    lease = store.get(namespace, "never")
    # Noted by the reclaim's own write (its annotations), not by a second status write.
    annotations = lease.body["metadata"]["annotations"]
    assert annotations[names.ANNOTATION_RECLAIM_REASON] == "StartupDeadlineExceeded"
    assert "lastReclaimReason" not in (lease.body.get("status") or {})
    assert lease.body["spec"]["startupDeadlineSeconds"] == 3


def test_a_pod_that_failed_before_renewing_is_retried_after_the_lease(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    # The operator sees the pod only once it has failed (it was down while the
    # pod ran): the attempt never renewed, yet it is over, so the lease's
    # duration bounds it from then on, not startupDeadlineSeconds.
    duration = 2
    create_job(
        api_client,
        namespace,
        "dies",
        "sleep 1; exit 3",
        lease_seconds=duration,
        max_attempts=3,
        startupDeadlineSeconds=120,
    )
    local_pod_runner.wait_for_pid(namespace, "dies-1", timeout=30)
    operator.kill()
    core = client.CoreV1Api(api_client)
    wait_for(
        "the pod Failed",
        lambda: (
            (core.read_namespaced_pod("dies-1", namespace).status or client.V1PodStatus()).phase
            == "Failed"
        ),
        30,
    )
    operator.start()
    restarted_at = time.monotonic()
    wait_for("attempt 2", lambda: (lease_token(store, namespace, "dies") or 0) >= 2, 30)
    waited = time.monotonic() - restarted_at
    assert waited >= duration, f"reclaimed {waited:.2f}s after restart: before the lease ran out"

    def reclaim_told() -> list[str] | None:  # the reclaim's Event, whichever its reason
        told = [r for r, _ in events(api_client, namespace, "dies")]
        return told if {"Reclaimed", "StartupDeadlineExceeded"} & set(told) else None

    assert "StartupDeadlineExceeded" not in wait_for("the reclaim's Event", reclaim_told)
