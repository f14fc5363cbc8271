"""Conditions: the operator's always carry a reason and a time; others' may lack both."""

from __future__ import annotations

from datetime import UTC, datetime

from leasehold.controller.plan.conditions import set_condition
from leasehold.lease.api import Condition, ConditionStatus

NOW = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)


def test_a_condition_another_client_wrote_without_reason_or_time_is_kept_and_read() -> None:
    # batch/v1's JobCondition requires only type and status.
    theirs = Condition.model_validate({"type": "StatusUpdate", "status": "True"})
    assert theirs.reason is None and theirs.last_transition_time is None
    out = set_condition(
        [theirs], "Ready", ConditionStatus.TRUE, "Running", "", now=NOW, generation=1
    )
    assert [c.type for c in out] == ["Ready", "StatusUpdate"]
    # Set by the operator with the same status: it gets a reason and a time.
    again = set_condition(
        out, "StatusUpdate", ConditionStatus.TRUE, "Seen", "", now=NOW, generation=1
    )
    mine = next(c for c in again if c.type == "StatusUpdate")
    assert (mine.reason, mine.last_transition_time) == ("Seen", NOW)
