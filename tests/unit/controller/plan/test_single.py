"""Pure reconcile decisions and pod building (golden files)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from leasehold.controller.plan import single as reconcile
from leasehold.controller.plan.conditions import set_condition
from leasehold.controller.plan.pod import build_pod, pod_name
from leasehold.controller.plan.single import Action
from leasehold.lease.api import AttemptRecord, ConditionStatus, LeasedJob, LeasedJobStatus, Phase
from leasehold.lease.protocol import Completion, FencingToken, HolderIdentity, LeaseRecord, Outcome

DATA = Path(__file__).resolve().parents[3] / "data" / "reconcile"
NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def job(template: bool = True, **spec: Any) -> LeasedJob:
    body: dict[str, Any] = {
        "metadata": {"name": "hello", "namespace": "ns", "uid": "u-1", "generation": 2},
        "spec": {"leaseDurationSeconds": 10, "maxAttempts": 3, **spec},
    }
    if template:
        body["spec"]["template"] = {
            "metadata": {"labels": {"team": "a"}},
            "spec": {
                "containers": [
                    {
                        "name": "w",
                        "image": "busybox",
                        "command": ["sh", "-c", "echo hi"],
                        "env": [
                            {"name": "A", "value": "1"},
                            {"name": "LEASEHOLD_FENCING_TOKEN", "value": "999"},
                        ],
                    }
                ]
            },
        }
    return LeasedJob.model_validate(body)


def lease(token: int, holder: str | None = None, **kw: Any) -> LeaseRecord:
    kw.setdefault("job_uid", "u-1")
    return LeaseRecord(
        job_name="hello",
        holder_identity=HolderIdentity(holder) if holder else None,
        fencing_token=FencingToken(token),
        lease_duration_seconds=10,
        **kw,
    )


def test_build_pod_matches_golden_file() -> None:
    pod = build_pod(
        job(), namespace="ns", holder="hello-7", token=7, owner_uid="u-1", lease_duration_seconds=10
    )
    golden = DATA / "pod-hello-7.json"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(json.dumps(pod, indent=2, sort_keys=True) + "\n")
    assert pod == json.loads(golden.read_text())


def test_build_pod_overrides_a_user_supplied_token_env() -> None:
    pod = build_pod(
        job(), namespace="ns", holder="hello-7", token=7, owner_uid="u-1", lease_duration_seconds=10
    )
    env = pod["spec"]["containers"][0]["env"]
    tokens = [e["value"] for e in env if e["name"] == "LEASEHOLD_FENCING_TOKEN"]
    assert tokens == ["7"]


def test_build_pod_refuses_pull_mode() -> None:
    with pytest.raises(ValueError, match="pull mode"):
        build_pod(
            job(template=False),
            namespace="ns",
            holder="x",
            token=1,
            owner_uid="u",
            lease_duration_seconds=10,
        )


def test_build_pod_takes_the_lease_duration_from_the_lease_not_the_spec() -> None:
    pod = build_pod(
        job(leaseDurationSeconds=60),
        namespace="ns",
        holder="hello-7",
        token=7,
        owner_uid="u-1",
        lease_duration_seconds=10,
    )
    env = pod["spec"]["containers"][0]["env"]
    assert [e["value"] for e in env if e["name"] == "LEASEHOLD_LEASE_DURATION_SECONDS"] == ["10"]


def test_attempt_limit_is_the_lower_of_spec_and_lease_cap() -> None:
    # A spec raised past the lease's cap (which the server never lets go up)
    # must end the job, not retry a refused claim for ever.
    p = reconcile.plan(
        job(maxAttempts=5),
        lease(3, max_fencing_token=FencingToken(3)),
        now=NOW,
        pod_created_for_holder=False,
    )
    assert p.action is Action.STOP
    assert p.status.phase == Phase.FAILED
    failed = next(c for c in p.status.conditions or [] if c.type == "Failed")
    assert "All 3 attempts" in failed.message


def test_no_lease_creates_one() -> None:
    plan = reconcile.plan(job(), None, now=NOW, pod_created_for_holder=False)
    assert plan.action is Action.CREATE_LEASE
    assert plan.status.phase == Phase.PENDING
    assert plan.status.start_time == NOW


def seen_history(j: LeasedJob) -> list[AttemptRecord]:
    return list(j.status.attempt_history or []) if j.status else []


def test_unheld_lease_is_claimed_for_the_next_pod_after_the_backoff() -> None:
    # Attempt 1 was reclaimed: the next waits spec.backoff's delay, as after a failure.
    running = AttemptRecord(fencing_token=1, pod_name="hello-1", start_time=NOW)
    opened = job().model_copy(update={"status": LeasedJobStatus(attempt_history=[running])})
    waiting = reconcile.plan(opened, lease(1), now=NOW, pod_created_for_holder=False)
    assert (waiting.action, waiting.requeue_after_seconds) == (Action.NONE, 10)
    assert waiting.status.next_attempt_after == NOW + timedelta(seconds=10)
    assert [e.reason for e in waiting.events] == ["BackingOff"]
    seen = job().model_copy(update={"status": waiting.status})
    early = reconcile.plan(
        seen, lease(1), now=NOW + timedelta(seconds=9), pod_created_for_holder=False
    )
    assert (early.action, early.events) == (Action.NONE, [])
    later = NOW + timedelta(seconds=10)
    plan = reconcile.plan(seen, lease(1), now=later, pod_created_for_holder=False)
    assert plan.action is Action.CLAIM_AND_START
    assert plan.pod_name == "hello-2"
    assert plan.delete_pods_below_token == 2
    assert plan.status.next_attempt_after is None
    # The second reclaim waits twice as long (failures and reclaims count alike).
    two = AttemptRecord(fencing_token=2, pod_name="hello-2", start_time=NOW)
    with_two = job().model_copy(
        update={"status": LeasedJobStatus(attempt_history=[*(seen_history(seen)), two])}
    )
    second = reconcile.plan(with_two, lease(2), now=later, pod_created_for_holder=False)
    assert second.requeue_after_seconds == 20
    # The first attempt, and one after an excused attempt, start at once.
    fresh = reconcile.plan(job(), lease(0), now=NOW, pod_created_for_holder=False)
    assert fresh.action is Action.CLAIM_AND_START
    excused = lease(1, last_uncounted_token=FencingToken(1), uncounted_attempts=1)
    assert reconcile.plan(job(), excused, now=NOW, pod_created_for_holder=False).action is (
        Action.CLAIM_AND_START
    )


def test_held_lease_whose_pod_was_never_created_starts_it() -> None:
    plan = reconcile.plan(job(), lease(2, "hello-2"), now=NOW, pod_created_for_holder=False)
    assert plan.action is Action.START_POD
    plan = reconcile.plan(job(), lease(2, "hello-2"), now=NOW, pod_created_for_holder=True)
    assert plan.action is Action.NONE
    assert plan.status.phase == Phase.RUNNING
    assert (plan.status.holder_identity, plan.status.fencing_token) == ("hello-2", 2)


def test_held_by_a_foreign_holder_starts_nothing() -> None:
    plan = reconcile.plan(job(), lease(2, "someone"), now=NOW, pod_created_for_holder=False)
    assert plan.action is Action.NONE


def test_exhausted_attempts_fail_the_job() -> None:
    plan = reconcile.plan(job(), lease(3), now=NOW, pod_created_for_holder=False)
    assert plan.action is Action.STOP
    assert plan.status.phase == Phase.FAILED
    failed = next(c for c in plan.status.conditions or [] if c.type == "Failed")
    assert (failed.status, failed.reason) == (ConditionStatus.TRUE, "AttemptsExhausted")
    assert failed.observed_generation == 2
    assert [e.reason for e in plan.events] == ["AttemptsExhausted"]


def test_deadline_fails_the_job() -> None:
    j = job(activeDeadlineSeconds=60)
    early = reconcile.plan(
        j, lease(1, "hello-1"), now=NOW, pod_created_for_holder=True, elapsed_seconds=15
    )
    assert early.action is Action.NONE
    assert early.requeue_after_seconds == 45  # the timer: looked at again when it is due
    j.status = early.status
    later = reconcile.plan(
        j, lease(1, "hello-1"), now=NOW, pod_created_for_holder=True, elapsed_seconds=60
    )
    assert later.action is Action.STOP
    assert later.status.phase == Phase.FAILED
    assert later.delete_pods_below_token == 2
    assert later.requeue_after_seconds is None


def test_deadline_ignores_the_wall_clock() -> None:
    # The wall clock a day ahead of the start time says nothing: elapsed does.
    j = job(activeDeadlineSeconds=3600)
    j.status = reconcile.plan(j, lease(1, "hello-1"), now=NOW, pod_created_for_holder=True).status
    tomorrow = reconcile.plan(
        j,
        lease(1, "hello-1"),
        now=NOW + timedelta(days=1),
        pod_created_for_holder=True,
        elapsed_seconds=4,
    )
    assert tomorrow.action is Action.NONE
    assert tomorrow.status.phase == Phase.RUNNING


def test_completion_finishes_the_job() -> None:
    done = Completion(FencingToken(2), HolderIdentity("hello-2"), Outcome.SUCCEEDED, NOW)
    plan = reconcile.plan(job(), lease(2, completion=done), now=NOW, pod_created_for_holder=True)
    assert plan.action is Action.NONE
    assert plan.status.phase == Phase.SUCCEEDED
    assert plan.status.completion is not None
    assert plan.status.completion.fencing_token == 2
    assert plan.status.completion_time == NOW
    failed = reconcile.plan(
        job(),
        lease(
            2,
            completion=Completion(
                FencingToken(2), HolderIdentity("hello-2"), Outcome.FAILED, NOW, "exit code 3", 3
            ),
        ),
        now=NOW,
        pod_created_for_holder=True,
    )
    assert failed.status.phase == Phase.FAILED
    assert "exit code 3" in failed.events[0].message


def test_finished_job_is_left_alone() -> None:
    j = job()
    first = reconcile.plan(j, lease(3), now=NOW, pod_created_for_holder=False)
    assert first.action is Action.STOP  # attempts used up: the lease is taken back
    j.status = first.status
    stopped = lease(3, max_fencing_token=3)  # as the stop left it
    again = reconcile.plan(j, stopped, now=NOW + timedelta(hours=1), pod_created_for_holder=False)
    assert again.action is Action.NONE
    assert again.status == j.status
    # A stop still owed (its write lost or refused) is made again.
    owed = reconcile.plan(j, lease(3), now=NOW + timedelta(hours=1), pod_created_for_holder=False)
    assert owed.action is Action.STOP and owed.status == j.status


def test_pull_mode_waits_for_a_worker() -> None:
    plan = reconcile.plan(job(template=False), lease(0), now=NOW, pod_created_for_holder=False)
    assert plan.action is Action.NONE
    assert plan.status.phase == Phase.PENDING
    assert plan.delete_pods_below_token == 0


def test_transition_time_moves_only_when_status_flips() -> None:
    first = set_condition([], "Ready", ConditionStatus.TRUE, "Running", "a", now=NOW, generation=1)
    same = set_condition(
        first, "Ready", ConditionStatus.TRUE, "Running", "b", now=NOW + timedelta(1), generation=2
    )
    assert same[0].last_transition_time == NOW
    assert same[0].message == "b"
    flipped = set_condition(
        same, "Ready", ConditionStatus.FALSE, "Failed", "c", now=NOW + timedelta(2), generation=2
    )
    assert flipped[0].last_transition_time == NOW + timedelta(2)


def test_pod_name_is_cut_to_a_valid_length() -> None:
    name = pod_name("x" * 253, 12)
    assert len(name) == 253
    assert name.endswith("-12")


def test_a_lease_of_an_earlier_incarnation_is_taken_over_not_used() -> None:
    completed = Completion(
        fencing_token=FencingToken(2),
        holder_identity=HolderIdentity("hello-2"),
        outcome=Outcome.SUCCEEDED,
        complete_time=NOW,
    )
    for old in (lease(2, job_uid="u-0", completion=completed), lease(2, "hello-2", job_uid="u-0")):
        decided = reconcile.plan(job(), old, now=NOW, pod_created_for_holder=False)
        assert decided.action is reconcile.Action.TAKE_OVER_LEASE
        assert decided.status.completion is None
        assert decided.pod_name is None


def test_a_lease_made_ahead_for_the_job_is_taken_over_without_naming_an_earlier_job() -> None:
    # A LeasedCronJob makes each run's lease (no job UID yet) before the run's job.
    ahead = reconcile.plan(job(), lease(7, job_uid=None), now=NOW, pod_created_for_holder=False)
    earlier = reconcile.plan(job(), lease(7, job_uid="u-0"), now=NOW, pod_created_for_holder=False)
    assert ahead.action is earlier.action is reconcile.Action.TAKE_OVER_LEASE
    assert [e.reason for e in ahead.events] == ["TakingOverLease"]
    assert "earlier job" not in ahead.events[0].message
    assert "prepared for this job at fencing token 7" in ahead.events[0].message
    assert "earlier job named hello" in earlier.events[0].message


def test_attempts_count_from_the_incarnations_base_token() -> None:
    taken_over = lease(5, base_fencing_token=FencingToken(5))
    decided = reconcile.plan(job(), taken_over, now=NOW, pod_created_for_holder=False)
    assert decided.action is reconcile.Action.CLAIM_AND_START
    assert decided.pod_name == "hello-6"
    assert decided.status.attempts == 0


def failed_at(token: int, exit_code: int = 3) -> Completion:
    return Completion(
        fencing_token=FencingToken(token),
        holder_identity=HolderIdentity(f"hello-{token}"),
        outcome=Outcome.FAILED,
        complete_time=NOW,
        exit_code=exit_code,
    )


def test_failure_within_backoff_limit_is_retried_after_the_delay() -> None:
    spec: dict[str, Any] = {"backoffLimit": 2, "backoff": {"initialDelaySeconds": 10, "factor": 3}}
    failed = lease(2, completion=failed_at(2), failures=1, last_failure=failed_at(1))
    p = reconcile.plan(job(**spec), failed, now=NOW, pod_created_for_holder=False)
    # The second failure: 10 * 3 s; the lease stays completed until then.
    assert p.action is Action.NONE
    assert p.requeue_after_seconds == 30
    assert p.status.next_attempt_after == NOW + timedelta(seconds=30)
    assert p.status.failed == 2
    assert [e.reason for e in p.events] == ["BackingOff"]
    seen = job(**spec).model_copy(update={"status": p.status})
    again = reconcile.plan(
        seen, failed, now=NOW + timedelta(seconds=5), pod_created_for_holder=False
    )
    assert (again.action, again.requeue_after_seconds, again.events) == (Action.NONE, 25, [])
    due = reconcile.plan(
        seen, failed, now=NOW + timedelta(seconds=30), pod_created_for_holder=False
    )
    assert due.action is Action.RETRY
    # Reopened: the next claim at once, the history says attempt 2 failed.
    reopened = lease(2, failures=2, last_failure=failed_at(2))
    history = [
        AttemptRecord(fencing_token=2, pod_name="hello-2", start_time=NOW)  # still open
    ]
    open_job = job(**spec).model_copy(
        update={"status": p.status.model_copy(update={"attempt_history": history})}
    )
    claim = reconcile.plan(open_job, reopened, now=NOW, pod_created_for_holder=False)
    assert claim.action is Action.CLAIM_AND_START
    assert claim.pod_name == "hello-3"
    assert claim.status.attempt_history is not None
    assert [(a.reason, a.exit_code) for a in claim.status.attempt_history] == [("Failed", 3)]
    assert claim.status.next_attempt_after is None


def test_failure_past_backoff_limit_fails_the_job() -> None:
    p = reconcile.plan(
        job(backoffLimit=1),
        lease(2, completion=failed_at(2), failures=1, last_failure=failed_at(1)),
        now=NOW,
        pod_created_for_holder=False,
    )
    assert p.action is Action.NONE
    assert p.status.phase == Phase.FAILED
    assert p.status.failed == 2
    assert [e.reason for e in p.events] == ["BackoffLimitExceeded"]


def test_a_failure_at_the_default_backoff_limit_of_zero_is_backoff_limit_exceeded() -> None:
    # Issue 28: batch/v1 says BackoffLimitExceeded at backoffLimit 0 too (it was WorkerFailed).
    p = reconcile.plan(
        job(), lease(1, completion=failed_at(1)), now=NOW, pod_created_for_holder=False
    )
    assert p.status.phase == Phase.FAILED
    failed = next(c for c in p.status.conditions or [] if c.type == "Failed")
    assert failed.reason == "BackoffLimitExceeded"


def test_reclaims_and_failures_draw_from_separate_budgets() -> None:
    # maxAttempts=3: two failures reopened do not use it up.
    p = reconcile.plan(
        job(backoffLimit=2, backoff={"initialDelaySeconds": 0, "maxDelaySeconds": 0}),
        lease(3, failures=2, last_failure=failed_at(1)),
        now=NOW,
        pod_created_for_holder=False,
    )
    assert p.action is Action.CLAIM_AND_START
    exhausted = reconcile.plan(
        job(backoffLimit=2),
        lease(5, failures=2, last_failure=failed_at(1)),
        now=NOW,
        pod_created_for_holder=False,
    )
    assert exhausted.action is Action.STOP


def test_cancel_stops_the_lease_and_fails_the_job() -> None:
    p = reconcile.plan(job(cancel=True), lease(2, "hello-2"), now=NOW, pod_created_for_holder=True)
    assert p.action is Action.STOP
    assert p.status.phase == Phase.FAILED
    assert p.delete_pods_below_token == 3
    assert [e.reason for e in p.events] == ["Cancelled"]


def test_history_opens_and_ends_attempts() -> None:
    running = reconcile.plan(
        job(),
        lease(1, "hello-1", acquire_time=NOW),
        now=NOW,
        pod_created_for_holder=True,
        pods={1: reconcile.PodFacts(uid="uid-1", node_name="n1", exit_code=None)},
    )
    history = running.status.attempt_history
    assert history is not None
    assert [(a.fencing_token, a.pod_uid, a.node_name, a.reason) for a in history] == [
        (1, "uid-1", "n1", None)
    ]
    # Reclaimed, then claimed again: attempt 1 ended as Reclaimed, 2 opened.
    later = NOW + timedelta(seconds=5)
    moved = reconcile.plan(
        job().model_copy(update={"status": running.status}),
        lease(2, "hello-2", acquire_time=later),
        now=later,
        pod_created_for_holder=True,
    )
    history = moved.status.attempt_history
    assert history is not None
    assert [(a.fencing_token, a.reason, a.end_time) for a in history] == [
        (1, "Reclaimed", later),
        (2, None, None),
    ]


def test_history_keeps_the_last_ten() -> None:
    status = None
    for token in range(1, 13):
        j = job(maxAttempts=20)
        if status is not None:
            j = j.model_copy(update={"status": status})
        status = reconcile.plan(
            j, lease(token, f"hello-{token}"), now=NOW, pod_created_for_holder=True
        ).status
    assert status is not None and status.attempt_history is not None
    assert [a.fencing_token for a in status.attempt_history] == list(range(3, 13))
    assert status.last_attempt_reason is None  # attempt 12 is running
    assert status.attempt_history[-2].reason == "Reclaimed"


def test_cancel_while_backing_off_ends_the_job_cancelled() -> None:
    p = reconcile.plan(
        job(backoffLimit=2, cancel=True),
        lease(1, completion=failed_at(1)),
        now=NOW,
        pod_created_for_holder=False,
    )
    assert (p.action, p.status.phase) == (Action.NONE, Phase.FAILED)
    assert [e.reason for e in p.events] == ["Cancelled"]


def test_a_pod_that_exits_0_without_a_completion_gets_a_warning_naming_leasehold_run() -> None:
    running = AttemptRecord(fencing_token=1, pod_name="hello-1", start_time=NOW)
    opened = job().model_copy(update={"status": LeasedJobStatus(attempt_history=[running])})

    def ended(exit_code: int | None) -> list[str]:
        facts = {1: reconcile.PodFacts(uid="uid-1", node_name="n1", exit_code=exit_code)}
        plan = reconcile.plan(opened, lease(1), now=NOW, pod_created_for_holder=False, pods=facts)
        history = plan.status.attempt_history or []
        assert (history[0].reason, history[0].exit_code) == ("Reclaimed", exit_code)
        return [e.message for e in plan.events if e.reason == "ExitedWithoutCompletion"]

    [warning] = ended(0)  # reclaimed, though its command ended well: not wrapped
    assert "hello-1 exited 0" in warning and "leasehold run --" in warning
    assert ended(3) == []  # a crash is an ordinary reclaim
    assert ended(None) == []  # still running when reclaimed (a stall)


def test_an_attempt_that_succeeded_before_its_pod_was_seen_bound_still_gets_its_node() -> None:
    """A short command on a busy operator: the pod watch's memory fills the node in."""
    done = Completion(FencingToken(1), HolderIdentity("hello-1"), Outcome.SUCCEEDED, NOW)
    open_attempt = AttemptRecord(fencing_token=1, pod_name="hello-1", start_time=NOW)
    seen = job().model_copy(update={"status": LeasedJobStatus(attempt_history=[open_attempt])})
    finished = lease(1, completion=done)
    assert reconcile.wants_pod_facts(seen, finished)
    # A success is not judged by its pod: the memory of the pod watch is enough.
    assert not reconcile.pod_facts_judge_an_end(finished)
    assert reconcile.pod_facts_judge_an_end(lease(1))  # ended without a completion
    pods = {1: reconcile.PodFacts(uid="uid-1", node_name="n1", exit_code=0)}
    plan = reconcile.plan(seen, finished, now=NOW, pod_created_for_holder=True, pods=pods)
    assert plan.status.phase == Phase.SUCCEEDED
    assert [(a.node_name, a.pod_uid) for a in plan.status.attempt_history or []] == [
        ("n1", "uid-1")
    ]
    # Once known, nothing more is read (even before the phase is written).
    filled = plan.status.model_copy(update={"phase": Phase.RUNNING})
    known = job().model_copy(update={"status": filled})
    assert not reconcile.wants_pod_facts(known, finished)


def decided(type_: str, **condition: Any) -> LeasedJobStatus:
    """A status decided (the interim condition true) and held in its phase while pods end."""
    cond = {"type": type_, "status": "True", **condition}
    return LeasedJobStatus.model_validate({"phase": "Running", "conditions": [cond]})


def test_a_decided_job_past_its_deadline_is_not_planned_again_at_once() -> None:
    # Its phase is held at Running while its stopped pod terminates: the
    # deadline's timer (0 s left) must not requeue it at once, again and again.
    j = job(activeDeadlineSeconds=60)
    j.status = decided("FailureTarget", reason="DeadlineExceeded", lastTransitionTime=NOW)
    stopped = lease(1, None, max_fencing_token=1)
    p = reconcile.plan(j, stopped, now=NOW, pod_created_for_holder=True, elapsed_seconds=120)
    assert p.action is Action.NONE
    assert p.requeue_after_seconds is None


def test_a_decided_job_reads_no_pods_for_its_plan() -> None:
    # Cancelled: its lease stopped without a completion, an end its pods would
    # judge; decided, the plan reads none (it plans nothing), so its reconciles
    # while the pod terminates list no pods (each one listed them before).
    stopped = lease(1, None, max_fencing_token=1)
    running = AttemptRecord(fencing_token=1, pod_name="hello-1", start_time=NOW)
    undecided = job(cancel=True)
    undecided.status = LeasedJobStatus(phase=Phase.RUNNING, attempt_history=[running])
    assert reconcile.wants_pod_facts(undecided, stopped)
    j = job(cancel=True)
    j.status = decided("FailureTarget", reason="Cancelled", lastTransitionTime=NOW)
    j.status.attempt_history = [running]
    assert not reconcile.wants_pod_facts(j, stopped)
    assert reconcile.plan(j, stopped, now=NOW, pod_created_for_holder=True).action is Action.NONE


def test_a_decision_written_by_another_client_stops_the_jobs_held_lease() -> None:
    # A SuccessCriteriaMet added through /status (type and status only) while
    # the lease is held: the operator finishes the job, so it takes the lease
    # back first; a completion that landed, or another incarnation's lease, stands.
    j = job()
    j.status = decided("SuccessCriteriaMet")
    held = reconcile.plan(j, lease(1, "hello-1"), now=NOW, pod_created_for_holder=True)
    assert held.action is Action.STOP
    assert held.delete_pods_below_token == 2
    ended = Completion(FencingToken(1), HolderIdentity("hello-1"), Outcome.SUCCEEDED, NOW)
    done = lease(1, None, completion=ended)
    assert reconcile.plan(j, done, now=NOW, pod_created_for_holder=True).action is Action.NONE
    other = lease(1, "hello-1", job_uid="u-0")
    assert reconcile.plan(j, other, now=NOW, pod_created_for_holder=True).action is Action.NONE


def _started(token: int) -> LeasedJob:
    """The job as stored once its attempt under ``token`` was started, never seen held."""
    status = LeasedJobStatus(fencing_token=token, pod_name=f"hello-{token}", attempts=token)
    return job(maxAttempts=1).model_copy(update={"status": status})


def test_an_attempt_reclaimed_before_any_plan_saw_it_held_is_in_the_history() -> None:
    """A busy operator's next reconcile finds the claim reclaimed already: the attempt counts.

    The job failed with its attempt missing from ``attemptHistory`` and no
    ``lastAttemptReason`` before (kind, 200 jobs at once).
    """
    plan = reconcile.plan(_started(1), lease(1), now=NOW, pod_created_for_holder=False)
    assert plan.status.phase == Phase.FAILED
    [attempt] = plan.status.attempt_history or []
    assert (attempt.fencing_token, attempt.pod_name, attempt.reason) == (1, "hello-1", "Reclaimed")
    assert attempt.end_time == NOW
    assert plan.status.last_attempt_reason == "Reclaimed"


def test_an_attempt_completed_before_any_plan_saw_it_held_is_in_the_history() -> None:
    done = Completion(FencingToken(1), HolderIdentity("hello-1"), Outcome.SUCCEEDED, NOW)
    plan = reconcile.plan(
        _started(1), lease(1, completion=done), now=NOW, pod_created_for_holder=False
    )
    assert plan.status.phase == Phase.SUCCEEDED
    assert [(a.fencing_token, a.reason) for a in plan.status.attempt_history or []] == [
        (1, "Succeeded")
    ]


def test_no_attempt_is_made_up_for_a_token_this_job_did_not_start() -> None:
    """A lease at a token the job's status never recorded (a take-over, a base) adds none."""
    plan = reconcile.plan(job(), lease(1), now=NOW, pod_created_for_holder=False)
    assert not plan.status.attempt_history
    based = lease(1, base_fencing_token=FencingToken(1))
    plan = reconcile.plan(_started(1), based, now=NOW, pod_created_for_holder=False)
    assert not plan.status.attempt_history


def test_a_burnt_token_only_observed_is_not_recorded_as_an_attempt() -> None:
    """Token 2 claimed and burnt (pod name taken by someone else), then seen suspended.

    The stored status has the lease's token 2 (observed) but attempt 1's pod
    name: this job started no attempt under token 2, so none is recorded.
    """
    status = LeasedJobStatus(fencing_token=2, pod_name="hello-1", attempts=2)
    seen = job().model_copy(update={"status": status})
    plan = reconcile.plan(seen, lease(2, suspended=True), now=NOW, pod_created_for_holder=False)
    assert not plan.status.attempt_history


def test_an_attempt_ended_unseen_keeps_its_pods_exit_code() -> None:
    facts = reconcile.PodFacts(uid="p-1", node_name="n", exit_code=3, phase="Failed")
    plan = reconcile.plan(
        _started(1), lease(1), now=NOW, pod_created_for_holder=False, pods={1: facts}
    )
    [attempt] = plan.status.attempt_history or []
    assert (attempt.reason, attempt.exit_code, attempt.pod_uid) == ("Reclaimed", 3, "p-1")
