"""LeasedJob helpers shared by the operator's integration tests: create, read, wait."""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, TypeVar, cast

from kubernetes import client

from leasehold import names
from leasehold.lease.errors import LeaseNotFoundError
from leasehold.lease.store import LeaseStore

G, V = names.GROUP, names.VERSION
T = TypeVar("T")
NO_BACKOFF = {"initialDelaySeconds": 0, "maxDelaySeconds": 0}
"""``spec.backoff`` for tests that time the attempt after a reclaim: no delay."""


def wait_for(what: str, check: Callable[[], T | None], timeout: float = 30.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def no_pods_allowed(api_client: client.ApiClient, namespace: str) -> client.CoreV1Api:
    """A ResourceQuota of 0 pods in ``namespace``, once the quota controller counts it.

    Returns:
        The core/v1 API (to lift or read the quota later).
    """
    core = client.CoreV1Api(api_client)
    quota = {"metadata": {"name": "no-pods"}, "spec": {"hard": {"pods": "0"}}}
    core.create_namespaced_resource_quota(namespace, cast(Any, quota))

    def quota_counted() -> bool:
        st = core.read_namespaced_resource_quota("no-pods", namespace).status
        return st is not None and (st.hard or {}).get("pods") == "0"

    wait_for("the quota controller to count pods", quota_counted, 30)
    return core


def create_job(
    api: client.ApiClient,
    namespace: str,
    name: str,
    command: str | None,
    *,
    lease_seconds: int = 3,
    max_attempts: int = 3,
    labels: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    pod_spec: dict[str, Any] | None = None,
    **spec: Any,
) -> None:
    """Create a LeasedJob running ``command`` (``None``: pull mode).

    ``labels`` go on the job; ``requests`` are its container's resource
    requests (what Kueue admits on); ``pod_spec`` adds fields to the pod
    template's spec (e.g. ``terminationGracePeriodSeconds``).
    """
    body: dict[str, Any] = {
        "apiVersion": names.API_VERSION,
        "kind": "LeasedJob",
        "metadata": {"name": name, **({"labels": labels} if labels else {})},
        "spec": {"leaseDurationSeconds": lease_seconds, "maxAttempts": max_attempts, **spec},
    }
    if command is not None:
        container: dict[str, Any] = {
            "name": "worker",
            "image": "local",
            "command": ["sh", "-c", command],
        }
        if requests:
            container["resources"] = {"requests": requests}
        body["spec"]["template"] = {"spec": {"containers": [container], **(pod_spec or {})}}
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        G, V, namespace, "leasedjobs", body
    )


def get_job(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    body: Any = client.CustomObjectsApi(api).get_namespaced_custom_object(
        G, V, namespace, "leasedjobs", name
    )
    return dict(body)


def status(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return dict(get_job(api, namespace, name).get("status") or {})


def phase_is(api: client.ApiClient, namespace: str, name: str, phase: str) -> Callable[[], bool]:
    return lambda: status(api, namespace, name).get("phase") == phase


def condition(st: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in st.get("conditions", []) if c["type"] == type_)


def transition_time(cond: dict[str, Any]) -> datetime:
    """A condition's ``lastTransitionTime`` (second resolution, UTC)."""
    return datetime.fromisoformat(str(cond["lastTransitionTime"]).replace("Z", "+00:00"))


def condition_true(api: client.ApiClient, namespace: str, name: str, type_: str) -> bool:
    """The job's condition ``type_`` is True.

    For batch/v1's interim ``SuccessCriteriaMet``/``FailureTarget``: the job is
    decided; ``Complete``/``Failed`` and the final phase follow once no pod of
    the job is left running (a frozen stale pod keeps them waiting until it
    terminates).
    """
    conditions = status(api, namespace, name).get("conditions", [])
    return any(c["type"] == type_ and c["status"] == "True" for c in conditions)


def events(
    api: client.ApiClient,
    namespace: str,
    name: str,
    *,
    until: Iterable[str] = (),
    kind: str = "LeasedJob",
    timeout: float = 30.0,
) -> list[tuple[str, str]]:
    """The Events about the object: ``(reason, message)`` each.

    The operator posts Events from threads of its own, off its reconcile, so
    an Event comes a moment after the status write it goes with. ``until``:
    reasons to wait for (each at least once) before answering. An object's
    Events are posted in order, so every Event the operator recorded about it
    before the last of those is in the answer too (an absence checked after
    ``until`` is an absence).
    """
    wanted = set(until)

    def listed() -> list[tuple[str, str]] | None:
        items = (
            client.CoreV1Api(api)
            .list_namespaced_event(
                namespace, field_selector=f"involvedObject.name={name},involvedObject.kind={kind}"
            )
            .items
        )
        found = [(e.reason or "", e.message or "") for e in items]
        return found if wanted <= {r for r, _ in found} else None

    if not wanted:
        return listed() or []
    return wait_for(f"Events {sorted(wanted)} on {kind} {name}", listed, timeout)


def end_reason(api: client.ApiClient, namespace: str, name: str) -> str:
    """The reason of the job's end (its ``Complete`` or ``Failed`` condition that is True).

    The Event of a job's end has this reason: waiting for it (``events(...,
    until=[end_reason(...)])``) makes every Event recorded before the end visible.
    """
    conditions = status(api, namespace, name).get("conditions", [])
    return next(
        str(c["reason"])
        for c in conditions
        if c["type"] in ("Complete", "Failed") and c["status"] == "True"
    )


def pod_gone_or_going(api: client.ApiClient, namespace: str, pod: str) -> bool:
    """The pod is deleted, or being deleted (it has a deletion timestamp)."""
    try:
        found: Any = client.CoreV1Api(api).read_namespaced_pod(pod, namespace)
    except client.ApiException as exc:
        return bool(exc.status == 404)
    return bool(found.metadata.deletion_timestamp is not None)


def renewed(store: LeaseStore, namespace: str, name: str) -> bool:
    """The lease's holder renewed since its claim (a claim writes both stamps the same).

    Wait for it before freezing a worker whose reclaim a test times: an
    attempt that never renewed gets the start grace (one lease duration more
    from its pod running), not the lease duration.
    """
    try:
        record = store.get(namespace, name).record
    except LeaseNotFoundError:
        return False  # not created yet (a job's first lease comes after its pod)
    return record.renew_time is not None and record.renew_time != record.acquire_time


def lease_holder(store: LeaseStore, namespace: str, name: str) -> tuple[str | None, int]:
    record = store.get(namespace, name).record
    return record.holder_identity, record.fencing_token


def run(seconds: float) -> str:
    script = f"echo token $LEASEHOLD_FENCING_TOKEN; sleep {seconds}"
    return f"leasehold run -- sh -c {shlex.quote(script)}"


def patch_spec(api: client.ApiClient, namespace: str, name: str, spec: dict[str, Any]) -> None:
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        G, V, namespace, names.PLURAL_LEASED_JOBS, name, {"spec": spec}
    )
