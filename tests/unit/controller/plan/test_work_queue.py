"""batch/v1's work queue (``completions`` unset, ``parallelism`` above 1), pure planning.

Each worker slot is an index lease; the helpers are those of the Indexed
planner's tests (the same leases, the same sub-job planner).
"""

from __future__ import annotations

from typing import Any

from leasehold.controller.plan import indexed
from leasehold.controller.plan.single import Action
from leasehold.lease.api import LeasedJob, LeasedJobStatus, Phase
from leasehold.lease.protocol import FencingToken, Outcome
from tests.unit.controller.plan.test_indexed import NOW, done, job, lease


def queue(template: bool = True, /, **spec: Any) -> LeasedJob:
    """A work queue of 3 slots (``spec`` overrides)."""
    return job(template, **{"completionMode": "NonIndexed", "parallelism": 3, **spec})


def actions(decided: indexed.IndexedPlan) -> list[tuple[int, Action]]:
    return [(s.index, s.plan.action) for s in decided.steps]


def test_only_parallelism_above_1_without_completions_is_a_work_queue() -> None:
    assert indexed.is_work_queue(queue()) and indexed.is_multi(queue())
    assert not indexed.is_work_queue(queue(parallelism=1))  # today's single job
    assert not indexed.is_multi(queue(parallelism=1))
    assert not indexed.is_work_queue(queue(completions=4))  # several completions
    single_before = queue()
    single_before.status = LeasedJobStatus(lease_name="big")  # an earlier build ran one lease
    assert not indexed.is_multi(single_before)


def test_a_work_queue_starts_parallelism_slots_then_a_slot_more_when_it_rises() -> None:
    decided = indexed.plan_indexed(queue(), {}, now=NOW)
    assert actions(decided) == [(i, Action.CREATE_LEASE) for i in range(3)]
    assert decided.status.completion_progress is None
    assert "worker slots held" in next(c for c in decided.status.conditions or []).message
    held = {i: lease(i, 1, f"big-{i}-1") for i in range(3)}
    assert actions(indexed.plan_indexed(queue(parallelism=4), held, now=NOW)) == [
        *[(i, Action.NONE) for i in range(3)],  # binding the held slots' pods
        (3, Action.CREATE_LEASE),
    ]


def test_a_lowered_parallelism_claims_no_more_and_stops_no_held_slot() -> None:
    leases = {0: lease(0, 1, "big-0-1"), 1: lease(1, 1, "big-1-1"), 2: lease(2, 1)}
    decided = indexed.plan_indexed(queue(parallelism=2), leases, now=NOW)
    # Slot 2 was reclaimed: no free slot for its next claim; the held ones run on.
    assert actions(decided) == [(0, Action.NONE), (1, Action.NONE)]
    assert decided.status.active == 2


def test_no_attempt_starts_after_the_first_success_and_unheld_slots_are_stopped() -> None:
    leases = {
        0: done(0, 1),
        1: lease(1, 1, "big-1-1"),  # held: runs on
        2: lease(2, 1),  # reclaimed: would be claimed again, is stopped instead
        3: done(3, 1, Outcome.FAILED),  # failed within backoffLimit: not retried
    }
    decided = indexed.plan_indexed(queue(parallelism=5, backoffLimit=2), leases, now=NOW)
    assert actions(decided) == [(1, Action.NONE), (2, Action.STOP)]  # no slot 4 either
    told = [e for e in decided.events if e.reason == indexed.SLOTS_STOPPED]
    assert [e.message for e in told] == [
        "Slot(s) 0 succeeded: no attempt starts any more (a work queue ends at its first"
        " success); stopping the slot leases not held (2), so no claim lands on them; 1 held"
        " slot(s) run on."
    ]
    st = decided.status
    assert (st.succeeded, st.active, st.failed, st.phase) == (1, 1, 1, Phase.RUNNING)
    assert not decided.delete_pods


def test_a_held_slot_whose_pod_never_started_is_stopped_after_the_first_success() -> None:
    unbound = lease(1, 1, "big-1-1", holder_uid=None)
    decided = indexed.plan_indexed(queue(), {0: done(0, 1), 1: unbound}, now=NOW)
    assert actions(decided) == [(1, Action.STOP)]


def test_a_work_queue_succeeds_once_no_slot_is_held_and_its_stopped_slots_are_no_failure() -> None:
    stopped = lease(2, 1, max_fencing_token=FencingToken(1))
    leases = {0: done(0, 1), 1: done(1, 1), 2: stopped}
    decided = indexed.plan_indexed(queue(), leases, now=NOW)
    assert decided.status.phase == Phase.SUCCEEDED
    complete = next(c for c in decided.status.conditions or [] if c.type == "Complete")
    assert complete.reason == "Completed" and "2 worker slot(s) succeeded" in complete.message
    assert decided.status.succeeded == 2 and decided.status.failed == 0
    assert decided.steps == [] and decided.delete_pods


def test_a_failure_after_the_first_success_is_counted_against_backoff_limit_as_batch() -> None:
    # pkg/controller/job/job_controller.go judges exceedsBackoffLimit before success.
    leases = {0: done(0, 1), 1: done(1, 1, Outcome.FAILED)}
    decided = indexed.plan_indexed(queue(parallelism=2, backoffLimit=0), leases, now=NOW)
    assert decided.status.phase == Phase.FAILED
    failed = next(c for c in decided.status.conditions or [] if c.type == "Failed")
    assert failed.reason == "BackoffLimitExceeded"
    within = indexed.plan_indexed(queue(parallelism=2, backoffLimit=1), leases, now=NOW)
    assert within.status.phase == Phase.SUCCEEDED and within.status.failed == 1


def test_a_pull_work_queue_opens_parallelism_slots_to_a_pool() -> None:
    open_ = {i: lease(i, 0) for i in range(3)}
    assert actions(indexed.plan_indexed(queue(False), open_, now=NOW)) == []
    after = {**open_, 0: done(0, 1), 1: lease(1, 1, "pool-1", holder_uid=None)}
    decided = indexed.plan_indexed(queue(False), after, now=NOW)
    assert actions(decided) == [(2, Action.STOP)]  # the held slot 1 runs on
