"""Tests of the control plane itself, before any operator code runs on it.

They check what the operator's tests will lean on: every readiness check of
the API server passes, the controller manager's controllers work
(deployment -> replicaset -> pod, garbage collection, service accounts and
their root CA), the scheduler acts on pods, service-account tokens
authenticate and RBAC is enforced, and ValidatingAdmissionPolicy is on.
They pass against any cluster from ``LEASEHOLD_TEST_KUBECONFIG`` as well.
"""

from __future__ import annotations

import json
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import client, config

from localcluster import ComponentError, Kubectl, LocalCluster

T = TypeVar("T")


def eventually(check: Callable[[], T | None], what: str, timeout: float = 60.0) -> T:
    """Poll ``check`` until it returns something other than None."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result is not None:
            return result
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.25)


def apply(kubectl: Kubectl, namespace: str, *objects: dict[str, Any]) -> None:
    manifest = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(manifest))


def items(kubectl: Kubectl, namespace: str, kind: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = kubectl.json("get", kind, "-n", namespace)["items"]
    return found


def owned_by(obj: dict[str, Any], owner: dict[str, Any]) -> bool:
    references = obj["metadata"].get("ownerReferences", [])
    return any(ref["uid"] == owner["metadata"]["uid"] for ref in references)


@pytest.mark.cluster
def test_every_readyz_check_passes(kubectl: Kubectl) -> None:
    body = kubectl("get", "--raw", "/readyz?verbose").stdout
    checks = [line for line in body.splitlines() if line.startswith("[")]
    assert len(checks) > 10, body
    assert [line for line in checks if not line.startswith("[+]")] == []
    assert "readyz check passed" in body


@pytest.mark.cluster
def test_deployment_makes_replicaset_and_scheduled_pod(kubectl: Kubectl, namespace: str) -> None:
    labels = {"app": "sleeper"}
    apply(
        kubectl,
        namespace,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "sleeper"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
                },
            },
        },
    )
    deployment = kubectl.json("get", "deployment/sleeper", "-n", namespace)

    def replicaset() -> dict[str, Any] | None:
        found = [rs for rs in items(kubectl, namespace, "replicasets") if owned_by(rs, deployment)]
        return found[0] if found else None

    rs = eventually(replicaset, "a ReplicaSet owned by the Deployment")

    def pod_with_scheduling_verdict() -> dict[str, Any] | None:
        for pod in items(kubectl, namespace, "pods"):
            conditions = {c["type"] for c in pod.get("status", {}).get("conditions", [])}
            if owned_by(pod, rs) and "PodScheduled" in conditions:
                return pod
        return None

    pod = eventually(
        pod_with_scheduling_verdict, "a Pod owned by the ReplicaSet, seen by the scheduler"
    )
    scheduled = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    nodes = kubectl.json("get", "nodes")["items"]
    if not nodes:  # the local control plane has no kubelet, hence no node
        assert pod["status"]["phase"] == "Pending"
        assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")


@pytest.mark.cluster
def test_deleting_owner_garbage_collects_dependent(kubectl: Kubectl, namespace: str) -> None:
    apply(
        kubectl, namespace, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}}
    )
    owner = kubectl.json("get", "configmap/owner", "-n", namespace)
    reference = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner["metadata"]["uid"],
    }
    apply(
        kubectl,
        namespace,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "dependent", "ownerReferences": [reference]},
        },
    )
    kubectl("delete", "configmap/owner", "-n", namespace, "--cascade=background")

    def dependent_gone() -> bool | None:
        names = {cm["metadata"]["name"] for cm in items(kubectl, namespace, "configmaps")}
        return True if "dependent" not in names else None

    eventually(dependent_gone, "the garbage collector to delete the dependent ConfigMap")


@pytest.mark.cluster
def test_namespace_gets_root_ca_configmap(kubectl: Kubectl, namespace: str) -> None:
    def root_ca() -> str | None:
        for cm in items(kubectl, namespace, "configmaps"):
            if cm["metadata"]["name"] == "kube-root-ca.crt":
                data: str = cm["data"]["ca.crt"]
                return data
        return None

    assert "BEGIN CERTIFICATE" in eventually(root_ca, "the kube-root-ca.crt ConfigMap")


@pytest.mark.cluster
def test_service_account_token_authenticates_and_rbac_applies(
    kubeconfig: Path, kubectl: Kubectl, namespace: str
) -> None:
    kubectl("create", "serviceaccount", "robot", "-n", namespace)
    token = kubectl("create", "token", "robot", "-n", namespace, "--duration=10m").stdout.strip()

    admin = client.Configuration()
    # The loader has no annotations; it fills in the server URL and the CA file.
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=admin)
    as_robot = client.Configuration(host=admin.host)
    as_robot.ssl_ca_cert = admin.ssl_ca_cert
    as_robot.api_key = {"BearerToken": token}
    as_robot.api_key_prefix = {"BearerToken": "Bearer"}
    with client.ApiClient(as_robot) as api:
        review = client.AuthenticationV1Api(api).create_self_subject_review(
            body=client.V1SelfSubjectReview()
        )
        assert review.status is not None and review.status.user_info is not None
        assert review.status.user_info.username == f"system:serviceaccount:{namespace}:robot"
        assert "system:serviceaccounts" in (review.status.user_info.groups or [])

        with pytest.raises(client.ApiException) as denied:
            client.CoreV1Api(api).list_namespaced_secret(namespace)
        assert denied.value.status == 403


@pytest.mark.cluster
def test_validating_admission_policy_is_enforced(kubectl: Kubectl, namespace: str) -> None:
    policy = f"deny-forbidden-{namespace}"[:63]
    apply(
        kubectl,
        namespace,
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": policy},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["configmaps"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": "!has(object.data) || !('forbidden' in object.data)",
                        "message": "forbidden key",
                    }
                ],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": policy},
            "spec": {
                "policyName": policy,
                "validationActions": ["Deny"],
                "matchResources": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
                },
            },
        },
    )
    try:
        attempt = 0

        def denied() -> str | None:
            nonlocal attempt
            attempt += 1
            result = kubectl(
                "create",
                "configmap",
                f"probe-{attempt}",
                "-n",
                namespace,
                "--from-literal=forbidden=1",
                check=False,
            )
            return result.stderr if result.returncode != 0 else None

        assert "forbidden key" in eventually(denied, "the policy to deny a ConfigMap")
    finally:
        for kind in ("validatingadmissionpolicybinding", "validatingadmissionpolicy"):
            kubectl("delete", kind, policy, "--ignore-not-found", check=False)


def test_failed_component_is_named_with_its_log(tmp_path: Path) -> None:
    """A start failure says which component failed and shows its log (no real binaries)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\necho '{name}: cannot start, flags were' \"$@\"\nexit 3\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    cluster = LocalCluster(tmp_path / "cluster", bin_dir, timeout=10)

    with pytest.raises(ComponentError) as failure:
        cluster.start()

    assert failure.value.component == "etcd"
    assert "exited with code 3" in str(failure.value)
    assert "etcd: cannot start, flags were --name=leasehold" in str(failure.value)
    assert not (tmp_path / "cluster" / "state.json").exists()
    assert (tmp_path / "cluster" / "logs" / "etcd.log").exists()


def test_restart_of_the_apiserver_and_etcd(tmp_path: Path) -> None:
    """A restarted component comes back healthy and keeps the data (fault injection)."""
    with LocalCluster(tmp_path / "c") as cluster:
        api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        core = client.CoreV1Api(api)
        core.create_namespaced_config_map(
            "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="kept"))
        )
        cluster.restart("etcd", down_seconds=0.5)
        cluster.restart("kube-apiserver")
        assert core.read_namespaced_config_map("kept", "default").metadata is not None
        api.close()
