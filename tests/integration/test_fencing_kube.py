"""Fencing Kubernetes objects with the ValidatingAdmissionPolicy, on a real API server.

The policy from ``deploy/fencing/`` is applied to the cluster; a worker's
PATCH is held on the wire by a :class:`TcpProxy` between its client and the
API server (TLS passes through the proxy untouched); tokens come from real
claims on a JobLease.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from faultproxy import TcpProxy
from leasehold import names
from leasehold.controller.engines.expiry import ExpiryClock
from leasehold.fencing.kube import annotate, fenced_patch, opt_in, token_of
from leasehold.lease.store import Accepted, LeaseStore
from leasehold.names import ANNOTATION_TOKEN
from localcluster.kubectl import Kubectl
from tests.integration.leases import claim_ok, wait_expired

REPO = Path(__file__).resolve().parents[2]
POLICY = REPO / "deploy" / "fencing" / "validatingadmissionpolicy.yaml"
POLICY_NAME = "leasehold-fencing-token"
MERGE_PATCH = "application/merge-patch+json"
DENIED = f"ValidatingAdmissionPolicy '{POLICY_NAME}'"


def _core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


def _patch(api: client.ApiClient, namespace: str, name: str, body: dict[str, Any]) -> Any:
    return _core(api).patch_namespaced_config_map(
        name, namespace, body, _content_type=MERGE_PATCH, _request_timeout=30
    )


def _config_map(
    name: str, data: dict[str, str], token: int | None = None, fenced: bool = True
) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
    body["data"] = data
    if fenced:
        opt_in(body)
    if token is not None:
        annotate(body, token)
    return body


def _denial(exc: ApiException) -> str:
    message = str(json.loads(exc.body or "{}").get("message", ""))
    assert exc.status == 403, (exc.status, message)
    assert DENIED in message, message
    return message


@pytest.fixture(scope="session")
def fencing_policy(kubectl: Kubectl, crds_installed: Path) -> Iterator[str]:
    """The policy and binding from deploy/fencing/, applied and active."""
    existed = kubectl(
        "get", "validatingadmissionpolicybinding", POLICY_NAME, "--ignore-not-found", "-o", "name"
    ).stdout.strip()
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(POLICY))
    probe_ns = f"fencing-probe-{int(time.time() * 1000) % 10**8}"
    kubectl("create", "namespace", probe_ns)
    try:
        kubectl("create", "-n", probe_ns, "-f", "-", input=json.dumps(_config_map("probe", {})))
        # A binding takes a moment to be enforced: retry a known-bad update.
        deadline = time.monotonic() + 30
        while True:
            bad = kubectl(
                "patch", "configmap", "probe", "-n", probe_ns, "--type=merge",
                "-p", '{"data": {"probe": "' + str(time.monotonic()) + '"}}',
                check=False,
            )  # fmt: skip
            if bad.returncode != 0 and POLICY_NAME in bad.stderr:
                break
            if time.monotonic() > deadline:
                pytest.fail(f"the fencing policy never became active: {bad.stdout}{bad.stderr}")
            time.sleep(0.2)
    finally:
        kubectl("delete", "namespace", probe_ns, "--wait=false", check=False)
    yield POLICY_NAME
    if not existed:
        kubectl("delete", "-f", str(POLICY), "--ignore-not-found", check=False)


def _proxied_client(kubeconfig: Path, proxy: TcpProxy) -> client.ApiClient:
    """A client whose requests go through ``proxy``; TLS still verifies the API server."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    server = urlsplit(configuration.host)
    assert server.hostname is not None
    try:
        ipaddress.ip_address(server.hostname)
    except ValueError:  # a DNS name (e.g. kind): keep it as the TLS server name
        configuration.tls_server_name = configuration.tls_server_name or server.hostname
    configuration.host = f"https://{proxy.url_host}"
    return client.ApiClient(configuration)


def _api_server(kubeconfig: Path) -> tuple[str, int]:
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    server = urlsplit(configuration.host)
    assert server.hostname is not None and server.port is not None
    return server.hostname, server.port


def test_worked_example_a_delayed_patch_arrives_after_b_and_is_denied(
    fencing_policy: str,
    store: LeaseStore,
    api_client: client.ApiClient,
    crds_installed: Path,
    namespace: str,
) -> None:
    """A (token 7) patches; the network holds it; B (token 8) patches; A's patch is denied."""
    store.create(
        namespace, "job", job_name="job", lease_duration_seconds=1, initial_fencing_token=6
    )
    _core(api_client).create_namespaced_config_map(
        namespace, cast(Any, _config_map("report", {"result": "none yet"}, token=6))
    )
    token_a = claim_ok(store, namespace, "job", "worker-a")
    assert token_a == 7
    with (
        TcpProxy(*_api_server(crds_installed)) as proxy,
        contextlib.closing(_proxied_client(crds_installed, proxy)) as api_a,
    ):
        try:
            _core(api_a).read_namespaced_config_map("report", namespace)  # TLS connection open
            proxy.hold()
            outcome: list[Any] = []

            def send_a() -> None:
                try:
                    outcome.append(
                        _patch(
                            api_a,
                            namespace,
                            "report",
                            fenced_patch(token_a, {"data": {"result": "written by A"}}),
                        )
                    )
                except ApiException as exc:
                    outcome.append(exc)

            sender = threading.Thread(target=send_a)
            sender.start()
            expiry = ExpiryClock(margin_seconds=0.5, monotonic=time.monotonic)
            judged = wait_expired(store, expiry, namespace, "job", timeout=10)
            assert isinstance(store.reclaim(judged), Accepted)
            token_b = claim_ok(store, namespace, "job", "worker-b")
            assert token_b == 8
            _patch(
                api_client,
                namespace,
                "report",
                fenced_patch(token_b, {"data": {"result": "written by B"}}),
            )
            assert sender.is_alive(), "A's patch was not held by the proxy"
            proxy.release()
            sender.join(timeout=30)
        finally:
            proxy.release()
    assert len(outcome) == 1, "A's patch got no answer"
    assert isinstance(outcome[0], ApiException), f"A's stale patch was accepted: {outcome[0]}"
    message = _denial(outcome[0])
    assert f"{ANNOTATION_TOKEN} 7 is lower than the stored token 8" in message, message
    stored = _core(api_client).read_namespaced_config_map("report", namespace).to_dict()
    assert stored["data"] == {"result": "written by B"}
    assert token_of(stored) == 8


def test_missing_malformed_or_lower_token_is_denied(
    fencing_policy: str, api_client: client.ApiClient, namespace: str
) -> None:
    core = _core(api_client)
    core.create_namespaced_config_map(namespace, cast(Any, _config_map("cm", {"v": "0"}, 3)))
    # Replaced without the annotation (PUT of a body that lacks it).
    with pytest.raises(ApiException) as missing:
        core.replace_namespaced_config_map(
            "cm", namespace, cast(Any, _config_map("cm", {"v": "replaced"}))
        )
    assert "annotation is missing" in _denial(missing.value)
    assert "(stored token: 3)" in _denial(missing.value)
    # Annotation removed by a merge patch.
    with pytest.raises(ApiException) as removed:
        _patch(api_client, namespace, "cm", {"metadata": {"annotations": {ANNOTATION_TOKEN: None}}})
    assert f"the {ANNOTATION_TOKEN} annotation is missing" in _denial(removed.value)
    for bad in ("seven", "-4", "4.0", " 4"):
        with pytest.raises(ApiException) as malformed:
            _patch(
                api_client, namespace, "cm", {"metadata": {"annotations": {ANNOTATION_TOKEN: bad}}}
            )
        assert "must be a non-negative integer" in _denial(malformed.value), bad
    with pytest.raises(ApiException) as lower:
        _patch(api_client, namespace, "cm", fenced_patch(2, {"data": {"v": "2"}}))
    assert f"{ANNOTATION_TOKEN} 2 is lower than the stored token 3" in _denial(lower.value)
    # Dropping the opt-in label in the same write does not escape the check.
    with pytest.raises(ApiException) as unlabel:
        _patch(
            api_client,
            namespace,
            "cm",
            fenced_patch(2, {"metadata": {"labels": {"leasehold.dev/fenced": None}}}),
        )
    _denial(unlabel.value)
    # Equal (same holder again) and higher tokens pass.
    _patch(api_client, namespace, "cm", fenced_patch(3, {"data": {"v": "3"}}))
    _patch(api_client, namespace, "cm", fenced_patch(4, {"data": {"v": "4"}}))
    stored = core.read_namespaced_config_map("cm", namespace).to_dict()
    assert stored["data"] == {"v": "4"} and token_of(stored) == 4


def test_objects_without_the_label_are_not_fenced(
    fencing_policy: str, api_client: client.ApiClient, namespace: str
) -> None:
    core = _core(api_client)
    core.create_namespaced_config_map(
        namespace, cast(Any, _config_map("plain", {"v": "0"}, token=8, fenced=False))
    )
    _patch(api_client, namespace, "plain", fenced_patch(7, {"data": {"v": "lower"}}))
    core.replace_namespaced_config_map(
        "plain", namespace, cast(Any, _config_map("plain", {"v": "no token"}, fenced=False))
    )
    stored = core.read_namespaced_config_map("plain", namespace).to_dict()
    assert stored["data"] == {"v": "no token"} and token_of(stored) is None


def test_custom_resources_are_fenced_too(
    fencing_policy: str, api_client: client.ApiClient, namespace: str
) -> None:
    custom = client.CustomObjectsApi(api_client)
    body = opt_in(
        annotate(
            {
                "apiVersion": f"{names.GROUP}/{names.VERSION}",
                "kind": "LeasedJob",
                "metadata": {"name": "pulled"},
                "spec": {"activeDeadlineSeconds": 30},
            },
            5,
        )
    )
    custom.create_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, "leasedjobs", body
    )

    def patch(token: int, seconds: int) -> Any:
        return custom.patch_namespaced_custom_object(
            names.GROUP,
            names.VERSION,
            namespace,
            "leasedjobs",
            "pulled",
            fenced_patch(token, {"spec": {"activeDeadlineSeconds": seconds}}),
            _content_type=MERGE_PATCH,
        )

    with pytest.raises(ApiException) as stale:
        patch(4, 10)
    assert f"{ANNOTATION_TOKEN} 4 is lower than the stored token 5" in _denial(stale.value)
    patch(6, 20)
    stored = cast(
        "dict[str, Any]",
        custom.get_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, "leasedjobs", "pulled"
        ),
    )
    assert stored["spec"]["activeDeadlineSeconds"] == 20 and token_of(stored) == 6


def test_tokens_of_another_fencing_domain_are_refused_not_compared(
    fencing_policy: str, api_client: client.ApiClient, namespace: str
) -> None:
    # Issue 27, case 13: two indexes of an Indexed job are two fencing domains
    # (two JobLeases); index 1's token 2 said nothing about index 0's token 5,
    # yet was compared with it (and a higher one would have fenced index 0 off).
    core = _core(api_client)
    body = annotate(_config_map("shared", {"v": "0"}), 5, domain="etl.0")
    core.create_namespaced_config_map(namespace, cast(Any, body))
    for token in (2, 9):
        with pytest.raises(ApiException) as other:
            _patch(
                api_client, namespace, "shared", fenced_patch(token, {"data": {"v": "i1"}}, "etl.1")
            )
        message = _denial(other.value)
        assert "fencing domain mismatch" in message and "etl.0" in message, message
    # Its own domain: compared as before; a patch that names no domain keeps the stored one.
    _patch(api_client, namespace, "shared", fenced_patch(5, {"data": {"v": "i0"}}, "etl.0"))
    _patch(api_client, namespace, "shared", fenced_patch(6, {"data": {"v": "i0 again"}}))
    with pytest.raises(ApiException) as stale:
        _patch(api_client, namespace, "shared", fenced_patch(4, {"data": {"v": "late"}}, "etl.0"))
    assert "is lower than the stored token 6" in _denial(stale.value)
    # An object written before domains existed takes the first domain named.
    core.create_namespaced_config_map(namespace, cast(Any, _config_map("old", {}, token=3)))
    _patch(api_client, namespace, "old", fenced_patch(3, {"data": {"v": "x"}}, "etl.0"))
    stored = core.read_namespaced_config_map("old", namespace).to_dict()
    assert stored["metadata"]["annotations"]["leasehold.dev/fencing-domain"] == "etl.0"
