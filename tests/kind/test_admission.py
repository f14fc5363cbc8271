"""The chart's admission webhook on a real cluster: ``kubectl apply`` refused with 422.

batch/v1 refuses a CronJob with ``timeZone: bad-time-zone`` at create with 422
(``validateCronJobSpec``). The chart's operator serves a validating webhook
that does the same for a LeasedCronJob; the API server reaches it through the
chart's Service with the CA of the Secret Helm made (no cert-manager). The
quickstart's install is used as it is (webhook on by default).
"""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.kind.kube import NAMESPACE, REPO, run, wait

pytestmark = [pytest.mark.kind, pytest.mark.timeout(5 * 60)]

CRON = """\
apiVersion: leasehold.dev/v1alpha1
kind: LeasedCronJob
metadata:
  name: bad-zone
spec:
  schedule: "0 3 * * *"
  timeZone: bad-time-zone
  jobTemplate:
    spec:
      leaseDurationSeconds: 10
"""


def apply(env: dict[str, str], *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "-n", NAMESPACE, "apply", *flags, "-f", "-"],
        env=env,
        input=CRON,
        capture_output=True,
        text=True,
        cwd=REPO,
    )


def test_cronjob_with_unknown_time_zone_is_refused_with_422(operator_env: dict[str, str]) -> None:
    env = operator_env
    # The operator may be Available a moment before it serves the webhook
    # (failurePolicy Ignore would admit meanwhile): wait for a dry run to be refused.
    wait(
        "the webhook to answer",
        120,
        lambda: "denied the request" in apply(env, "--dry-run=server").stderr,
        lambda: run(env, "kubectl", "-n", "leasehold-system", "logs", "deploy/leasehold"),
    )
    refused = apply(env, "-v=6")
    try:
        assert refused.returncode != 0, refused.stdout
        posted = (
            r'verb="POST" url="https://\S+/leasedcronjobs\S*" status="422 Unprocessable Entity"'
        )
        assert re.search(posted, refused.stderr), refused.stderr
        assert 'admission webhook "leasedcronjobs.webhook.leasehold.dev" denied the request' in (
            refused.stderr
        )
        assert 'spec.timeZone: unknown time zone "bad-time-zone"' in refused.stderr
    finally:
        run(env, "kubectl", "-n", NAMESPACE, "delete", "lcj", "bad-zone", "--ignore-not-found")
