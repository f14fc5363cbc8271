"""Operator HA on real nodes: two replicas on different nodes, the active one's node frozen.

The chart runs two operator pods (``replicas: 2``, a required pod
anti-affinity so they land on different nodes) with Kopf peering. The active
replica's node is frozen (``docker pause``). Two jobs run meanwhile:

* ``ha-remote``: its worker runs on the standby's node and keeps renewing. Its
  lease is never reclaimed: not by the standby when it takes over, nor by the
  frozen replica when its node is unpaused with its timers long past due (a
  reclaim carries the resourceVersion it judged, so a renewal since refuses
  it). It succeeds under token 1.
* ``ha-local``: its worker runs on the frozen node. The standby takes over
  once the frozen replica's peering entry is older than its lifetime (the
  chart's ``peeringLifetimeSeconds``, 20 s here; 60 s by default),
  reclaims the lease (only after it expired: no renewal for its duration)
  and runs attempt 2 on its own node.

This module runs last in the tier (see conftest.py) and puts the chart back
to the values it found (one replica) at the end: a Deployment going from
RollingUpdate back to Recreate, which the chart must allow.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.kind.kube import (
    NAMESPACE,
    OPERATOR_NAMESPACE,
    apply,
    cordon,
    delete_job,
    get,
    operator_pods,
    run,
    started_pod,
    wait,
    worker_nodes,
)

pytestmark = [pytest.mark.kind, pytest.mark.timeout(15 * 60)]

LEASE_SECONDS = 10
PEERING_LIFETIME_SECONDS = 20
REMOTE_SECONDS = 80
"""How long ha-remote works: past the take-over (~25-45 s after the freeze) and the unfreeze."""

HA_VALUES = f"""
replicas: 2
peeringLifetimeSeconds: {PEERING_LIFETIME_SECONDS}
affinity:
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      - labelSelector:
          matchLabels:
            app.kubernetes.io/instance: leasehold
            app.kubernetes.io/component: operator
        topologyKey: kubernetes.io/hostname
"""


def _job(name: str, command: str) -> str:
    return f"""
apiVersion: leasehold.dev/v1alpha1
kind: LeasedJob
metadata:
  name: {name}
spec:
  leaseDurationSeconds: {LEASE_SECONDS}
  maxAttempts: 3
  template:
    spec:
      serviceAccountName: leasehold-worker
      terminationGracePeriodSeconds: 5
      containers:
        - name: worker
          image: leasehold:0.1.0
          command: ["leasehold", "run", "--", "sh", "-c", "{command}"]
"""


REMOTE = _job("ha-remote", f"echo token $LEASEHOLD_FENCING_TOKEN; sleep {REMOTE_SECONDS}")
# Works for ever under token 1 (on the frozen node), finishes at once under later tokens.
LOCAL = _job("ha-local", "[ $LEASEHOLD_FENCING_TOKEN != 1 ] || sleep 600")


def _time(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def _peers(env: dict[str, str]) -> dict[str, Any]:
    peering: dict[str, Any] = get(env, "kopfpeering", "leasehold")
    return peering.get("status") or {}


def _active(env: dict[str, str]) -> dict[str, str] | None:
    """The working replica (highest peering priority) once both replicas are peers."""
    replicas = {p["name"]: p for p in operator_pods(env)}
    peers = _peers(env)
    if len(replicas) != 2 or set(peers) != set(replicas):
        return None
    top = max(peers, key=lambda name: int(peers[name]["priority"]))
    return replicas[top]


def _renewed(env: dict[str, str], job: str) -> tuple[int, datetime] | None:
    spec = get(env, "jlease", job)["spec"]
    if not spec.get("renewTime") or spec["renewTime"] == spec.get("acquireTime"):
        return None
    return int(spec["fencingToken"]), _time(spec["renewTime"])


def _helm_upgrade(env: dict[str, str], values_flag: str, values: Path) -> None:
    """``helm upgrade`` the chart's release with ``values_flag`` and ``-f values``; wait for it."""
    run(
        env,
        *("helm", "upgrade", "leasehold", "deploy/helm/leasehold", "-n", OPERATOR_NAMESPACE),
        *(values_flag, "-f", str(values), "--wait", "--timeout=5m"),
    )


@pytest.fixture
def ha_env(operator_env: dict[str, str], tmp_path: Path) -> Iterator[dict[str, str]]:
    env = operator_env
    values, before = tmp_path / "ha-values.yaml", tmp_path / "values-before.yaml"
    values.write_text(HA_VALUES)
    before.write_text(
        run(env, "helm", "get", "values", "leasehold", "-n", OPERATOR_NAMESPACE, "-o", "yaml")
    )
    for job in ("ha-remote", "ha-local"):
        run(env, "kubectl", "-n", NAMESPACE, "delete", "ljob", job, "--ignore-not-found")
    _helm_upgrade(env, "--reuse-values", values)
    try:
        yield env
    finally:
        for node in worker_nodes(env):
            run(env, "docker", "unpause", node, check=False)
            run(env, "kubectl", "uncordon", node, check=False)
        for job in ("ha-remote", "ha-local"):
            delete_job(env, job)
        # This test runs last (conftest), and the session then deletes the
        # cluster: the release is put back to one replica only for a cluster
        # that stays (KEEP=1), which saves the rollout's wait (~40 s) otherwise.
        if os.environ.get("KEEP"):
            _helm_upgrade(env, "--reset-values", before)


def test_standby_takes_over_from_a_frozen_node_and_reclaims_nothing_early(
    ha_env: dict[str, str],
) -> None:
    env = ha_env
    active = wait("two operator replicas peering", 120, lambda: _active(env))
    standby = next(p for p in operator_pods(env) if p["name"] != active["name"])
    assert active["node"] != standby["node"]
    # The chart's value reached Kopf: each replica announces it in its peering entry.
    lifetimes = {name: entry.get("lifetime") for name, entry in _peers(env).items()}
    assert set(lifetimes.values()) == {PEERING_LIFETIME_SECONDS}, lifetimes
    print(f"active {active}, standby {standby}")

    # ha-remote on the standby's node, ha-local on the active one's (cordon the other).
    cordon(env, active["node"])
    apply(env, REMOTE)
    remote = wait("ha-remote to run", 120, lambda: started_pod(env, "ha-remote", 1))
    run(env, "kubectl", "uncordon", active["node"])
    cordon(env, standby["node"])
    apply(env, LOCAL)
    local = wait("ha-local to run", 120, lambda: started_pod(env, "ha-local", 1))
    run(env, "kubectl", "uncordon", standby["node"])
    assert remote["node"] == standby["node"] and local["node"] == active["node"]
    wait("ha-remote to renew", 30, lambda: _renewed(env, "ha-remote"))
    wait("ha-local to renew", 30, lambda: _renewed(env, "ha-local"))

    run(env, "docker", "pause", active["node"])
    frozen_at = time.monotonic()
    remote_renewed_at_freeze = _renewed(env, "ha-remote")
    local_renewed_at_freeze = _renewed(env, "ha-local")
    assert local_renewed_at_freeze is not None and local_renewed_at_freeze[0] == 1
    cordon(env, active["node"])

    # The standby takes over (no one else can act) and reclaims ha-local: attempt 2.
    second = wait(
        "ha-local's attempt 2 to run",
        180,
        lambda: started_pod(env, "ha-local", 2),
        lambda: (
            run(
                env, "kubectl", "-n", NAMESPACE, "get", "ljob,jlease,pods,kopfpeering", "-o", "wide"
            )
            + run(env, "kubectl", "-n", OPERATOR_NAMESPACE, "logs", standby["name"], "--tail=40")
        ),
    )
    took_over_after = time.monotonic() - frozen_at
    assert second["node"] == standby["node"]

    history = {
        a["fencingToken"]: a for a in get(env, "ljob", "ha-local")["status"]["attemptHistory"]
    }
    assert history[1]["reason"] == "Reclaimed", history
    # Reclaimed only after the lease expired: attempt 2 was claimed later than token
    # 1's last renewal plus the lease duration (one clock: the nodes are containers).
    silent = (_time(history[2]["startTime"]) - local_renewed_at_freeze[1]).total_seconds()
    assert silent > LEASE_SECONDS, (silent, history)

    # ha-remote kept renewing through the freeze and the take-over: never reclaimed.
    renewed = _renewed(env, "ha-remote")
    assert renewed is not None and remote_renewed_at_freeze is not None
    assert renewed[0] == 1 and renewed[1] > remote_renewed_at_freeze[1]

    # Unfreeze the old active replica: its timers are long past due, yet it reclaims nothing.
    run(env, "docker", "unpause", active["node"])
    wait(
        "ha-local to succeed",
        120,
        lambda: get(env, "ljob", "ha-local")["status"].get("phase") == "Succeeded",
    )
    wait(
        "ha-remote to succeed",
        REMOTE_SECONDS + 60,
        lambda: get(env, "ljob", "ha-remote")["status"].get("phase") == "Succeeded",
    )
    status = get(env, "ljob", "ha-remote")["status"]
    lease = get(env, "jlease", "ha-remote")["spec"]
    print(f"take-over after {took_over_after:.0f}s; ha-remote: {status}")
    assert status["attempts"] == 1, status
    assert lease["fencingToken"] == 1, lease
    assert lease["completion"] == {**lease["completion"], "fencingToken": 1, "outcome": "Succeeded"}
