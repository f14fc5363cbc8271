"""Every LeasedJob in examples/ is accepted by the API server as it is (server-side dry run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from leasehold import names
from localcluster.kubectl import Kubectl

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("leasedjob-*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_is_accepted(api_client: client.ApiClient, namespace: str, path: Path) -> None:
    body = yaml.safe_load(path.read_text())
    created: Any = client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, names.PLURAL_LEASED_JOBS, body, dry_run="All"
    )
    assert created["metadata"]["name"] == body["metadata"]["name"]


@pytest.mark.parametrize(
    ("field", "words"),
    [
        ("suspend", "batch/v1 Job"),
        ("ttlSecondsAfterFinished", "after it finished"),
        ("podRetention", "kubectl logs"),
        ("params", "32 KiB"),
        ("priority", "highest first"),
    ],
)
def test_kubectl_explain_documents_the_field(
    kubectl: Kubectl, crds_installed: Path, field: str, words: str
) -> None:
    explained = kubectl("explain", f"leasedjobs.spec.{field}").stdout
    assert words in " ".join(explained.split()), explained
