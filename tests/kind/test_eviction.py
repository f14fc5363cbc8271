"""An eviction on a real cluster: ``kubectl drain`` of the worker's node (the Eviction API).

The drain cordons the node and evicts the job's pod: the API server marks it
with the ``DisruptionTarget`` condition and deletes it gracefully, the
kubelet sends SIGTERM, ``leasehold run`` forwards it and releases the lease
when the command ends. The attempt ends without a completion, recorded as
Evicted (no budget used), and the next attempt runs on another node under the
next fencing token.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kind.kube import (
    NAMESPACE,
    apply,
    cordon,
    fresh_job,
    get,
    run,
    started_pod,
    wait,
    worker_job,
    worker_nodes,
)

pytestmark = [pytest.mark.kind, pytest.mark.timeout(10 * 60)]

JOB = "evicted"
EVICTED_ATTEMPT_REASON = "Evicted"
"""The evicted attempt's reason: its lease was released without a completion and
its pod had DisruptionTarget=True, so it used no budget (spec.uncountedAttempts)."""
LEASE_SECONDS = 60

# Works until evicted under token 1; finishes at once under any later token.
LEASED_JOB = worker_job(
    JOB,
    "[ $LEASEHOLD_FENCING_TOKEN != 1 ] || sleep 600",
    leaseDurationSeconds=LEASE_SECONDS,
    maxAttempts=3,
    backoffLimit=0,
)


@pytest.fixture
def env(operator_env: dict[str, str]) -> Iterator[dict[str, str]]:
    try:
        yield from fresh_job(operator_env, JOB)
    finally:
        for node in worker_nodes(operator_env):
            run(operator_env, "kubectl", "uncordon", node, check=False)


def test_drained_node_ends_the_attempt_and_the_next_runs_elsewhere(env: dict[str, str]) -> None:
    apply(env, LEASED_JOB)
    first = wait("attempt 1's pod to run", 180, lambda: started_pod(env, JOB, 1))
    wait("attempt 1 to renew", 60, lambda: get(env, "jlease", JOB)["spec"].get("renewTime"))

    # drain cordons the node too; cordoning first waits until the scheduler saw it.
    cordon(env, first["node"])
    drained = run(
        env,
        "kubectl",
        "drain",
        first["node"],
        f"--pod-selector=leasehold.dev/job={JOB}",
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout=120s",
    )
    assert f"pod/{first['name']} evicted" in drained, drained
    second = wait("attempt 2's pod to run", 60, lambda: started_pod(env, JOB, 2))
    assert second["node"] != first["node"], run(
        env,
        "kubectl",
        "-n",
        NAMESPACE,
        "get",
        "pods",
        "-o",
        "wide",
        "-l",
        f"leasehold.dev/job={JOB}",
    )
    wait(
        "the job to succeed",
        120,
        lambda: get(env, "ljob", JOB)["status"].get("phase") == "Succeeded",
    )

    status = get(env, "ljob", JOB)["status"]
    history = {a["fencingToken"]: a for a in status["attemptHistory"]}
    print(f"attempts: {history}")
    # The evicted attempt ended without a completion (its lease was released) and
    # did not count as a failure: backoffLimit 0 would have failed the job.
    assert history[1]["reason"] == EVICTED_ATTEMPT_REASON, history
    assert history[1]["nodeName"] == first["node"], history
    assert history[2]["nodeName"] == second["node"], history
    assert history[2]["reason"] == "Succeeded", history
    assert not status.get("failed"), status
    lease = get(env, "jlease", JOB)["spec"]
    assert lease.get("uncountedAttempts") == 1, lease  # the eviction used no budget
    assert lease["completion"] == {**lease["completion"], "fencingToken": 2, "outcome": "Succeeded"}
