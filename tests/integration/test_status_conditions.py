"""Conditions other clients write through ``/status``, as batch/v1 allows them.

batch/v1's JobCondition requires only ``type`` and ``status`` (no ``reason``,
no ``lastTransitionTime``), and a client may add one through the status
subresource (issue 28: a condition without ``reason`` was refused, 422).
The operator always writes both fields itself, but does not require them of
others, and its own status writes keep a condition it does not own.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from leasehold import names
from operatorproc import OperatorProcess
from tests.integration.jobs import G, V, create_job, events, status, wait_for
from tests.integration.test_cronjob import create_cron, get_cron

NO_REASON = {"type": "StatusUpdate", "status": "True", "message": "Set from a test"}
"""batch/v1's JobCondition requires only type and status."""


def _types(st: dict[str, Any]) -> set[str]:
    return {c["type"] for c in st.get("conditions") or []}


def test_a_job_condition_without_reason_is_accepted_through_status(
    operator: OperatorProcess, api_client: client.ApiClient, namespace: str
) -> None:
    create_job(api_client, namespace, "told", "true", suspend=True)
    wait_for(
        "the operator's Suspended",
        lambda: "Suspended" in _types(status(api_client, namespace, "told")),
    )
    current = status(api_client, namespace, "told")["conditions"]
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object_status(
        G,
        V,
        namespace,
        names.PLURAL_LEASED_JOBS,
        "told",
        {"status": {"conditions": [*current, NO_REASON]}},
    )
    st = status(api_client, namespace, "told")
    added = next(c for c in st["conditions"] if c["type"] == "StatusUpdate")
    assert "reason" not in added and "lastTransitionTime" not in added
    # The operator reads the job as valid and keeps the condition it does not own.
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        G, V, namespace, names.PLURAL_LEASED_JOBS, "told", {"spec": {"activeDeadlineSeconds": 600}}
    )
    wait_for(
        "the operator's status for generation 2",
        lambda: status(api_client, namespace, "told").get("observedGeneration") == 2,
    )
    assert {"StatusUpdate", "Suspended", "Ready"} <= _types(status(api_client, namespace, "told"))
    assert not [r for r, _ in events(api_client, namespace, "told") if r == "InvalidSpec"]


def test_a_cron_job_condition_without_reason_is_accepted_through_status(
    api_client: client.ApiClient, namespace: str
) -> None:
    create_cron(api_client, namespace, "told", "true", schedule="@hourly")
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object_status(
        G,
        V,
        namespace,
        names.PLURAL_LEASED_CRON_JOBS,
        "told",
        {"status": {"conditions": [NO_REASON]}},
    )
    st = get_cron(api_client, namespace, "told")["status"]
    assert [c["type"] for c in st["conditions"]] == ["StatusUpdate"]
