"""The pure parts of the LeasedCronJob controller: final leases, the domain's floor, history."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from leasehold import names
from leasehold.controller.plan.cron import history_to_delete, lease_is_final, reserved_floor
from leasehold.lease.protocol import (
    Completion,
    FencingToken,
    HolderIdentity,
    LeaseRecord,
    Outcome,
)


def record(
    token: int, cap: int | None, holder: str | None = None, done: bool = False
) -> LeaseRecord:
    return LeaseRecord(
        job_name="run",
        holder_identity=HolderIdentity(holder) if holder else None,
        fencing_token=FencingToken(token),
        lease_duration_seconds=30,
        max_fencing_token=None if cap is None else FencingToken(cap),
        completion=Completion(
            FencingToken(token), HolderIdentity("run-1"), Outcome.SUCCEEDED, datetime.now(UTC)
        )
        if done
        else None,
    )


def test_a_lease_is_final_only_when_no_claim_can_ever_take_it_again() -> None:
    assert lease_is_final(record(3, 6, done=True))
    assert lease_is_final(record(3, 3))  # closed or stopped, and unheld
    assert not lease_is_final(record(3, 3, holder="run-3"))  # closed, its attempt still runs
    assert not lease_is_final(record(3, 6))  # the run may claim again
    assert not lease_is_final(record(3, None))


def test_the_floor_is_the_highest_token_any_run_used_or_may_still_use() -> None:
    assert reserved_floor([]) == 0
    assert reserved_floor([record(2, 4), record(5, 5), record(7, None)]) == 7
    assert reserved_floor([record(2, 4), record(1, 9, holder="x")]) == 9


def run(name: str, minute: int, phase: str | None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "annotations": {names.ANNOTATION_SCHEDULED_TIME: f"2026-01-01T10:{minute:02d}:00Z"},
        },
        "status": {"phase": phase} if phase else {},
    }


def test_history_keeps_the_latest_finished_runs_of_each_outcome() -> None:
    runs = [
        run("c-4", 4, "Succeeded"),
        run("c-1", 1, "Succeeded"),
        run("c-2", 2, "Failed"),
        run("c-3", 3, "Failed"),
        run("c-5", 5, "Running"),
        run("c-0", 0, None),
        run("c-6", 6, "Succeeded"),
    ]
    assert history_to_delete(runs, succeeded=2, failed=1) == ["c-1", "c-2"]
    assert history_to_delete(runs, succeeded=0, failed=0) == ["c-1", "c-4", "c-6", "c-2", "c-3"]
    assert history_to_delete(runs, succeeded=5, failed=5) == []
