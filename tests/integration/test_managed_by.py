"""``spec.managedBy`` (batch/v1 Job's), on a real control plane.

A LeasedJob managed by another controller (MultiKueue's manager cluster
holds such copies) is that controller's: this operator creates no lease and
no pod for it, writes neither its status nor its metadata and records no
Event, as Kubernetes' job controller skips a Job whose ``managedBy`` is not
``kubernetes.io/job-controller``. The CRD checks the field as batch/v1's
validation does: a domain-prefixed path of at most 63 characters, immutable.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from kubernetes import client

from leasehold import names
from leasehold.lease.errors import LeaseNotFoundError
from leasehold.lease.store import LeaseStore
from operatorproc import OperatorProcess
from podrunner import PodRunner
from tests.integration.jobs import (
    G,
    V,
    create_job,
    events,
    get_job,
    patch_spec,
    phase_is,
    run,
    wait_for,
)
from tests.integration.test_cronjob import create_cron

MULTIKUEUE = "kueue.x-k8s.io/multikueue"
LEASEHOLD = "leasehold.dev/leasedjob-controller"
"""leasehold's own value (batch/v1's is ``kubernetes.io/job-controller``)."""


def _refused(call: Any) -> str:
    with pytest.raises(client.ApiException) as caught:
        call()
    assert caught.value.status == 422
    return str(json.loads(caught.value.body or "{}")["message"])


def test_managed_by_another_controller_leaves_the_job_to_it(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    # batch/v1: the job controller skips a Job managed elsewhere (no pods, no
    # status); leasehold's own value, like an unset field, runs the job.
    create_job(api_client, namespace, "foreign", run(0.5), managedBy=MULTIKUEUE)
    create_job(api_client, namespace, "ours", run(0.5), managedBy=LEASEHOLD)
    wait_for("ours Succeeded", phase_is(api_client, namespace, "ours", "Succeeded"), 60)
    # The other controller writes the status (MultiKueue copies the worker
    # cluster's): this operator neither overwrites nor adds to it.
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object_status(
        G,
        V,
        namespace,
        names.PLURAL_LEASED_JOBS,
        "foreign",
        {"status": {"phase": "Running", "attempts": 7}},
    )
    time.sleep(3)  # the status write's event reconciles (or would) by now
    foreign = get_job(api_client, namespace, "foreign")
    assert foreign["status"] == {"phase": "Running", "attempts": 7}
    meta = foreign["metadata"]
    assert not meta.get("finalizers")
    assert not [k for k in meta.get("annotations") or {} if k.startswith(names.GROUP)]
    assert events(api_client, namespace, "foreign") == []
    with pytest.raises(LeaseNotFoundError):
        LeaseStore(api_client).get(namespace, "foreign")
    pods = client.CoreV1Api(api_client).list_namespaced_pod(
        namespace, label_selector=f"{names.LABEL_JOB}=foreign"
    )
    assert pods.items == []
    logs = operator.logs()
    assert logs.count(f"managed by {MULTIKUEUE} (spec.managedBy): left alone") == 1


def test_managed_by_must_be_a_domain_prefixed_path_of_at_most_63_characters(
    api_client: client.ApiClient, namespace: str
) -> None:
    # batch/v1 validation: IsDomainPrefixedPath and a length of at most 63.
    for bad in ("multikueue", "Kueue.io/x", "kueue.x-k8s.io/", "/path"):
        message = _refused(
            lambda bad=bad: create_job(api_client, namespace, "bad", "true", managedBy=bad)
        )
        assert "spec.managedBy must be a domain-prefixed path" in message, message
    too_long = "example.com/" + "c" * 52  # 64 characters
    message = _refused(lambda: create_job(api_client, namespace, "bad", "true", managedBy=too_long))
    assert "spec.managedBy" in message and "63" in message, message
    create_job(api_client, namespace, "fits", "true", managedBy=too_long[:63], suspend=True)


def test_managed_by_is_immutable(api_client: client.ApiClient, namespace: str) -> None:
    create_job(api_client, namespace, "handed", "true", managedBy=MULTIKUEUE, suspend=True)
    create_job(api_client, namespace, "unset", "true", suspend=True)
    for name, value in (
        ("handed", LEASEHOLD),
        ("handed", None),
        ("unset", MULTIKUEUE),
    ):
        message = _refused(
            lambda name=name, value=value: patch_spec(
                api_client, namespace, name, {"managedBy": value}
            )
        )
        assert "spec.managedBy is immutable" in message, message
    assert get_job(api_client, namespace, "handed")["spec"]["managedBy"] == MULTIKUEUE


def test_a_cron_job_template_managed_by_another_controller_is_refused(
    api_client: client.ApiClient, namespace: str
) -> None:
    # leasehold differs: a LeasedCronJob makes each run's lease itself, so its
    # runs are always this operator's.
    message = _refused(
        lambda: create_cron(
            api_client, namespace, "handed", "true", job_spec={"managedBy": MULTIKUEUE}
        )
    )
    assert "spec.jobTemplate.spec.managedBy" in message, message
    create_cron(
        api_client,
        namespace,
        "ours",
        "true",
        schedule="@hourly",
        job_spec={"managedBy": LEASEHOLD},
    )
