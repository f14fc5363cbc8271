"""The operator's Kubernetes edge on a real API server: each answer it converts, once.

kube/pods.py tells a pod create's four outcomes apart (created, name taken,
quota used up, refused); kube/objects.py turns the answers a caller acts on
(gone, changed since read, name taken) into values and raises the rest as
leasehold.lease.errors types.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from kubernetes import client

from leasehold import names
from leasehold.controller.kube.events import EventRecorder
from leasehold.controller.kube.objects import CustomObjects, Refused
from leasehold.controller.kube.pods import (
    PodCreated,
    PodNameTaken,
    PodRefused,
    Pods,
    QuotaExceeded,
)
from leasehold.lease.errors import StoreError
from tests.integration.jobs import no_pods_allowed

pytestmark = pytest.mark.cluster


def _pod(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec},
    }


def test_a_pod_create_is_created_taken_or_refused(
    api_client: client.ApiClient, namespace: str
) -> None:
    pods = Pods(api_client, "leasehold-test")
    created = pods.create(namespace, _pod("p-1"))
    assert isinstance(created, PodCreated)
    assert created.pod["metadata"]["uid"]  # the API server's JSON, camelCase
    taken = pods.create(namespace, _pod("p-1"))
    assert isinstance(taken, PodNameTaken)
    assert taken.pod is not None and taken.pod["metadata"]["uid"] == created.pod["metadata"]["uid"]
    refused = pods.create(namespace, _pod("p-2", restartPolicy="Sometimes"))
    assert isinstance(refused, PodRefused)
    assert "restartPolicy" in refused.message
    assert [p["metadata"]["name"] for p in pods.list(namespace, "")] == ["p-1"]
    pods.delete(namespace, "p-1")
    pods.delete(namespace, "p-1")  # gone already: fine
    assert pods.read(namespace, "no-such-pod") is None
    assert pods.namespace_terminating(namespace) is False
    assert pods.namespace_terminating("no-such-namespace") is True


def test_a_pod_refused_by_a_quota_is_told_apart(
    api_client: client.ApiClient, namespace: str
) -> None:
    no_pods_allowed(api_client, namespace)
    refused = Pods(api_client, "leasehold-test").create(namespace, _pod("p-1"))
    assert isinstance(refused, QuotaExceeded), refused
    assert "exceeded quota" in refused.message


def test_custom_objects_answer_gone_and_changed_as_values(
    api_client: client.ApiClient, namespace: str
) -> None:
    jobs = CustomObjects(api_client, names.PLURAL_LEASED_JOBS, "LeasedJob", "leasehold-test")
    assert jobs.read(namespace, "missing") == (None, None)
    body = {
        "apiVersion": names.API_VERSION,
        "kind": "LeasedJob",
        "metadata": {"name": "j", "labels": {"team": "a"}},
        "spec": {"leaseDurationSeconds": 30},
    }
    created = jobs.create(namespace, body)
    assert created is not None
    assert jobs.create(namespace, body) is None  # the name is taken
    read, server_time = jobs.read(namespace, "j")
    assert read is not None and server_time is not None  # the Date header
    assert [j["metadata"]["name"] for j in jobs.list(namespace, "team=a")] == ["j"]
    assert jobs.list(namespace, "team=b") == []
    version = created["metadata"]["resourceVersion"]
    written = jobs.patch_status(
        namespace, "j", {"metadata": {"resourceVersion": version}, "status": {"attempts": 0}}
    )
    assert isinstance(written, dict)
    stale = jobs.patch_status(
        namespace, "j", {"metadata": {"resourceVersion": version}, "status": {"attempts": 1}}
    )
    assert stale is Refused.CONFLICT
    assert jobs.patch_status(namespace, "missing", {"status": {}}) is Refused.GONE
    assert jobs.delete(namespace, "j", uid="not-its-uid") is False  # another incarnation
    assert jobs.delete(namespace, "j", uid=created["metadata"]["uid"]) is True
    assert jobs.delete(namespace, "j") is False  # gone


def test_other_refusals_are_raised_as_store_errors(
    api_client: client.ApiClient, namespace: str
) -> None:
    bad = CustomObjects(api_client, "nosuchresources", "Nothing", "leasehold-test")
    with pytest.raises(StoreError) as raised:
        bad.list(namespace, "")
    assert raised.value.status == 404


def test_events_are_posted_off_the_caller_each_objects_in_order(
    api_client: client.ApiClient, namespace: str
) -> None:
    """kube/events.py: one object's Events reach the API in the order recorded (by revision)."""
    recorder = EventRecorder(api_client, component="test", instance="test", clock=datetime.now)
    objs = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n, "namespace": namespace}}
        for n in ("a", "b", "c")
    ]
    for i in range(12):
        for obj in objs:
            recorder.record(obj, "Normal", "Tested", f"event {i}")
    assert recorder.flush(timeout_seconds=60)
    for name in ("a", "b", "c"):
        found = (
            client.CoreV1Api(api_client)
            .list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}")
            .items
        )
        found.sort(key=lambda e: int(e.metadata.resource_version or 0))  # etcd revision order
        assert [e.message for e in found] == [f"event {i}" for i in range(12)]
    assert recorder.close(timeout_seconds=10)
