"""A job's whole life on a real control plane: spec edits, deadlines, slow starts, API errors.

Each test runs its own ``leasehold operator`` process watching the test's
namespace; pods run as local processes through the pod runner. The rules
tested are written down in docs/architecture.md, "Lifecycle".
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from leasehold import names
from tests.integration.test_operator import create_job, get_job

G, V = names.GROUP, names.VERSION


def patch_spec(api: client.ApiClient, namespace: str, name: str, spec: dict[str, Any]) -> None:
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        G, V, namespace, names.PLURAL_LEASED_JOBS, name, {"spec": spec}
    )


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
