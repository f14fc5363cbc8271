"""Which status changes of an Indexed job may wait for the next write (issue 29)."""

from __future__ import annotations

from typing import Any

from leasehold.controller.plan.coalesce import may_wait


def status(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "phase": "Running",
        "active": 10,
        "ready": 9,
        "succeeded": 4,
        "failed": 0,
        "completedIndexes": "0-3",
        "completionProgress": "4/100",
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Running",
                "message": "10 of parallelism=10 indexes held; 4 of 100 succeeded.",
                "observedGeneration": 1,
            }
        ],
    }
    base.update(changes)
    return base


def ready(status_: str = "True", reason: str = "Running", message: str = "m") -> dict[str, Any]:
    return {
        "type": "Ready",
        "status": status_,
        "reason": reason,
        "message": message,
        "observedGeneration": 1,
    }


def test_counts_and_a_conditions_message_may_wait() -> None:
    later = status(
        active=9,
        ready=8,
        succeeded=5,
        completedIndexes="0-4",
        completionProgress="5/100",
        conditions=[ready(message="9 of parallelism=10 indexes held; 5 of 100 succeeded.")],
    )
    assert may_wait(status(), later)


def test_the_phase_and_a_conditions_status_or_reason_are_written_at_once() -> None:
    assert not may_wait(status(), status(phase="Succeeded"))
    assert not may_wait(status(), status(conditions=[ready(status_="False")]))
    assert not may_wait(status(), status(conditions=[ready(reason="Waiting")]))
    assert not may_wait(status(), status(conditions=[]))


def test_failed_indexes_and_a_new_number_of_completions_are_written_at_once() -> None:
    # The plan tells a failed index once, by comparing with failedIndexes as written;
    # and a Scaled Event by the completions behind completionProgress.
    assert not may_wait(status(), status(failedIndexes="7"))
    assert not may_wait(status(), status(completionProgress="4/50"))


def test_any_other_field_is_written_at_once() -> None:
    assert not may_wait(status(), status(startTime="2026-12-05T00:00:00Z"))
    assert not may_wait(status(), status(observedGeneration=2))
