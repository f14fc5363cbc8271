"""The whole flow as a user drives it: kubectl apply, kubectl get, kubectl wait."""

from __future__ import annotations

from pathlib import Path

from localcluster import Kubectl
from operatorproc import OperatorProcess
from podrunner import PodRunner

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_apply_example_and_watch_it_complete(
    kubectl: Kubectl, operator: OperatorProcess, pod_runner: PodRunner | None, namespace: str
) -> None:
    kubectl("-n", namespace, "apply", "-f", str(EXAMPLES / "leasedjob-hello.yaml"))
    kubectl(
        "-n",
        namespace,
        "wait",
        "--for=jsonpath={.status.phase}=Succeeded",
        "leasedjob/hello",
        "--timeout=60s",
    )
    table = kubectl("-n", namespace, "get", "ljob", "hello").stdout.splitlines()
    assert table[0].split() == [
        "NAME",
        "PHASE",
        "HOLDER",
        "TOKEN",
        "ATTEMPTS",
        "LAST-ATTEMPT",
        "AGE",
    ]
    assert table[1].split()[:5] == ["hello", "Succeeded", "1", "1", "Succeeded"]
    leases = kubectl("-n", namespace, "get", "jlease", "hello").stdout.splitlines()
    assert leases[0].split()[:7] == [
        "NAME",
        "JOB",
        "HOLDER",
        "TOKEN",
        "RENEWED",
        "DURATION",
        "OUTCOME",
    ]
    assert "Succeeded" in leases[1].split()
    by_category = kubectl("-n", namespace, "get", "leasehold").stdout
    assert "leasedjob.leasehold.dev/hello" in by_category
    assert "joblease.leasehold.dev/hello" in by_category


def test_retry_example_fails_once_then_succeeds(
    kubectl: Kubectl, operator: OperatorProcess, pod_runner: PodRunner | None, namespace: str
) -> None:
    kubectl("-n", namespace, "apply", "-f", str(EXAMPLES / "leasedjob-retry.yaml"))
    kubectl(
        "-n",
        namespace,
        "wait",
        "--for=jsonpath={.status.phase}=Succeeded",
        "leasedjob/retry",
        "--timeout=60s",
    )
    reasons = kubectl(
        "-n", namespace, "get", "ljob", "retry", "-o", "jsonpath={.status.attemptHistory[*].reason}"
    ).stdout.split()
    assert reasons == ["Failed", "Succeeded"]
    described = kubectl("-n", namespace, "describe", "ljob", "retry").stdout
    assert "BackingOff" in described


def test_failure_policy_example_ignores_its_transient_failure(
    kubectl: Kubectl, operator: OperatorProcess, pod_runner: PodRunner | None, namespace: str
) -> None:
    kubectl("-n", namespace, "apply", "-f", str(EXAMPLES / "leasedjob-failure-policy.yaml"))
    kubectl(
        "-n",
        namespace,
        "wait",
        "--for=jsonpath={.status.phase}=Succeeded",
        "leasedjob/failure-policy",
        "--timeout=60s",
    )
    history = "jsonpath={.status.attemptHistory[*].reason}"
    reasons = kubectl("-n", namespace, "get", "ljob", "failure-policy", "-o", history).stdout
    assert reasons.split() == ["Failed", "Succeeded"]  # backoffLimit=0: only Ignore retried it
    uncounted = "jsonpath={.spec.uncountedAttempts}"
    assert (
        kubectl("-n", namespace, "get", "jlease", "failure-policy", "-o", uncounted).stdout == "1"
    )
    described = kubectl("-n", namespace, "describe", "ljob", "failure-policy").stdout
    assert "FailureIgnored" in described


def test_kubectl_rejects_bad_input_naming_the_field(
    kubectl: Kubectl, crds_installed: Path, namespace: str
) -> None:
    bad = """
apiVersion: leasehold.dev/v1alpha1
kind: LeasedJob
metadata:
  name: bad
spec:
  leaseDurationSeconds: 0
  maxAttempts: 1000
"""
    result = kubectl("-n", namespace, "apply", "-f", "-", input=bad, check=False)
    assert result.returncode != 0
    assert "spec.leaseDurationSeconds" in result.stderr
    assert "spec.maxAttempts" in result.stderr
    assert kubectl("-n", namespace, "get", "ljob", "-o", "name").stdout.strip() == ""


def test_kubectl_explain_documents_the_fields(kubectl: Kubectl, crds_installed: Path) -> None:
    out = kubectl("explain", "leasedjob.spec.leaseDurationSeconds").stdout
    assert "reclaimed" in out
    out = kubectl("explain", "joblease.spec.fencingToken").stdout
    assert "exactly one" in out
    out = kubectl("explain", "leasedjob.spec.podFailurePolicy.rules.action").stdout
    assert "FailJob" in out and "Ignore" in out
    out = kubectl("explain", "leasedjob.spec.podFailurePolicy.rules.onExitCodes").stdout
    assert "containerName" in out


def test_cron_example_applies_and_lists_with_its_columns(
    kubectl: Kubectl, crds_installed: Path, namespace: str
) -> None:
    kubectl("-n", namespace, "apply", "-f", str(EXAMPLES / "leasedcronjob.yaml"))
    header, row = kubectl("-n", namespace, "get", "lcj").stdout.strip().splitlines()
    assert header.split()[:6] == ["NAME", "SCHEDULE", "SUSPEND", "ACTIVE", "LAST", "SCHEDULE"]
    assert row.split()[:3] == ["nightly-report", "*/5", "*"]
    out = kubectl("explain", "leasedcronjob.spec.concurrencyPolicy").stdout
    assert "Forbid" in out
    assert "leasedcronjob" in kubectl("get", "leasehold", "-n", namespace, "-o", "name").stdout
