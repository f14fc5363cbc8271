"""ttlSecondsAfterFinished: time since the finish, from API server times and a monotonic clock."""

from __future__ import annotations

from typing import Any

from leasehold.controller.engines.ttl import FinishClocks, last_status_write
from leasehold.lease.api import LeasedJob, LeasedJobStatus, Phase
from tests.unit.controller.plan.test_single import NOW, job


class Monotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _body(finished_at: str) -> dict[str, Any]:
    return {
        "metadata": {
            "managedFields": [
                {"manager": "leasehold-operator", "subresource": "status", "time": finished_at},
                {"manager": "kubectl", "time": "2026-11-30T12:00:50Z"},
            ]
        }
    }


def _finished(ttl: int | None) -> LeasedJob:
    spec: dict[str, Any] = {} if ttl is None else {"ttlSecondsAfterFinished": ttl}
    return job(**spec).model_copy(update={"status": LeasedJobStatus(phase=Phase.SUCCEEDED)})


def test_last_status_write_is_the_operators_status_entry() -> None:
    when = last_status_write(_body("2026-11-30T12:00:10Z"), "leasehold-operator")
    assert when is not None and when.isoformat() == "2026-11-30T12:00:10+00:00"
    assert last_status_write({"metadata": {}}, "leasehold-operator") is None


def test_seconds_left_count_from_the_servers_finish_then_the_monotonic_clock() -> None:
    mono = Monotonic()
    clocks = FinishClocks(mono)
    done = _finished(60)
    planned = LeasedJobStatus(phase=Phase.SUCCEEDED)
    server_now = NOW.replace(second=40)  # finished at :10 on the server's clock: 30 s ago
    body = _body("2026-11-30T12:00:10Z")
    assert clocks.seconds_left(done, body, planned, server_now, "leasehold-operator") == 30
    mono.now += 20  # later reads' server times are not compared again
    later = NOW.replace(hour=23)
    assert clocks.seconds_left(done, body, planned, later, "leasehold-operator") == 10


def test_no_ttl_or_not_finished_means_never() -> None:
    clocks = FinishClocks(Monotonic())
    running = LeasedJobStatus(phase=Phase.RUNNING)
    assert clocks.seconds_left(_finished(None), {}, running, NOW, "m") is None
    assert clocks.seconds_left(job(ttlSecondsAfterFinished=5), {}, running, NOW, "m") is None


def test_a_job_finishing_now_counts_from_now() -> None:
    clocks = FinishClocks(Monotonic())
    unfinished = job(ttlSecondsAfterFinished=0)
    finished = LeasedJobStatus(phase=Phase.FAILED)
    assert clocks.seconds_left(unfinished, {}, finished, NOW, "m") == 0
    assert clocks.seconds_left(job(ttlSecondsAfterFinished=9), {}, finished, None, "m") == 9
