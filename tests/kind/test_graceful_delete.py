"""Pod deletion with a grace period on a real kubelet: SIGTERM through ``leasehold run``.

``kubectl delete pod --grace-period=N`` makes the kubelet send SIGTERM to the
container's PID 1, ``leasehold run``, which forwards it to the command's
process group. What ``leasehold run`` promises then (worker/run.py): a
command that ends after a forwarded stop signal did not finish the job — the
pod is being stopped — so its exit is not recorded as the job's outcome; the
lease is released (no completion under that token) for the next attempt,
which the operator starts at once instead of after the lease's expiry.

The command here traps TERM, cleans up for 2 s within the grace period and
exits 0; the recorded truth is "attempt 1 was stopped" (released, not a
failure, not a success), and attempt 2 (token 2) runs to Succeeded.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from tests.kind.kube import (
    NAMESPACE,
    LogFollower,
    apply,
    fresh_job,
    get,
    run,
    started_pod,
    wait,
)

pytestmark = [pytest.mark.kind, pytest.mark.timeout(10 * 60)]

JOB = "graceful-delete"
LEASE_SECONDS = 60
GRACE_SECONDS = 20

# Under token 1 the command works until stopped; under any later token it finishes at once.
COMMAND = (
    "trap 'echo got SIGTERM, cleaning up; sleep 2; echo cleaned up; exit 0' TERM;"
    " echo working under token $LEASEHOLD_FENCING_TOKEN;"
    ' if [ "$LEASEHOLD_FENCING_TOKEN" = 1 ]; then sleep 600 & wait; fi'
)

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
      terminationGracePeriodSeconds: 60
      containers:
        - name: worker
          image: leasehold:0.1.0
          command: ["leasehold", "run", "--", "sh", "-c", {json.dumps(COMMAND)}]
"""


@pytest.fixture
def env(operator_env: dict[str, str]) -> Iterator[dict[str, str]]:
    yield from fresh_job(operator_env, JOB)


def test_sigterm_reaches_the_command_and_the_stopped_attempt_is_released_not_recorded(
    env: dict[str, str],
) -> None:
    apply(env, LEASED_JOB)
    first = wait("attempt 1's pod to run", 180, lambda: started_pod(env, JOB, 1))
    follow = LogFollower(env, first["name"])
    wait("attempt 1 to start working", 60, lambda: follow.saw("working under token 1"))

    deleted = time.monotonic()
    run(
        env,
        "kubectl",
        "-n",
        NAMESPACE,
        "delete",
        "pod",
        first["name"],
        f"--grace-period={GRACE_SECONDS}",
        "--wait=false",
    )
    wait("the command's own clean-up", 30, lambda: follow.saw("cleaned up"))
    second = wait("attempt 2's pod to run", 60, lambda: started_pod(env, JOB, 2))
    # Released, not expired: attempt 2 did not wait for the lease's duration.
    assert time.monotonic() - deleted < LEASE_SECONDS
    wait(
        "the job to succeed",
        120,
        lambda: get(env, "ljob", JOB)["status"].get("phase") == "Succeeded",
    )
    wait("attempt 1's worker to exit", 30, follow.ended)
    log = follow.stop()
    print(f"attempt 1's log ({first['name']} on {first['node']}):\n{log}")

    # SIGTERM went through leasehold run to the command, which cleaned up in the grace period.
    assert "forwarding SIGTERM to the command" in log, log
    assert "got SIGTERM, cleaning up" in log, log
    assert "command ended (exit code 0) after SIGTERM; releasing the lease" in log, log
    assert "completed lease" not in log, log
    # The outcome recorded is the true one: attempt 1 was stopped, attempt 2 succeeded.
    status = get(env, "ljob", JOB)["status"]
    history = {a["fencingToken"]: a for a in status["attemptHistory"]}
    assert history[1]["reason"] == "Reclaimed", history
    assert history[2]["reason"] == "Succeeded", history
    assert not status.get("failed"), status
    lease = get(env, "jlease", JOB)["spec"]
    assert lease["completion"]["fencingToken"] == 2, lease
    assert lease["completion"]["outcome"] == "Succeeded", lease
    assert second["name"] == f"{JOB}-2"
