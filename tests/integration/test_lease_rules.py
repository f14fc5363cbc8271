"""The API server itself enforces the lease invariants (CEL transition rules).

These writes bypass the store on purpose: they are what a buggy or hostile
client could send. Each must be rejected by the real API server with the
rule's message.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from leasehold import names

G, V = names.GROUP, names.VERSION


def _create_lease(api: client.ApiClient, ns: str, spec: dict[str, Any]) -> None:
    body = {
        "apiVersion": names.API_VERSION,
        "kind": "JobLease",
        "metadata": {"name": "l"},
        "spec": {"jobName": "job", **spec},
    }
    client.CustomObjectsApi(api).create_namespaced_custom_object(G, V, ns, "jobleases", body)


def _merge(api: client.ApiClient, ns: str, spec: dict[str, Any]) -> None:
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        G, V, ns, "jobleases", "l", {"spec": spec}
    )


def _rejection(call: Any) -> str:
    with pytest.raises(ApiException) as info:
        call()
    assert info.value.status == 422, info.value.body
    message: str = json.loads(info.value.body or "{}")["message"]
    return message


HELD_7 = {"holderIdentity": "pod-a", "fencingToken": 7}
CLAIMED_7 = {**HELD_7, "acquireTime": "2026-11-30T06:00:00.000000Z"}
"""Held since a claim that stamped its time (``LeaseStore.claim``)."""
CLOSED_7 = {"fencingToken": 7, "maxFencingToken": 7, "ceilingFencingToken": 7}
"""A schedule's run closed at token 7 (``LeaseStore.close``)."""


@pytest.mark.parametrize(
    ("start", "change", "expected"),
    [
        pytest.param(
            HELD_7,
            {"fencingToken": 6},
            "spec.fencingToken may only stay the same or go up by exactly one",
            id="token-goes-down",
        ),
        pytest.param(
            {"fencingToken": 7},
            {"fencingToken": 9, "holderIdentity": "pod-b"},
            "spec.fencingToken may only stay the same or go up by exactly one",
            id="token-jumps",
        ),
        pytest.param(
            HELD_7,
            {"holderIdentity": "pod-b"},
            "spec.holderIdentity may change without a fencing token bump only when",
            id="holder-change-without-bump",
        ),
        pytest.param(
            HELD_7,
            {"holderIdentity": "pod-b", "fencingToken": 8},
            "only an unheld lease can be claimed",
            id="claim-of-held-lease",
        ),
        pytest.param(
            {"fencingToken": 7},
            {"fencingToken": 8},
            "only an unheld lease can be claimed, and the claim must set spec.holderIdentity",
            id="bump-without-holder",
        ),
        pytest.param(
            HELD_7,
            {"completion": {"fencingToken": 6, "holderIdentity": "pod-a", "outcome": "Succeeded"}},
            "spec.completion must be recorded by the current holder under the current fencing",
            id="completion-with-stale-token",
        ),
        pytest.param(
            HELD_7,
            {"completion": {"fencingToken": 7, "holderIdentity": "pod-b", "outcome": "Succeeded"}},
            "spec.completion must be recorded by the current holder under the current fencing",
            id="completion-by-non-holder",
        ),
        pytest.param(
            {
                "fencingToken": 7,
                "completion": {"fencingToken": 7, "holderIdentity": "pod-a", "outcome": "Failed"},
            },
            {"completion": {"fencingToken": 7, "holderIdentity": "pod-a", "outcome": "Succeeded"}},
            "spec.completion is recorded once and can never change",
            id="completion-rewritten",
        ),
        pytest.param(
            {
                "fencingToken": 7,
                "completion": {"fencingToken": 7, "holderIdentity": "pod-a", "outcome": "Failed"},
            },
            {"completion": None},
            "spec.completion is recorded once and can never change",
            id="completion-removed",
        ),
        pytest.param(
            {
                "fencingToken": 7,
                "completion": {"fencingToken": 7, "holderIdentity": "pod-a", "outcome": "Failed"},
            },
            {"holderIdentity": "pod-b", "fencingToken": 8},
            "a completed lease can never be claimed or held again",
            id="claim-after-completion",
        ),
        pytest.param(
            HELD_7,
            {"jobName": "other"},
            "spec.jobName is immutable",
            id="job-name-changed",
        ),
        pytest.param(
            HELD_7,
            {"leaseDurationSeconds": 3600},
            "spec.leaseDurationSeconds is immutable",
            id="holder-lengthens-its-lease",
        ),
        pytest.param(
            {"fencingToken": 7, "maxFencingToken": 7},
            {"holderIdentity": "pod-b", "fencingToken": 8, "maxFencingToken": 50},
            "can only be lowered, never raised or removed",
            id="claim-raising-the-attempt-limit",
        ),
        pytest.param(
            {"fencingToken": 7, "maxFencingToken": 7},
            {"maxFencingToken": None},
            "can only be lowered, never raised or removed",
            id="attempt-limit-removed",
        ),
        pytest.param(
            HELD_7,
            {"completion": {"fencingToken": 7, "holderIdentity": "pod-a", "outcome": "Succeeded"}},
            "a completed lease is unheld",
            id="completion-left-held",
        ),
        pytest.param(
            CLAIMED_7,
            {"acquireTime": None},
            "spec.acquireTime is set by a claim only",
            id="holder-removes-acquire-time",
        ),
        pytest.param(
            CLAIMED_7,
            {"acquireTime": "2026-11-30T05:00:00.000000Z"},
            "spec.acquireTime is set by a claim only",
            id="holder-rewrites-acquire-time",
        ),
        pytest.param(
            {"fencingToken": 7},
            {"holderIdentity": "pod-b", "fencingToken": 8},
            "spec.acquireTime is set by a claim only",
            id="claim-without-acquire-time",
        ),
        pytest.param(
            CLOSED_7,
            {"ceilingFencingToken": 9},
            "spec.ceilingFencingToken can only be lowered, never raised or removed",
            id="ceiling-raised",
        ),
        pytest.param(
            CLOSED_7,
            {"ceilingFencingToken": None},
            "spec.ceilingFencingToken can only be lowered, never raised or removed",
            id="ceiling-removed",
        ),
        pytest.param(
            CLOSED_7,
            {"uncountedAttempts": 1, "lastUncountedToken": 7, "maxFencingToken": 8},
            "spec.maxFencingToken cannot pass spec.ceilingFencingToken",
            id="excuse-of-a-closed-lease",
        ),
        pytest.param(
            {**CLOSED_7, "jobUID": "aaaa-1"},
            {"jobUID": "bbbb-2", "baseFencingToken": 7, "maxFencingToken": 10},
            "spec.maxFencingToken cannot pass spec.ceilingFencingToken",
            id="take-over-of-a-closed-lease",
        ),
        pytest.param(
            {**CLOSED_7, "jobUID": "aaaa-1"},
            {"jobUID": "bbbb-2", "baseFencingToken": 7, "ceilingFencingToken": 10},
            "spec.ceilingFencingToken can only be lowered, never raised or removed",
            id="take-over-raising-the-ceiling",
        ),
    ],
)
def test_api_server_rejects_invariant_breaking_writes(
    api_client: client.ApiClient,
    namespace: str,
    start: dict[str, Any],
    change: dict[str, Any],
    expected: str,
) -> None:
    _create_lease(api_client, namespace, start)
    message = _rejection(lambda: _merge(api_client, namespace, change))
    assert expected in message
    # Nothing changed.
    body: Any = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        G, V, namespace, "jobleases", "l"
    )
    assert body["spec"]["fencingToken"] == start["fencingToken"]
    assert body["spec"].get("holderIdentity") == start.get("holderIdentity")


@pytest.mark.parametrize(
    ("start", "change"),
    [
        pytest.param(HELD_7, {"renewTime": "2026-11-30T06:00:00.000000Z"}, id="renew"),
        pytest.param(HELD_7, {"holderIdentity": None}, id="release"),
        pytest.param(
            {"fencingToken": 7},
            {
                "holderIdentity": "pod-b",
                "fencingToken": 8,
                "acquireTime": "2026-11-30T06:00:00.000000Z",
            },
            id="claim",
        ),
        pytest.param(
            {**CLAIMED_7, "holderIdentity": None},
            {
                "holderIdentity": "pod-b",
                "fencingToken": 8,
                "acquireTime": "2026-11-30T07:00:00.000000Z",
            },
            id="claim-restamps-acquire-time",
        ),
        pytest.param(CLAIMED_7, {"renewTime": "2026-11-30T06:00:01.000000Z"}, id="renew-claimed"),
        pytest.param(
            {"fencingToken": 7, "maxFencingToken": 7, "ceilingFencingToken": 9},
            {"uncountedAttempts": 1, "lastUncountedToken": 7, "maxFencingToken": 8},
            id="excuse-below-the-ceiling",
        ),
        pytest.param(
            {**HELD_7, "maxFencingToken": 9, "ceilingFencingToken": 12},
            {"maxFencingToken": 7, "ceilingFencingToken": 7},
            id="close",
        ),
        pytest.param(
            HELD_7,
            {
                "holderIdentity": None,
                "completion": {
                    "fencingToken": 7,
                    "holderIdentity": "pod-a",
                    "outcome": "Succeeded",
                },
            },
            id="complete",
        ),
    ],
)
def test_api_server_accepts_protocol_writes(
    api_client: client.ApiClient, namespace: str, start: dict[str, Any], change: dict[str, Any]
) -> None:
    _create_lease(api_client, namespace, start)
    _merge(api_client, namespace, change)


@pytest.mark.parametrize(
    ("kind", "plural", "spec", "field"),
    [
        ("LeasedJob", "leasedjobs", {"leaseDurationSeconds": 0}, "spec.leaseDurationSeconds"),
        ("LeasedJob", "leasedjobs", {"leaseDurationSeconds": 86400}, "spec.leaseDurationSeconds"),
        ("LeasedJob", "leasedjobs", {"maxAttempts": 0}, "spec.maxAttempts"),
        ("LeasedJob", "leasedjobs", {"activeDeadlineSeconds": -5}, "spec.activeDeadlineSeconds"),
        (
            "LeasedJob",
            "leasedjobs",
            {"template": {"spec": {"containers": []}}},
            "spec.template.spec.containers",
        ),
        (
            "LeasedJob",
            "leasedjobs",
            {"template": {"spec": {"containers": [{"name": "w"}]}}},
            "spec.template.spec.containers[0].image",
        ),
        ("LeasedJob", "leasedjobs", {"leaseDurationSeconds": "ten"}, "spec.leaseDurationSeconds"),
        ("JobLease", "jobleases", {"jobName": "Bad_Name"}, "spec.jobName"),
        ("JobLease", "jobleases", {"jobName": "j", "fencingToken": -1}, "spec.fencingToken"),
        (
            "JobLease",
            "jobleases",
            {"jobName": "j", "holderIdentity": "has space", "fencingToken": 1},
            "spec.holderIdentity",
        ),
        ("JobLease", "jobleases", {"jobName": "j", "holderIdentity": "a"}, "spec.fencingToken"),
        ("JobLease", "jobleases", {}, "spec.jobName"),
    ],
)
def test_invalid_objects_are_rejected_naming_the_field(
    api_client: client.ApiClient,
    namespace: str,
    kind: str,
    plural: str,
    spec: dict[str, Any],
    field: str,
) -> None:
    body = {"apiVersion": names.API_VERSION, "kind": kind, "metadata": {"name": "x"}, "spec": spec}
    message = _rejection(
        lambda: client.CustomObjectsApi(api_client).create_namespaced_custom_object(
            G, V, namespace, plural, body
        )
    )
    assert field in message


def test_defaults_are_applied(api_client: client.ApiClient, namespace: str) -> None:
    body = {
        "apiVersion": names.API_VERSION,
        "kind": "LeasedJob",
        "metadata": {"name": "d"},
        "spec": {},
    }
    created: Any = client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        G, V, namespace, "leasedjobs", body
    )
    assert created["spec"]["leaseDurationSeconds"] == 30
    assert created["spec"]["maxAttempts"] == 3
