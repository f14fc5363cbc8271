"""successPolicy (batch/v1's matchSuccessPolicy), the interval rules, and the interim conditions."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from leasehold.controller.plan import indexed, terminal
from leasehold.controller.plan.single import Action
from leasehold.controller.plan.success_policy import matched_rule
from leasehold.lease.api import ConditionStatus, LeasedJob, LeasedJobStatus, Phase
from leasehold.lease.indexes import interval_total, parse_intervals
from tests.unit.controller.plan.test_indexed import NOW, done, job, lease


def policy(*rules: dict[str, Any], completions: int = 5) -> LeasedJob:
    return job(completions=completions, parallelism=2, successPolicy={"rules": list(rules)})


def test_parse_intervals_reads_batch_jobs_form() -> None:
    assert parse_intervals("1,3-5,7", 8) == [(1, 1), (3, 5), (7, 7)]
    assert interval_total(parse_intervals("1,3-5,7", 8)) == 5
    assert parse_intervals("", 3) == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2,1", "non-increasing order, previous: 2, current: 1"),
        ("1-3,3", "non-increasing order, previous: 3, current: 3"),
        ("2-2", "non-increasing order, previous: 2, current: 2"),  # batch refuses x-x too
        ("5", "too large index: '5'"),
        ("1-2-3", "at most two parts"),
        ("a", "cannot convert string to integer"),
    ],
)
def test_parse_intervals_refuses_what_batch_refuses(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_intervals(text, 5)


def test_the_operator_refuses_intervals_the_schema_cannot_read() -> None:
    with pytest.raises(ValidationError, match=r"rules\[0\].succeededIndexes: error parsing"):
        policy({"succeededIndexes": "3,1"})
    with pytest.raises(ValidationError, match=r"rules\[1\].succeededCount: must be less"):
        policy({"succeededCount": 1}, {"succeededIndexes": "0-2", "succeededCount": 4})


@pytest.mark.parametrize(
    ("rules", "succeeded", "matched"),
    [
        ([{"succeededIndexes": "0"}], {0}, "Matched rules at index 0"),
        ([{"succeededIndexes": "0,2"}], {0}, None),
        ([{"succeededIndexes": "0-2", "succeededCount": 2}], {1, 2}, "Matched rules at index 0"),
        ([{"succeededIndexes": "0-2", "succeededCount": 2}], {2, 3, 4}, None),
        ([{"succeededCount": 3}, {"succeededIndexes": "4"}], {4}, "Matched rules at index 1"),
        ([{"succeededCount": 0}], set(), None),  # batch: nothing succeeded, no match
        ([{"succeededCount": 0}], {3}, "Matched rules at index 0"),
    ],
)
def test_matched_rule_is_batch_jobs_match(
    rules: list[dict[str, Any]], succeeded: set[int], matched: str | None
) -> None:
    assert matched_rule(policy(*rules), succeeded) == matched


def test_a_met_rule_succeeds_the_job_and_stops_the_running_indexes() -> None:
    decided = indexed.plan_indexed(
        policy({"succeededIndexes": "0"}),
        {0: done(0, 1), 1: lease(1, 1, "big-1-1")},
        now=NOW,
    )
    st = decided.status
    assert st.phase == Phase.SUCCEEDED
    assert (st.completed_indexes, st.succeeded, st.active) == ("0", 1, 0)
    complete = next(c for c in st.conditions or [] if c.type == "Complete")
    assert (complete.reason, complete.status) == ("SuccessPolicy", ConditionStatus.TRUE)
    assert [(s.index, s.plan.action) for s in decided.steps] == [(1, Action.STOP)]
    assert decided.delete_pods


def test_a_failure_ends_the_job_before_a_success_policy() -> None:
    decided = indexed.plan_indexed(
        job(
            completions=5,
            activeDeadlineSeconds=10,
            successPolicy={"rules": [{"succeededIndexes": "0"}]},
        ),
        {0: done(0, 1)},
        now=NOW,
        elapsed_seconds=100,
    )
    failed = next(c for c in decided.status.conditions or [] if c.type == "Failed")
    assert failed.reason == "DeadlineExceeded"


# -- interim conditions ----------------------------------------------------------


def _decided_now(succeeded: bool = True) -> LeasedJobStatus:
    j = policy({"succeededIndexes": "0"})
    leases = {0: done(0, 1), 1: lease(1, 1, "big-1-1")}
    if not succeeded:
        j = job(completions=5, cancel=True)
    return indexed.plan_indexed(j, leases, now=NOW).status


def _types(st: LeasedJobStatus) -> dict[str, tuple[str, str | None]]:
    return {c.type: (str(c.status), c.reason) for c in st.conditions or []}


def test_the_final_condition_waits_for_the_pods_and_the_interim_comes_first() -> None:
    j = policy({"succeededIndexes": "0"})
    before = LeasedJobStatus(phase=Phase.RUNNING)
    held = terminal.settle(j, before, _decided_now(), pods_left=1, now=NOW)
    assert held.requeue_after_seconds == terminal.POLL_SECONDS
    assert held.status.phase == Phase.RUNNING
    assert held.status.completion_time is None
    assert _types(held.status)["SuccessCriteriaMet"] == ("True", "SuccessPolicy")
    assert "Complete" not in _types(held.status)
    assert terminal.decided(held.status)

    later = NOW + timedelta(seconds=3)
    still = terminal.settle(j, held.status, held.status, pods_left=1, now=later)
    assert still.status == held.status and not still.finished
    end = terminal.settle(j, held.status, held.status, pods_left=0, now=later)
    assert end.finished and end.status.phase == Phase.SUCCEEDED
    assert _types(end.status)["Complete"] == ("True", "SuccessPolicy")
    met, complete = (
        next(c for c in end.status.conditions or [] if c.type == t)
        for t in ("SuccessCriteriaMet", "Complete")
    )
    assert met.last_transition_time is not None and complete.last_transition_time is not None
    assert met.last_transition_time < complete.last_transition_time == later
    assert end.status.completion_time == later


def test_a_failure_gets_failure_target_and_no_pods_left_ends_at_once() -> None:
    j = job(completions=5, cancel=True)
    end = terminal.settle(j, LeasedJobStatus(), _decided_now(False), pods_left=0, now=NOW)
    assert end.finished and end.status.phase == Phase.FAILED
    types = _types(end.status)
    assert types["FailureTarget"] == types["Failed"] == ("True", "Cancelled")
    assert "SuccessCriteriaMet" not in types


def test_a_pod_that_never_terminates_does_not_wedge_the_job() -> None:
    j = job(completions=5, cancel=True)
    held = terminal.settle(j, LeasedJobStatus(), _decided_now(False), pods_left=1, now=NOW)
    assert not held.finished
    bound = terminal.grace_seconds(j)
    end = terminal.settle(j, held.status, held.status, pods_left=1, now=NOW, waited_seconds=bound)
    assert end.finished and end.status.phase == Phase.FAILED
    failed = next(c for c in end.status.conditions or [] if c.type == "Failed")
    assert f"1 pod(s) still not terminated {bound:.0f}s after the decision" in failed.message


def test_the_wait_for_the_pods_is_timed_on_the_operators_monotonic_clock() -> None:
    # A wall clock stepped back an hour after the decision (NTP, a VM
    # restored) held a decided job Running for that hour; stepped forward,
    # it cut the wait short. Only the monotonic wait counts.
    j = job(completions=5, cancel=True)
    held = terminal.settle(j, LeasedJobStatus(), _decided_now(False), pods_left=1, now=NOW)
    bound = terminal.grace_seconds(j)
    back = NOW - timedelta(hours=1)
    end = terminal.settle(j, held.status, held.status, pods_left=1, now=back, waited_seconds=bound)
    assert end.finished and end.status.phase == Phase.FAILED
    ahead = NOW + timedelta(hours=1)
    still = terminal.settle(j, held.status, held.status, pods_left=1, now=ahead, waited_seconds=1)
    assert not still.finished and still.requeue_after_seconds == terminal.POLL_SECONDS


def test_a_job_finished_before_keeps_its_conditions() -> None:
    j = policy({"succeededIndexes": "0"})
    st = _decided_now()
    assert not terminal.wants_pods(st, st)
    assert terminal.settle(j, st, st, pods_left=3, now=NOW).status == st


def test_a_decided_job_starts_nothing_and_makes_a_refused_stop_again() -> None:
    j = policy({"succeededIndexes": "0"})
    held = terminal.settle(j, LeasedJobStatus(), _decided_now(), pods_left=1, now=NOW).status
    waiting = j.model_copy(update={"status": held})
    # Index 1's stop lost a race with a renewal (409): still held, it is stopped again.
    again = indexed.plan_indexed(waiting, {0: done(0, 1), 1: lease(1, 1, "big-1-1")}, now=NOW)
    assert [(s.index, s.plan.action) for s in again.steps] == [(1, Action.STOP)]
    assert again.status == held
    stopped = lease(1, 1, max_fencing_token=1)
    quiet = indexed.plan_indexed(waiting, {0: done(0, 1), 1: stopped}, now=NOW)
    assert quiet.steps == [] and quiet.status == held  # index 2 on never starts


def test_an_interim_condition_added_through_status_without_reason_or_time_is_held_as_any() -> None:
    # Another client may add conditions through /status with type and status
    # only (as batch/v1's JobCondition allows): the wait counts from when the
    # operator saw it, and the final condition has the type as its reason.
    j = policy({"succeededIndexes": "0"})
    added = LeasedJobStatus.model_validate(
        {"phase": "Running", "conditions": [{"type": "SuccessCriteriaMet", "status": "True"}]}
    )
    assert not terminal.settle(j, added, added, pods_left=1, now=NOW).finished
    bound = terminal.grace_seconds(j)
    end = terminal.settle(j, added, added, pods_left=1, now=NOW, waited_seconds=bound)
    assert end.finished and end.status.phase == Phase.SUCCEEDED
    assert _types(end.status)["Complete"] == ("True", "Complete")
