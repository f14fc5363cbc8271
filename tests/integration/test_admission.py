"""The operator's validating admission webhook, called by a real API server.

batch/v1 refuses a CronJob with an unknown ``timeZone`` or an unparsable
``schedule`` at create with 422 (``validateCronJobSpec``); leasehold's CRDs
cannot (CEL has no time zone database and no cron parser), nor size
``params`` as JSON. The operator serves a webhook that does
(``controller/plan/admission.py``, ``controller/handlers.py``).

Here the operator runs as a local process (``operatorproc``) with a
certificate made for ``127.0.0.1``, and the webhook configuration is the
chart's own (``helm template``, watching the test's namespace) with its
``clientConfig`` pointed at that process by URL: the local control plane has
no Service network, so the chart's Service cannot be reached from it (the
kind tier, ``tests/kind/test_admission.py``, calls the webhook through the
chart's Service, Secret and caBundle).
"""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from leasehold import names
from leasehold.lease.api.leasedjob import MAX_PARAMS_BYTES
from localcluster.binaries import tools_bin_dir
from localcluster.kubectl import Kubectl
from operatorproc import OperatorProcess
from ports import free_port
from tests.integration.jobs import create_job, wait_for
from tests.integration.test_cronjob import create_cron, get_cron
from tests.integration.test_helm import Helm, find

OVERSIZED = {"blob": "x" * MAX_PARAMS_BYTES}


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1, its own CA (as Kopf's self-signed ones are), and its key."""
    cert, key = directory / "tls.crt", directory / "tls.key"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def refusal(create: Callable[[], object]) -> ApiException:
    """The API server's refusal of ``create`` (the test fails if it was accepted)."""
    with pytest.raises(ApiException) as refused:
        create()
    return refused.value


def message(exc: ApiException) -> str:
    return str(json.loads(exc.body or "{}").get("message", ""))


class Webhook:
    """The operator serving the webhook, and the chart's configuration pointed at it."""

    def __init__(
        self, helm: Helm, kubectl: Kubectl, kubeconfig: Path, namespace: str, tmp: Path
    ) -> None:
        self.kubectl = kubectl
        self.namespace = namespace
        self.port = free_port()
        cert, key = self_signed(tmp)
        self.ca = base64.b64encode(cert.read_bytes()).decode()
        env = {
            "LEASEHOLD_WEBHOOK_PORT": str(self.port),
            "LEASEHOLD_WEBHOOK_CERT_FILE": str(cert),
            "LEASEHOLD_WEBHOOK_KEY_FILE": str(key),
        }
        self.operator = OperatorProcess(kubeconfig, namespace, tmp / "operator.log", env=env)
        release = f"adm{secrets.token_hex(3)}"
        docs = helm.template(release, "leasehold-system", f"--set=watchNamespaces={{{namespace}}}")
        self.config = find(docs, "ValidatingWebhookConfiguration")
        for hook in self.config["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {
                "url": f"https://127.0.0.1:{self.port}{path}",
                "caBundle": self.ca,
            }

    def start(self) -> None:
        """Start the operator, configure the webhook, wait until the API server calls it."""
        try:
            self.operator.start()
        except RuntimeError as exc:
            pytest.fail(str(exc))
        self.kubectl("create", "-f", "-", input=json.dumps(self.config))
        probe = {
            "apiVersion": names.API_VERSION,
            "kind": "LeasedCronJob",
            "metadata": {"name": "probe", "namespace": self.namespace},
            "spec": {"schedule": "61 * * * *", "jobTemplate": {"spec": {}}},
        }

        def refused() -> bool:
            tried = self.kubectl(
                "create", "--dry-run=server", "-f", "-", input=json.dumps(probe), check=False
            )
            return tried.returncode != 0 and "denied the request" in tried.stderr

        # Not a failure here if it never is: the tests' own assertions then say
        # what was not refused.
        deadline = time.monotonic() + 60
        while not refused() and time.monotonic() < deadline:
            time.sleep(0.5)

    def stop(self) -> None:
        self.kubectl(
            "delete", "validatingwebhookconfiguration", self.config["metadata"]["name"], check=False
        )
        self.operator.stop()


@pytest.fixture(scope="module")
def helm(kubeconfig: Path) -> Helm:
    return Helm(tools_bin_dir() / "helm", kubeconfig)


@pytest.fixture
def webhook(
    helm: Helm, kubectl: Kubectl, crds_installed: Path, namespace: str, tmp_path: Path
) -> Iterator[Webhook]:
    """The webhook, not yet started (``start()``); removed afterwards."""
    hook = Webhook(helm, kubectl, crds_installed, namespace, tmp_path)
    yield hook
    print(hook.operator.logs())
    hook.stop()


@pytest.fixture
def serving(webhook: Webhook) -> Webhook:
    webhook.start()
    return webhook


def test_cronjob_with_unknown_time_zone_is_refused_at_create_with_422(
    api_client: client.ApiClient, namespace: str, serving: Webhook
) -> None:
    refused = refusal(
        lambda: create_cron(api_client, namespace, "nowhere", "true", timeZone="bad-time-zone")
    )
    assert refused.status == 422, refused.body
    assert 'spec.timeZone: unknown time zone "bad-time-zone"' in message(refused)
    assert "leasedcronjobs.webhook.leasehold.dev" in message(refused)
    create_cron(api_client, namespace, "berlin", "true", timeZone="Europe/Berlin")


def test_cronjob_with_unparsable_schedule_is_refused_at_create_with_422(
    api_client: client.ApiClient, namespace: str, serving: Webhook
) -> None:
    for bad in ("61 * * * *", "0 25 * * *", "* * * * JAN"):
        refused = refusal(partial(create_cron, api_client, namespace, "bad", "true", schedule=bad))
        assert refused.status == 422, refused.body
        assert f"spec.schedule '{bad}'" in message(refused), message(refused)
    create_cron(api_client, namespace, "hourly", "true", schedule="@hourly")


def test_oversized_params_are_refused_at_create_with_422(
    api_client: client.ApiClient, namespace: str, serving: Webhook
) -> None:
    refused = refusal(lambda: create_job(api_client, namespace, "big", None, params=OVERSIZED))
    assert refused.status == 422, refused.body
    assert "spec.params: Too long: may not be more than 32768 bytes" in message(refused)
    in_template = refusal(
        lambda: create_cron(api_client, namespace, "big", "true", job_spec={"params": OVERSIZED})
    )
    assert in_template.status == 422, in_template.body
    assert "spec.jobTemplate.spec.params: Too long" in message(in_template)
    create_job(api_client, namespace, "small", None, params={"shard": 7})


def test_cronjob_update_to_unknown_time_zone_is_refused_other_updates_are_not(
    api_client: client.ApiClient, namespace: str, webhook: Webhook
) -> None:
    """As batch/v1: timeZone is checked on update only when it changes."""
    # Stored while no webhook was configured (e.g. it was unreachable, failurePolicy Ignore).
    create_cron(api_client, namespace, "stored", "true", timeZone="Mars/Olympus_Mons")
    create_cron(api_client, namespace, "good", "true")
    webhook.start()
    custom = client.CustomObjectsApi(api_client)

    def patch(name: str, spec: dict[str, Any]) -> object:
        return custom.patch_namespaced_custom_object(
            names.GROUP,
            names.VERSION,
            namespace,
            names.PLURAL_LEASED_CRON_JOBS,
            name,
            {"spec": spec},
        )

    patch("stored", {"suspend": True})  # the bad zone did not change: allowed
    assert get_cron(api_client, namespace, "stored")["spec"]["suspend"] is True
    refused = refusal(lambda: patch("good", {"timeZone": "bad-time-zone"}))
    assert refused.status == 422, refused.body
    assert 'spec.timeZone: unknown time zone "bad-time-zone"' in message(refused)
    patch("stored", {"timeZone": "Europe/Berlin"})  # fixing it is allowed


def test_webhook_unreachable_admits_and_the_operator_still_refuses_to_run_it(
    api_client: client.ApiClient, namespace: str, serving: Webhook
) -> None:
    """With the chart's failurePolicy (Ignore) and the operator down, the object is admitted."""
    serving.operator.stop()
    create_cron(api_client, namespace, "nowhere", "true", timeZone="bad-time-zone")
    serving.operator.start()

    def ready() -> dict[str, Any] | None:
        status = get_cron(api_client, namespace, "nowhere").get("status") or {}
        return next((c for c in status.get("conditions", []) if c["type"] == "Ready"), None)

    condition = wait_for("Ready=False on nowhere", ready, 60)
    assert (condition["status"], condition["reason"]) == ("False", "InvalidSchedule")
    assert 'spec.timeZone: unknown time zone "bad-time-zone"' in condition["message"]


def test_scaling_down_an_indexed_job_whose_success_policy_names_indexes_is_refused_with_422(
    api_client: client.ApiClient, namespace: str, serving: Webhook
) -> None:
    """batch/v1 validateJobSpec on update judges succeededIndexes against the new completions.

    leasehold refuses every scale-down of such a job in the CRD (CEL cannot walk
    the intervals, and a scale-down the webhook missed would leave an invalid
    running job whose removed indexes are never fenced); scaling up is allowed.
    """
    shape: dict[str, Any] = {
        "completionMode": "Indexed",
        "successPolicy": {"rules": [{"succeededIndexes": "0,2"}]},
    }
    create_job(api_client, namespace, "elastic", None, completions=3, parallelism=3, **shape)
    custom = client.CustomObjectsApi(api_client)

    def scale(to: int) -> object:
        return custom.patch_namespaced_custom_object(
            names.GROUP,
            names.VERSION,
            namespace,
            names.PLURAL_LEASED_JOBS,
            "elastic",
            {"spec": {"completions": to, "parallelism": to}},
        )

    refused = refusal(lambda: scale(2))
    assert refused.status == 422, refused.body
    assert "spec.successPolicy names succeededIndexes cannot be scaled down" in message(refused)
    scale(4)  # up: every index still below completions
    refused = refusal(lambda: scale(3))  # down again, though "0,2" would fit: refused
    assert refused.status == 422, refused.body
