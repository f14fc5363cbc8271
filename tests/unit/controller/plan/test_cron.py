"""The pure parts of the LeasedCronJob controller: its decisions, final leases, floor, history."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from leasehold import names
from leasehold.controller.plan import cron as plan
from leasehold.controller.plan.cron import history_to_delete, reserved_floor
from leasehold.lease import api
from leasehold.lease.api import ConcurrencyPolicy, LeasedCronJobStatus
from leasehold.lease.protocol import (
    Completion,
    FencingToken,
    HolderIdentity,
    LeaseRecord,
    Outcome,
    lease_is_final,
)


def record(
    token: int,
    cap: int | None,
    holder: str | None = None,
    done: bool = False,
    *,
    ceiling: int | None = None,
    outcome: Outcome = Outcome.SUCCEEDED,
) -> LeaseRecord:
    return LeaseRecord(
        job_name="run",
        holder_identity=HolderIdentity(holder) if holder else None,
        fencing_token=FencingToken(token),
        lease_duration_seconds=30,
        max_fencing_token=None if cap is None else FencingToken(cap),
        ceiling_fencing_token=None if ceiling is None else FencingToken(ceiling),
        completion=Completion(
            FencingToken(token), HolderIdentity("run-1"), outcome, datetime.now(UTC)
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


# -- the decisions (plan/cron.py) ------------------------------------------------

CREATED = "2026-01-01T09:00:00Z"
T10 = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Lease:
    """A run's lease as the decisions see it (the store's StoredLease in the actor)."""

    name: str
    record: LeaseRecord


def cron_body(
    name: str = "nightly", status: dict[str, Any] | None = None, **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": names.API_VERSION,
        "kind": "LeasedCronJob",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": "cron-uid",
            "generation": 4,
            "resourceVersion": "100",
            "creationTimestamp": CREATED,
        },
        "spec": {
            "schedule": "0 * * * *",
            **spec,
            "jobTemplate": {
                "metadata": {"labels": {"team": "tests"}, "annotations": {"a": "b"}},
                "spec": {"maxAttempts": 3, "backoffLimit": 2, "leaseDurationSeconds": 20},
            },
        },
        **({"status": status} if status is not None else {}),
    }


def parsed(body: dict[str, Any]) -> plan.Parsed:
    out = plan.parse(body)
    assert isinstance(out, plan.Parsed), out
    return out


def decide(
    body: dict[str, Any],
    now: datetime,
    runs: list[dict[str, Any]] | None = None,
    reported: plan.Reported | None = None,
) -> plan.CronPlan:
    p = parsed(body)
    return plan.decide(
        p.cron, p.schedule, runs or [], now=now, reported=reported or plan.Reported()
    )


def condition(status: LeasedCronJobStatus, type_: str) -> tuple[str, str] | None:
    found = [c for c in status.conditions or [] if c.type == type_]
    return (str(found[0].status), found[0].reason or "") if found else None


WAITING = {
    "conditions": [
        {
            "type": "Waiting",
            "status": "True",
            "reason": "EarlierRunHoldsLease",
            "message": "m",
            "lastTransitionTime": "2026-01-01T09:30:00Z",
        }
    ]
}


def test_an_invalid_cron_job_is_told_once_per_generation() -> None:
    long_name = plan.parse(cron_body(name="n" * 53))
    assert isinstance(long_name, plan.Invalid)
    assert long_name.reason == "InvalidSchedule"
    assert "longer than 52 characters" in long_name.message
    zone = plan.parse(cron_body(timeZone="Mars/Olympus_Mons"))
    assert isinstance(zone, plan.Invalid)
    assert (zone.reason, "Mars/Olympus_Mons" in zone.message) == ("InvalidSchedule", True)
    bad = cron_body()
    del bad["spec"]["jobTemplate"]
    spec = plan.parse(bad)
    assert isinstance(spec, plan.Invalid)
    assert spec == plan.Invalid(
        "InvalidSpec", "Invalid LeasedCronJob: spec.jobTemplate: Field required"
    )

    event = plan.invalid_event(bad, spec)
    assert event is not None and (event.type, event.reason) == ("Warning", "InvalidSpec")
    status = plan.invalid_status(bad, spec, T10)
    assert condition(status, "Ready") == ("False", "InvalidSpec")
    assert status.observed_generation == 4
    bad["status"] = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert plan.invalid_event(bad, spec) is None  # its Ready condition already says so
    bad["metadata"]["generation"] = 5
    assert plan.invalid_event(bad, spec) is not None  # a new generation is told again


def test_a_suspended_cron_job_starts_nothing_and_stops_waiting() -> None:
    d = decide(cron_body(suspend=True, status=WAITING), T10 + timedelta(minutes=5))
    assert d.run is None and d.requeue_after_seconds is None and d.events == []
    assert condition(d.status, "Ready") == ("True", "Suspended")
    assert condition(d.status, "Waiting") == ("False", "NotWaiting")
    assert d.status.observed_generation == 4


def test_nothing_due_requeues_at_the_next_schedule_time() -> None:
    body = cron_body(status={"lastScheduleTime": "2026-01-01T10:00:00Z"})
    d = decide(body, T10 + timedelta(minutes=15))
    assert d.run is None
    assert d.requeue_after_seconds == 45 * 60
    assert condition(d.status, "Ready") == ("True", "Scheduling")
    assert condition(d.status, "Waiting") is None  # never waited: no condition added


def test_a_due_run_is_named_for_its_schedule_time_and_made_once() -> None:
    now = T10 + timedelta(minutes=1)
    d = decide(cron_body(concurrencyPolicy="Forbid"), now)
    assert d.run == f"nightly-{int(T10.timestamp()) // 60}"
    assert (d.scheduled_time, d.policy) == (T10, ConcurrencyPolicy.FORBID)
    assert d.requeue_after_seconds == 59 * 60
    made = run(d.run, 0, "Running")
    again = decide(cron_body(), now, runs=[made])
    assert again.run is None  # it exists: only the status says so
    assert again.status.last_schedule_time == T10
    assert again.requeue_after_seconds == 59 * 60


def test_a_missed_deadline_is_told_once() -> None:
    body = cron_body(startingDeadlineSeconds=60)
    now = T10 + timedelta(minutes=5)
    first = decide(body, now)
    assert first.run is None
    assert [(e.type, e.reason) for e in first.events] == [("Warning", "MissSchedule")]
    assert "2026-01-01T10:00:00Z is more than startingDeadlineSeconds (60)" in (
        first.events[0].message
    )
    assert first.reported.missed_deadline == T10
    assert decide(body, now, reported=first.reported).events == []
    later = decide(body, now + timedelta(hours=1), reported=first.reported)
    assert [e.reason for e in later.events] == ["MissSchedule"]  # the next time missed


def test_a_time_whose_run_exists_is_not_told_missed() -> None:
    # The run was made in time; a reconcile between its create and the status
    # write of lastScheduleTime, with a startingDeadlineSeconds set meanwhile,
    # judged its time missed (a CI run, test_replace_fences_...: MissSchedule).
    body = cron_body(startingDeadlineSeconds=15)
    now = T10 + timedelta(seconds=40)
    made = run(f"nightly-{int(T10.timestamp()) // 60}", 0, "Running")
    d = decide(body, now, runs=[made])
    assert d.run is None and d.events == []
    assert decide(body, now).events[0].reason == "MissSchedule"  # without the run: missed


def test_forbid_waits_while_an_earlier_lease_is_held_telling_it_once() -> None:
    due = decide(cron_body(concurrencyPolicy="Forbid", status=WAITING), T10 + timedelta(minutes=1))
    held = Lease("nightly-1", record(4, 4, holder="pod-4"))
    unheld = Lease("nightly-2", record(5, 5))
    wait = plan.forbid_wait(due, [unheld, held], T10)
    assert wait is not None
    assert wait.requeue_after_seconds == plan.WAIT_POLL_SECONDS
    assert condition(wait.status, "Waiting") == ("True", "EarlierRunHoldsLease")
    assert [(e.reason, e.message) for e in wait.events] == [
        (
            "EarlierRunHoldsLease",
            "Run for 2026-01-01T10:00:00Z waits: the lease of nightly-1 (token 4) is still"
            " held; it starts once released, reclaimed or completed.",
        )
    ]
    again = plan.forbid_wait(replace(due, reported=wait.reported), [held], T10)
    assert again is not None and again.events == []  # told once per schedule time
    assert plan.forbid_wait(due, [unheld], T10) is None  # nothing held: start


def test_forbid_polls_no_later_than_the_next_schedule_time() -> None:
    due = decide(cron_body(concurrencyPolicy="Forbid"), T10 + timedelta(minutes=1))
    soon = replace(due, requeue_after_seconds=2.0)
    wait = plan.forbid_wait(soon, [Lease("nightly-1", record(4, 4, holder="p"))], T10)
    assert wait is not None and wait.requeue_after_seconds == 2.0


def test_a_run_is_over_only_when_the_store_refuses_its_claims_for_good() -> None:
    assert plan.run_is_over(record(3, 6, done=True))  # Succeeded: the CRD refuses a reopen
    assert plan.run_is_over(record(3, 3, holder="pod-3", ceiling=3))  # closed, still held
    assert plan.run_is_over(record(3, 3, ceiling=3))
    # Not over: whatever the store would still let claim again.
    assert not plan.run_is_over(record(3, 6, holder="pod-3", ceiling=16))
    assert not plan.run_is_over(record(3, None))
    # Failed with retries left: a reopen and a claim would follow (issue 27, case 1).
    assert not plan.run_is_over(record(3, 6, done=True, outcome=Outcome.FAILED, ceiling=16))
    # Stopped at its cap, not closed: an excuse or a suspension may raise the cap.
    assert not plan.run_is_over(record(3, 3, ceiling=16))
    # Not taken over yet (capped at its base): the take-over raises the cap.
    assert not plan.run_is_over(record(9, 9, ceiling=19))


def test_a_waiting_run_keeps_its_schedule_time_past_the_starting_deadline() -> None:
    # Issue 27, case 7: the earlier run is closed or stopped, then the wait
    # outlasts startingDeadlineSeconds; the waiting run must still start.
    for policy in ("Forbid", "Replace"):
        body = cron_body(concurrencyPolicy=policy, startingDeadlineSeconds=10)
        due = decide(body, T10 + timedelta(seconds=5))
        assert due.run is not None
        if policy == "Forbid":
            wait = plan.forbid_wait(due, [Lease("nightly-1", record(4, 4, holder="p"))], T10)
        else:
            wait = plan.replace_wait(due, 25.0, T10)
        assert wait is not None and wait.status.waiting_schedule_time == T10
        status = wait.status.model_dump(mode="json", by_alias=True, exclude_none=True)
        later = decide(
            cron_body(concurrencyPolicy=policy, startingDeadlineSeconds=10, status=status),
            T10 + timedelta(seconds=30),
        )
        assert (later.run, later.scheduled_time) == (due.run, T10), policy
        start = plan.plan_start(later, parsed(body).cron, [], T10 + timedelta(seconds=30))
        assert start.status.waiting_schedule_time is None
        # Without the waiting time, the same moment is past the deadline: skipped.
        assert decide(body, T10 + timedelta(seconds=30)).run is None


def test_replace_waits_for_the_replaced_workers_window_without_an_event() -> None:
    due = decide(cron_body(concurrencyPolicy="Replace"), T10 + timedelta(minutes=1))
    assert plan.replace_wait(due, 0.0, T10) is None
    assert plan.replace_wait(due, -3.0, T10) is None
    wait = plan.replace_wait(due, 12.4, T10)
    assert wait is not None
    assert wait.requeue_after_seconds == 12.4 and wait.events == []
    assert condition(wait.status, "Waiting") == ("True", "ReplacedRunMayStillRun")
    msg = next(c.message for c in wait.status.conditions or [] if c.type == "Waiting")
    assert msg.startswith("Run for 2026-01-01T10:00:00Z waits 12s:")
    late = plan.replace_wait(replace(due, requeue_after_seconds=5.0), 12.4, T10)
    assert late is not None and late.requeue_after_seconds == 5.0
    # Forbid waits the same way for a run suspended while it held (model/schedules.pml).
    earlier = plan.replace_wait(due, 12.4, T10, replaced=False)
    assert earlier is not None
    assert condition(earlier.status, "Waiting") == ("True", "EarlierRunMayStillRun")


def test_a_run_starts_above_every_reservation_and_every_lease() -> None:
    body = cron_body(status={**WAITING, "reservedFencingToken": 7})
    due = decide(body, T10 + timedelta(minutes=1))
    p = parsed(body)
    start = plan.plan_start(due, p.cron, [record(2, 4), record(9, 9)], T10)
    # maxAttempts + backoffLimit, then room for attempts that draw on no budget
    assert (start.base, start.budget) == (9, 3 + 2)
    assert start.reserved == 9 + 5 + api.RUN_UNCOUNTED_ROOM
    assert plan.plan_start(due, p.cron, [record(2, 4)], T10).base == 7
    # An earlier run's ceiling counts even where its cap and token are below it.
    assert plan.plan_start(due, p.cron, [record(2, 4, ceiling=30)], T10).base == 30
    assert start.status.reserved_fencing_token == start.reserved
    assert start.status.last_schedule_time == T10
    assert [r.name for r in start.status.active or []] == [due.run]
    assert condition(start.status, "Waiting") == ("False", "NotWaiting")
    assert start.mode is api.LeaseMode.PULL  # no pod template
    assert start.labels == {names.LABEL_JOB: due.run, names.LABEL_CRON_JOB: "nightly"}
    assert plan.reserve_patch(body, start) == {
        "metadata": {"resourceVersion": "100"},
        "status": {"reservedFencingToken": start.reserved},
    }
    assert "its fencing tokens start above 9" in start.created_event().message


def test_a_run_is_the_template_owned_by_its_cron_job() -> None:
    body = cron_body()
    due = decide(body, T10 + timedelta(minutes=1))
    job = plan.build_run(body, plan.plan_start(due, parsed(body).cron, [], T10))
    meta = job["metadata"]
    assert (meta["name"], meta["namespace"]) == (due.run, "ns")
    assert meta["labels"] == {"team": "tests", names.LABEL_CRON_JOB: "nightly"}
    assert meta["annotations"] == {
        "a": "b",
        names.ANNOTATION_SCHEDULED_TIME: "2026-01-01T10:00:00Z",
    }
    [owner] = meta["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("LeasedCronJob", "cron-uid", True)
    assert job["spec"] == body["spec"]["jobTemplate"]["spec"]


def run_lease(name: str, rec: LeaseRecord, run: str | None = None) -> Lease:
    """A lease of run ``run`` (default: ``name``, the run's own lease)."""
    return Lease(name, replace(rec, job_name=run or name))


def test_only_gone_final_leases_below_the_top_are_pruned() -> None:
    top = run_lease("c-9", record(9, 9))
    leases = [
        run_lease("c-1", record(1, 1)),  # gone, final: pruned
        run_lease("c-2", record(2, 2)),  # its run exists
        run_lease("c-3", record(3, 5, holder="p")),  # not final
        top,
    ]
    assert plan.prune_candidates(leases, {"c-2"}) == [leases[0]]
    assert plan.prune_candidates([top], set()) == []  # the domain's top lease stays
    assert plan.prune_candidates([], set()) == []


def test_a_status_write_only_when_changed_and_dropped_fields_nulled() -> None:
    body = cron_body(status={"lastScheduleTime": "2026-01-01T10:00:00Z", "active": [{"name": "x"}]})
    same = LeasedCronJobStatus.model_validate(body["status"])
    assert plan.status_patch(body, same) is None
    patch = plan.status_patch(body, LeasedCronJobStatus(observed_generation=4))
    assert patch == {
        "metadata": {"resourceVersion": "100"},
        "status": {"lastScheduleTime": None, "active": None, "observedGeneration": 4},
    }


def test_active_runs_and_the_last_success_are_observed_from_the_runs() -> None:
    done = run("c-1", 1, "Succeeded")
    done["status"]["completionTime"] = "2026-01-01T10:05:00Z"
    older = run("c-0", 0, "Succeeded")
    older["status"]["completionTime"] = "2026-01-01T10:03:00Z"
    status = plan.observe_runs(parsed(cron_body()).cron, [run("c-3", 3, "Running"), done, older])
    assert [r.name for r in status.active or []] == ["c-3"]
    assert status.last_successful_time == datetime(2026, 1, 1, 10, 5, tzinfo=UTC)
    assert plan.observe_runs(parsed(cron_body()).cron, [done]).active is None


def _with_uid(body: dict[str, Any], uid: str) -> dict[str, Any]:
    body["metadata"]["uid"] = uid
    return body


def test_an_active_run_that_finished_is_told_once_and_one_gone_is_to_be_confirmed() -> None:
    # batch/v1 cronjob_controllerv2.go: SawCompletedJob, MissingJob.
    active = [
        {"name": "c-1", "uid": "00000001"},
        {"name": "c-2", "uid": "00000002"},
        {"name": "c-3", "uid": "00000003"},
        {"name": "c-4", "uid": "00000004"},
        {"name": "c-5"},  # made by the last reconcile, never seen listed
    ]
    cron = parsed(cron_body(status={"active": active})).cron
    runs = [
        _with_uid(run("c-1", 1, "Succeeded"), "00000001"),
        _with_uid(run("c-2", 2, "Failed"), "00000002"),
        _with_uid(run("c-3", 3, "Running"), "00000003"),
    ]
    ended = plan.ended_runs(cron, runs, plan.Reported())
    assert [(e.reason, e.message) for e in ended.events] == [
        ("SawCompletedJob", "Saw completed job: c-1, condition: Complete"),
        ("SawCompletedJob", "Saw completed job: c-2, condition: Failed"),
    ]
    assert [r.name for r in ended.missing] == ["c-4"]
    assert plan.missing_event(ended.missing[0]).message == "Active job went missing: c-4"
    again = plan.ended_runs(cron, runs, ended.reported)  # a status write was refused
    assert (again.events, again.missing) == ([], [])
    # Once status.active no longer lists them, what was told is forgotten.
    later = parsed(cron_body(status={"active": [{"name": "c-3", "uid": "00000003"}]})).cron
    assert plan.ended_runs(later, runs, ended.reported).reported.ended == frozenset()


def test_a_run_made_this_reconcile_is_matched_by_name() -> None:
    cron = parsed(cron_body(status={"active": [{"name": "c-5"}]})).cron
    made = _with_uid(run("c-5", 5, "Succeeded"), "00000005")
    ended = plan.ended_runs(cron, [made], plan.Reported())
    assert [e.message for e in ended.events] == ["Saw completed job: c-5, condition: Complete"]


def test_index_leases_of_a_gone_run_are_pruned_and_an_existing_runs_are_kept() -> None:
    top = run_lease("c-9", record(9, 9))
    leases = [
        run_lease("c-1", record(1, 1)),  # the gone run's own lease (its range)
        run_lease("c-1.0", record(2, 2), run="c-1"),  # its index leases, final
        run_lease("c-1.1", record(3, 3), run="c-1"),
        run_lease("c-2.0", record(4, 4), run="c-2"),  # an index lease of a run that exists
        top,
    ]
    assert plan.prune_candidates(leases, {"c-2"}) == leases[:3]


def multi_run(name: str, phase: str | None = None, completions: int = 2) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"completions": completions, "completionMode": "Indexed"},
        "status": {"phase": phase} if phase else {},
    }


def test_replace_deletes_a_run_of_several_completions_whose_index_lease_it_closed() -> None:
    own = run_lease("c-1", record(10, 10, ceiling=20))
    index = run_lease("c-1.0", record(11, 14, holder="p", ceiling=20), run="c-1")
    runs = [multi_run("c-1", "Running")]
    assert plan.replaced_runs([own, index], [own, index], runs) == {"c-1"}
    # a run that has no index lease yet is replaced too (its range was closed)
    assert plan.replaced_runs([own], [own], runs) == {"c-1"}


def test_replace_keeps_a_succeeded_run_of_several_completions_whose_range_it_closed() -> None:
    own = run_lease("c-1", record(10, 10, ceiling=20))
    done = [run_lease(f"c-1.{i}", record(11, 14, done=True, ceiling=20), run="c-1") for i in (0, 1)]
    # its status does not say so yet: its index leases do
    assert plan.replaced_runs([own], [own, *done], [multi_run("c-1", "Running")]) == set()
    assert plan.replaced_runs([own], [own], [multi_run("c-1", "Succeeded")]) == set()
    # one index of two succeeded: the run is replaced
    assert plan.replaced_runs([own], [own, done[0]], [multi_run("c-1", "Running")]) == {"c-1"}


def test_a_run_of_several_completions_reserves_a_range_per_index_not_per_completion() -> None:
    body = cron_body(status={**WAITING, "reservedFencingToken": 7})
    body["spec"]["jobTemplate"]["spec"].update(
        completions=5, completionMode="Indexed", backoffLimitPerIndex=4
    )
    due = decide(body, T10 + timedelta(minutes=1))
    start = plan.plan_start(due, parsed(body).cron, [], T10)
    # each index is a lease of its own: maxAttempts + backoffLimitPerIndex, not x completions
    assert (start.base, start.budget) == (7, 3 + 4)
    assert start.reserved == 7 + 7 + api.RUN_UNCOUNTED_ROOM


def test_finished_runs_are_those_whose_job_succeeded_or_failed() -> None:
    # Replace deletes only active runs (batch/v1): a work queue whose slots
    # were stopped at its first success is finished, though its stopped
    # slots are not closed at their ceiling.
    runs = [run("a", 0, "Succeeded"), run("b", 0, "Failed"), run("c", 0, "Running")]
    assert plan.finished_runs(runs) == {"a", "b"}
