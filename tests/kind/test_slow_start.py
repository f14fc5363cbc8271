"""A slow start on a real kubelet: an init container that runs longer than the lease.

The operator claims the lease before it creates the pod; until the pod runs
(or first renews) only ``spec.startupDeadlineSeconds`` (default 600 s) bounds
the attempt, not the lease duration. So a pod whose init container sleeps the
lease's duration and more still runs its worker under the first claim's token,
and the job succeeds without a reclaim.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from tests.kind.kube import apply, fresh_job, get, pods, run, wait

pytestmark = [pytest.mark.kind, pytest.mark.timeout(10 * 60)]

JOB = "slow-start"
LEASE_SECONDS = 5
INIT_SECONDS = LEASE_SECONDS + 10

LEASED_JOB = f"""
apiVersion: leasehold.dev/v1alpha1
kind: LeasedJob
metadata:
  name: {JOB}
spec:
  leaseDurationSeconds: {LEASE_SECONDS}
  maxAttempts: 3
  template:
    spec:
      serviceAccountName: leasehold-worker
      initContainers:
        - name: slow-init
          image: leasehold:0.1.0
          command: ["sh", "-c", "sleep {INIT_SECONDS}"]
      containers:
        - name: worker
          image: leasehold:0.1.0
          command: ["leasehold", "run", "--", "sh", "-c",
                    "echo working under token $LEASEHOLD_FENCING_TOKEN; sleep 2"]
"""


def _time(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


@pytest.fixture
def env(operator_env: dict[str, str]) -> Iterator[dict[str, str]]:
    yield from fresh_job(operator_env, JOB)


def test_init_container_longer_than_the_lease_runs_under_the_first_token(
    env: dict[str, str],
) -> None:
    apply(env, LEASED_JOB)

    def init_done() -> dict[str, Any] | None:
        for pod in pods(env, f"leasehold.dev/job={JOB}"):
            for status in pod["status"].get("initContainerStatuses", []):
                done = status.get("state", {}).get("terminated")
                if done:
                    return {"pod": pod["metadata"]["name"], **done}
        return None

    init = wait("the init container to finish", INIT_SECONDS + 120, init_done)
    assert init["exitCode"] == 0
    init_seconds = (_time(init["finishedAt"]) - _time(init["startedAt"])).total_seconds()
    assert init_seconds >= LEASE_SECONDS + 5, init
    wait(
        "the job to succeed",
        120,
        lambda: get(env, "ljob", JOB)["status"].get("phase") == "Succeeded",
    )

    status = get(env, "ljob", JOB)["status"]
    lease = get(env, "jlease", JOB)["spec"]
    # One attempt, never reclaimed: the start did not count against the lease.
    assert init["pod"] == f"{JOB}-1"
    assert status["attempts"] == 1, status
    assert status["lastAttemptReason"] == "Succeeded", status
    assert lease["fencingToken"] == 1, lease
    assert lease["completion"] == {**lease["completion"], "outcome": "Succeeded", "fencingToken": 1}

    def told() -> list[str] | None:
        """The job's Event reasons, once its end's is posted (the earlier ones are then too)."""
        found = run(
            env,
            "kubectl",
            "-n",
            "demo",
            "get",
            "events",
            "--field-selector",
            f"involvedObject.name={JOB}",
            "-o",
            "jsonpath={.items[*].reason}",
        ).split()
        return found if "Completed" in found else None

    reasons = wait("the job's Completed Event", 60, told)
    assert not any(r.startswith("Reclaim") or r.startswith("StartupDeadline") for r in reasons), (
        reasons
    )
