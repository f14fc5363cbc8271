"""Named fault schedules: published incident classes the chaos run replays by name.

``python -m chaos.run --scenario NAME`` runs the scenario's steps, in order,
as the fault schedule of the faulty phase (instead of the seeded random
faults); the workload and both checkers are the same. Each step waits for
something to hit (a worker running) before it injects, so a scenario is not
used up on an idle system.

* ``partition-during-write`` — a network partition between a worker and
  everything else, longer than the lease, while its fenced write is in flight
  (the write is held, not lost, and delivered after the partition heals,
  around the next holder's writes): the lock-service failure that fencing
  tokens exist for (a lease expires while its holder's write is on the wire).
* ``gc-pause-past-lease`` — every running worker stops (as in a long garbage
  collection or VM freeze) for longer than the lease plus the operator's
  margin, then resumes as if nothing happened, possibly between its lease
  check and its write (the HBase/Redlock process-pause incident).
* ``apiserver-restart-during-renew`` — the API server goes away for longer
  than the lease while renewals are in flight (control-plane upgrades and
  restarts): workers' renewals fail, their local deadlines pass, and the
  operator reclaims only once the API server is back.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

LEASE_SECONDS = 3
"""The chaos jobs' leaseDurationSeconds (as :data:`chaos.run.LEASE_SECONDS`)."""


class Faults(Protocol):
    """What a step uses of the chaos run (:class:`chaos.run.Run`)."""

    api_proxy: Any
    db_proxy: Any
    runner: Any
    cluster: Any

    def running_pods(self) -> list[str]:
        """Names of the pods whose processes run now."""
        ...

    def fault(self, kind: str, **detail: Any) -> None:
        """Record an injected fault in the history."""
        ...


Step = Callable[[Faults], bool]
"""One fault of a scenario; returns False when there was nothing to hit yet."""


@dataclass(frozen=True)
class Scenario:
    """A named fault schedule.

    Attributes:
        name: the name ``--scenario`` takes.
        incident: the incident class it replays, in one line.
        steps: the faults, in order.
    """

    name: str
    incident: str
    steps: Sequence[Step]


def partition_during_write(run: Faults) -> bool:
    """Partition the workers from the API server and PostgreSQL past their lease.

    Writes in flight are held (``hold``) and delivered when the partition
    heals; renewals are lost (``blackhole``), so the operator, which still
    reaches the API server, reclaims and starts new attempts; the API side
    heals first, so new attempts run while the old writes are still held.
    """
    if not run.running_pods():
        return False
    seconds = LEASE_SECONDS + 2.0
    run.fault("partition-during-write", seconds=seconds)
    run.db_proxy.hold()
    run.api_proxy.blackhole()
    time.sleep(seconds)
    run.api_proxy.restore()
    run.api_proxy.drop_connections()  # stranded renewals fail now, not at their timeout
    time.sleep(LEASE_SECONDS)
    run.db_proxy.release()
    return True


def gc_pause_past_lease(run: Faults) -> bool:
    """Stop every running worker past its lease and the operator's margin, then resume."""
    pods = run.running_pods()
    if not pods:
        return False
    seconds = LEASE_SECONDS + 3.0
    paused = []
    for pod in pods:
        with contextlib.suppress(LookupError):
            run.runner.pause("chaos", pod)
            paused.append(pod)
    run.fault("gc-pause-past-lease", pods=len(paused), seconds=seconds)
    time.sleep(seconds)
    for pod in paused:
        with contextlib.suppress(LookupError):
            run.runner.resume("chaos", pod)
    return True


def apiserver_restart_during_renew(run: Faults) -> bool:
    """Take the API server down past the lease while workers renew."""
    if not run.running_pods():
        return False
    seconds = LEASE_SECONDS + 1.0
    run.fault("apiserver-restart-during-renew", seconds=seconds)
    run.cluster.restart("kube-apiserver", down_seconds=seconds)
    return True


def _pause(seconds: float) -> Step:
    """A quiet step: the system runs without faults for ``seconds``."""

    def step(run: Faults) -> bool:
        time.sleep(seconds)
        return True

    return step


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "partition-during-write",
            "a worker partitioned longer than its lease while its fenced write is in flight",
            (partition_during_write, _pause(4), partition_during_write),
        ),
        Scenario(
            "gc-pause-past-lease",
            "a worker process paused (GC, VM freeze) past its lease, resuming mid-write",
            (gc_pause_past_lease, _pause(3), gc_pause_past_lease, _pause(3), gc_pause_past_lease),
        ),
        Scenario(
            "apiserver-restart-during-renew",
            "the API server down longer than the lease while renewals are in flight",
            (apiserver_restart_during_renew, _pause(5), apiserver_restart_during_renew),
        ),
    )
}
"""The named scenarios, by name."""
