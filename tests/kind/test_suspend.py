"""Suspend and resume on a real cluster (``spec.suspend``, as batch/v1 Job's).

Suspending a running job releases its lease in one conditional write (the
lease is then unclaimable and its token stale) and deletes the attempt's pod
on its node; nothing runs while suspended; resuming starts the next attempt
under a higher token. A suspension uses no budget: ``maxAttempts: 1`` would
otherwise leave no attempt to resume with.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.kind.kube import (
    NAMESPACE,
    apply,
    fresh_job,
    get,
    pods,
    run,
    started_pod,
    wait,
    worker_job,
)

pytestmark = [pytest.mark.kind, pytest.mark.timeout(8 * 60)]

JOB = "suspended"
LEASE_SECONDS = 30

# Works until suspended under token 1; finishes at once under any later token.
LEASED_JOB = worker_job(
    JOB,
    "[ $LEASEHOLD_FENCING_TOKEN != 1 ] || sleep 600",
    leaseDurationSeconds=LEASE_SECONDS,
    maxAttempts=1,
    backoffLimit=0,
)


@pytest.fixture
def env(operator_env: dict[str, str]) -> Iterator[dict[str, str]]:
    yield from fresh_job(operator_env, JOB)


def _patch_suspend(env: dict[str, str], suspend: bool) -> None:
    value = "true" if suspend else "false"
    run(
        env,
        "kubectl",
        "-n",
        NAMESPACE,
        "patch",
        "ljob",
        JOB,
        "--type=merge",
        "-p",
        f'{{"spec":{{"suspend":{value}}}}}',
    )


def test_suspend_fences_the_running_attempt_and_resume_runs_a_higher_token(
    env: dict[str, str],
) -> None:
    apply(env, LEASED_JOB)
    first = wait("attempt 1's pod to run", 180, lambda: started_pod(env, JOB, 1))
    wait("attempt 1 to renew", 60, lambda: get(env, "jlease", JOB)["spec"].get("renewTime"))

    _patch_suspend(env, True)
    wait(
        "the job to show Suspended",
        60,
        lambda: get(env, "ljob", JOB)["status"].get("phase") == "Suspended",
    )
    lease = get(env, "jlease", JOB)["spec"]
    assert lease.get("suspended") is True, lease
    assert lease.get("holderIdentity") is None, lease  # token 1 is stale from here on
    assert lease["fencingToken"] == 1, lease
    wait(
        "the suspended attempt's pod to be deleted from its node",
        120,
        lambda: not pods(env, f"leasehold.dev/job={JOB},leasehold.dev/fencing-token=1"),
    )
    time.sleep(5)  # nothing may start while suspended
    assert not pods(env, f"leasehold.dev/job={JOB}")
    assert get(env, "jlease", JOB)["spec"].get("holderIdentity") is None

    _patch_suspend(env, False)
    second = wait("attempt 2's pod to run", 120, lambda: started_pod(env, JOB, 2))
    wait(
        "the job to succeed",
        120,
        lambda: get(env, "ljob", JOB)["status"].get("phase") == "Succeeded",
    )
    status = get(env, "ljob", JOB)["status"]
    history = {a["fencingToken"]: a for a in status["attemptHistory"]}
    print(f"attempts: {history}")
    assert history[1]["reason"] == "Suspended", history
    assert history[1]["nodeName"] == first["node"], history
    assert history[2]["nodeName"] == second["node"], history
    assert history[2]["reason"] == "Succeeded", history
    assert not status.get("failed"), status
    lease = get(env, "jlease", JOB)["spec"]
    assert lease["completion"]["fencingToken"] == 2, lease
    suspended = next(c for c in status["conditions"] if c["type"] == "Suspended")
    assert (suspended["status"], suspended["reason"]) == ("False", "JobResumed"), suspended
