"""The chaos checker finds each violation in hand-made histories (and none in a clean one)."""

from __future__ import annotations

from typing import Any

import pytest

from chaos.checker import INVARIANTS, check


def observed(lease: str, holder: str | None, token: int, completion: Any = None) -> dict[str, Any]:
    return {
        "kind": "observed",
        "t": 0.0,
        "lease": lease,
        "holder": holder,
        "token": token,
        "completion": completion,
    }


def done(token: int, holder: str, outcome: str = "Succeeded") -> dict[str, Any]:
    return {"token": token, "holder": holder, "outcome": outcome}


CLEAN: list[dict[str, Any]] = [
    {"kind": "fault", "fault": "pause"},
    observed("ns/a", None, 0),
    observed("ns/a", "a-1", 1),
    {
        "kind": "write",
        "job": "ns/a",
        "key": "k",
        "holder": "a-1",
        "token": 1,
        "ok": True,
        "check_at": 1.0,
        "deadline": 2.0,
    },
    observed("ns/a", None, 1),  # reclaimed
    observed("ns/a", "a-2", 2),
    {
        "kind": "write",
        "job": "ns/a",
        "key": "k",
        "holder": "a-2",
        "token": 2,
        "ok": True,
        "check_at": 5.0,
        "deadline": 6.0,
    },
    {
        "kind": "write",
        "job": "ns/a",
        "key": "k",
        "holder": "a-1",
        "token": 1,
        "ok": False,
        "check_at": 1.5,
        "deadline": 2.0,
    },
    {"kind": "complete", "job": "ns/a", "holder": "a-1", "token": 1, "ok": False},
    {"kind": "complete", "job": "ns/a", "holder": "a-2", "token": 2, "ok": True},
    observed("ns/a", None, 2, done(2, "a-2")),
    observed("ns/a", None, 2, done(2, "a-2")),
    {"kind": "applied", "seq": 1, "key": "k", "token": 1},
    {"kind": "applied", "seq": 2, "key": "k", "token": 2},
    {"kind": "applied", "seq": 3, "key": "k", "token": 2},
    {"kind": "job_end", "job": "ns/a", "phase": "Succeeded", "reason": "Completed"},
    {"kind": "job_end", "job": "ns/b", "phase": "Failed", "reason": "AttemptsExhausted"},
]


def test_a_completion_whose_claim_the_watch_missed_is_judged_on_its_token() -> None:
    # The watch restarted and saw the lease only once it was completed.
    assert check([observed("ns/y", None, 0), observed("ns/y", None, 1, done(1, "y-1"))]).ok


def test_a_clean_history_passes_and_is_counted() -> None:
    report = check(CLEAN)
    assert report.ok, report.table()
    assert report.faults["pause"] == 1
    assert report.operations["write accepted"] == 2
    assert report.operations["write rejected"] == 1
    assert report.operations["complete accepted"] == 1
    assert all(name in report.table() for name in INVARIANTS)


def test_an_indexed_job_failed_by_an_index_is_not_lost() -> None:
    ended = {"kind": "job_end", "job": "ns/i", "phase": "Failed", "reason": "IndexFailed"}
    assert check([*CLEAN, ended]).ok


def test_a_job_whose_last_attempt_never_started_is_not_lost() -> None:
    # kind seed 303: a Forbid run closed at its token 2 by the next run, attempt 2's
    # pod not started in startupDeadlineSeconds; "All 1 attempts were used; the last
    # lease (token 2) ended without a completion: attempt 2 did not start ..."
    reason = "StartupDeadlineExceeded"
    ended = {"kind": "job_end", "job": "ns/c-1", "phase": "Failed", "reason": reason}
    assert check([*CLEAN, ended]).ok
    unexplained = {**ended, "reason": "Unknown"}
    assert check([*CLEAN, unexplained]).violations["no-job-lost"]


def test_a_work_queue_succeeds_on_one_slots_completion() -> None:
    created = {"kind": "job-created", "job": "ns/q", "workload": "work-queue"}
    slot = {**observed("ns/q.1", None, 1, done(1, "q-1-1")), "job_name": "ns/q"}
    ended = {"kind": "job_end", "job": "ns/q", "phase": "Succeeded", "reason": None}
    assert check([*CLEAN, created, slot, ended]).ok
    lost = check([*CLEAN, created, {**slot, "completion": None}, ended])
    assert lost.violations["work-queue-success-completed"] == [
        "ns/q: a work queue ended Succeeded without a slot's Succeeded completion"
    ]


def with_(extra: list[dict[str, Any]], drop: int | None = None) -> list[dict[str, Any]]:
    base = [r for i, r in enumerate(CLEAN) if i != drop]
    return base + extra


@pytest.mark.parametrize(
    ("history", "invariant"),
    [
        pytest.param(
            with_([{"kind": "complete", "job": "ns/a", "holder": "a-1", "token": 1, "ok": True}]),
            "one-completion-per-job",
            id="two-accepted-completions",
        ),
        pytest.param(
            with_([observed("ns/a", None, 2, done(2, "a-2", "Failed"))]),
            "one-completion-per-job",
            id="completion-changed",
        ),
        pytest.param(
            [observed("ns/x", "x-2", 2), observed("ns/x", None, 2, done(1, "x-1"))],
            "one-completion-per-job",
            id="completion-under-stale-token",
        ),
        pytest.param(
            [observed("ns/x", "x-2", 2), observed("ns/x", None, 2, done(2, "intruder"))],
            "one-completion-per-job",
            id="completion-by-another-holder",
        ),
        pytest.param(
            [observed("ns/x", "x-2", 2), observed("ns/x", None, 1)],
            "tokens-increase-per-lease",
            id="token-goes-down",
        ),
        pytest.param(
            [observed("ns/x", "x-2", 2), observed("ns/x", None, 2), observed("ns/x", "y", 2)],
            "tokens-increase-per-lease",
            id="claim-without-a-new-token",
        ),
        pytest.param(
            with_([{"kind": "applied", "seq": 4, "key": "k", "token": 1}]),
            "target-tokens-never-go-back",
            id="stale-write-applied",
        ),
        pytest.param(
            with_([{"kind": "job_end", "job": "ns/c", "phase": "Running", "reason": None}]),
            "no-job-lost",
            id="job-never-finished",
        ),
        pytest.param(
            with_([{"kind": "job_end", "job": "ns/c", "phase": "Failed", "reason": "Oops"}]),
            "no-job-lost",
            id="job-failed-without-reason",
        ),
        pytest.param(
            with_(
                [
                    {
                        "kind": "write",
                        "job": "ns/a",
                        "key": "k",
                        "holder": "a-2",
                        "token": 2,
                        "ok": True,
                        "check_at": 7.0,
                        "deadline": 6.0,
                    }
                ]
            ),
            "no-effect-after-deadline",
            id="write-after-deadline",
        ),
    ],
)
def test_each_violation_is_found(history: list[dict[str, Any]], invariant: str) -> None:
    report = check(history)
    assert not report.ok
    assert report.violations[invariant], report.table()
    others = [name for name in INVARIANTS if name != invariant and report.violations.get(name)]
    assert others == [], report.table()


def queued_history(third_held_before_release: bool) -> list[dict[str, Any]]:
    """Three queued jobs, quota for two: the third claims after (or before) one is preempted."""

    def held(job: str, holder: str | None, token: int) -> dict[str, Any]:
        return {**observed(f"ns/{job}", holder, token), "job_name": f"ns/{job}"}

    release = held("low-1", None, 1)  # the fenced suspend of the preempted attempt
    third = held("high", "high-1", 1)
    return [
        {"kind": "queue-created", "queue": "ns/q", "jobs": 2},
        *(
            {"kind": "job-created", "job": f"ns/{j}", "workload": w}
            for j, w in (("low-1", "queued-low"), ("low-2", "queued-low"), ("high", "queued-high"))
        ),
        held("low-1", "low-1-1", 1),
        held("low-2", "low-2-1", 1),
        *([third, release] if third_held_before_release else [release, third]),
        {
            "kind": "workload-end",
            "job": "ns/low-1",
            "finished": True,
            "evictions": {"Preempted": 1},
        },
        {"kind": "workload-end", "job": "ns/high", "finished": True, "evictions": {}},
        {"kind": "job_end", "job": "ns/low-1", "phase": "Succeeded", "reason": None},
        {"kind": "job_end", "job": "ns/high", "phase": "Succeeded", "reason": None},
    ]


def test_queued_jobs_hold_no_more_leases_than_the_quota_admits() -> None:
    report = check(queued_history(third_held_before_release=False))
    assert report.ok, report.table()
    assert report.operations["queued jobs"] == 3
    assert report.operations["queued leases held at once (peak)"] == 2
    assert report.operations["kueue evictions (Preempted)"] == 1
    over = check(queued_history(third_held_before_release=True))
    assert [v.split(" held")[0] for v in over.violations["kueue-quota-holders"]] == ["ns/high"]
    others = [n for n in INVARIANTS if n != "kueue-quota-holders" and over.violations.get(n)]
    assert others == [], over.table()


def test_a_queued_job_that_ended_has_its_workload_finished() -> None:
    history = [
        r
        for r in queued_history(third_held_before_release=False)
        if not (r.get("kind") == "workload-end" and r.get("job") == "ns/high")
    ]
    report = check(history)
    assert report.violations["queued-workload-finished"] == [
        "ns/high: the job ended but its Workload was not marked Finished"
    ]


def test_a_version_a_watch_delivers_again_is_no_new_state() -> None:
    # A watch made again (after a held API server, CI 2026-12-05) delivered an
    # older version (unheld at token 1) and the current one again: not a
    # token going down. The same token 1 as a new write (a higher rv) is.
    seen = [
        {**observed("ns/a", "a-1", 1), "rv": 10},
        {**observed("ns/a", None, 1), "rv": 11},
        {**observed("ns/a", "a-2", 2), "rv": 15},
    ]
    replayed = [{**observed("ns/a", None, 1), "rv": 11}, {**observed("ns/a", "a-2", 2), "rv": 15}]
    report = check([*seen, *replayed])
    assert not report.violations["tokens-increase-per-lease"]
    assert report.operations["observed-again"] == 2
    rolled_back = check([*seen, {**observed("ns/a", None, 1), "rv": 16}])
    assert rolled_back.violations["tokens-increase-per-lease"] == [
        "ns/a: token went down from 2 to 1"
    ]
