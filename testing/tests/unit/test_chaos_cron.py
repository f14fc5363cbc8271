"""The cron invariants of the chaos history, judged by both checkers.

A LeasedCronJob's runs (``<cron>-<unix minutes>``, each its own lease
labelled with the cron job) share one fencing domain: both checkers judge
that Forbid and Replace runs never hold at once, that a replaced run's
worker stops before the next run's claim, and that every token of a later
run is above every token of an earlier run. Seeded bad histories are caught
by each.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chaos import checker, judge


@pytest.fixture(scope="module", autouse=True)
def porcupine_built() -> Path:
    binary = judge.porcupine_binary()
    assert binary.is_file()
    return binary


def seen(
    t: float, run: int, token: int, holder: str | None, base: int, done: Any = None
) -> dict[str, Any]:
    return {
        "kind": "observed",
        "t": t,
        "lease": f"ns/c-{run}",
        "job_name": f"ns/c-{run}",
        "cron": "ns/c",
        "index": None,
        "base": base,
        "ceiling": base + 19,
        "holder": holder,
        "token": token,
        "completion": done,
    }


def write(run: int, check: float, t: float, token: int, holder: str, ok: bool) -> dict[str, Any]:
    return {
        "kind": "write",
        "call": check + 0.01,
        "t": t,
        "job": f"ns/c-{run}",
        "key": "ns/c",
        "holder": holder,
        "token": token,
        "ok": ok,
        "reason": None if ok else "StaleToken",
        "check_at": check,
        "check_raw": check,
        "deadline": check + 1.0,
    }


def complete(run: int, t: float, token: int, holder: str) -> dict[str, Any]:
    return {
        "kind": "complete",
        "call": t - 0.1,
        "t": t,
        "job": f"ns/c-{run}",
        "holder": holder,
        "token": token,
        "ok": True,
        "reason": None,
    }


def done(token: int, holder: str) -> dict[str, Any]:
    return {"token": token, "holder": holder, "outcome": "Succeeded"}


def history(policy: str, *middle: dict[str, Any], applied: tuple[int, ...]) -> list[dict[str, Any]]:
    return [
        {"kind": "cron-created", "t": 0.1, "cron": "ns/c", "policy": policy},
        seen(1.0, 100, 0, None, 0),
        seen(2.0, 100, 1, "r1", 0),
        write(100, 2.1, 2.2, 1, "r1", ok=True),
        *middle,
        *(
            {"kind": "applied", "seq": i + 1, "key": "ns/c", "token": t}
            for i, t in enumerate(applied)
        ),
        {"kind": "job_end", "job": "ns/c-101", "phase": "Succeeded", "reason": "Completed"},
    ]


# Run 100 still works when minute 101 is due: Replace takes its lease back
# (unheld, at token 1), run 101 claims token 21 after the window; run 100's
# late write is refused at the target.
REPLACED = history(
    "Replace",
    seen(60.0, 100, 1, None, 0),
    seen(60.5, 101, 20, None, 20),
    seen(80.0, 101, 21, "r2", 20),
    write(101, 80.1, 80.2, 21, "r2", ok=True),
    write(100, 79.0, 81.0, 1, "r1", ok=False),  # checked before the claim, sent late
    complete(101, 82.0, 21, "r2"),
    seen(82.1, 101, 21, None, 20, done(21, "r2")),
    applied=(1, 21),
)


def judged(tmp_path: Path, records: list[dict[str, Any]]) -> judge.Judgement:
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return judge.judge(path, tmp_path / "porcupine.html")


def test_a_replaced_run_then_the_next_passes_both_checkers(tmp_path: Path) -> None:
    verdict = judged(tmp_path, REPLACED)
    assert verdict.ok and verdict.agree, verdict.table()
    assert verdict.report.operations["cron runs (leases)"] == 2
    assert verdict.porcupine.partitions == 4  # 2 leases, the target key, the cron job
    assert verdict.porcupine.operations["run ok"] == 6  # every change of a run lease
    assert verdict.porcupine.operations["use ok"] == 4


def test_allow_runs_may_hold_at_once(tmp_path: Path) -> None:
    overlapping = history(
        "Allow",
        seen(60.5, 101, 20, None, 20),
        seen(61.0, 101, 21, "r2", 20),
        write(101, 61.1, 61.2, 21, "r2", ok=True),
        write(100, 61.5, 61.6, 1, "r1", ok=False),
        complete(101, 62.0, 21, "r2"),
        seen(62.1, 101, 21, None, 20, done(21, "r2")),
        applied=(1, 21),
    )
    verdict = judged(tmp_path, overlapping)
    assert verdict.ok and verdict.agree, verdict.table()


@pytest.mark.parametrize("policy", ["Forbid", "Replace"])
def test_two_runs_held_at_once_are_caught_by_both(tmp_path: Path, policy: str) -> None:
    overlapping = history(
        policy,
        seen(60.5, 101, 20, None, 20),
        seen(61.0, 101, 21, "r2", 20),  # run 100 still held
        seen(62.0, 100, 1, None, 0),
        applied=(1,),
    )
    verdict = judged(tmp_path, overlapping)
    assert verdict.report.violations["cron-runs-one-at-a-time"], verdict.table()
    assert verdict.porcupine.illegal == ["cron ns/c"]
    assert verdict.agree and not verdict.ok


def test_a_replaced_worker_writing_after_the_next_claim_is_caught_by_both(
    tmp_path: Path,
) -> None:
    late = history(
        "Replace",
        seen(60.0, 100, 1, None, 0),
        seen(60.5, 101, 20, None, 20),
        seen(80.0, 101, 21, "r2", 20),
        write(100, 80.5, 80.6, 1, "r1", ok=True),  # its lease check began after the claim
        write(101, 85.1, 85.2, 21, "r2", ok=True),
        applied=(1, 1, 21),
    )
    verdict = judged(tmp_path, late)
    found = verdict.report.violations
    assert list(k for k, v in found.items() if v) == ["replaced-run-stops-before-next"]
    assert verdict.porcupine.illegal == ["cron ns/c"]
    assert verdict.agree and not verdict.ok
    # The same write, its check begun before the claim was seen: not judged a violation.
    early = [{**r, "check_raw": 79.9} if r.get("check_raw") == 80.5 else r for r in late]
    assert judged(tmp_path, early).ok


def test_a_later_run_granted_an_earlier_runs_token_is_caught_by_both(tmp_path: Path) -> None:
    reused = history(
        "Allow",
        seen(60.0, 100, 1, None, 0),
        seen(60.5, 101, 0, None, 0),
        seen(61.0, 101, 1, "r2", 0),
        write(101, 61.1, 61.2, 1, "r2", ok=True),
        applied=(1, 1),
    )
    verdict = judged(tmp_path, reused)
    found = verdict.report.violations
    assert list(k for k, v in found.items() if v) == ["cron-run-tokens-ordered"]
    assert verdict.porcupine.illegal == ["cron ns/c"]
    assert verdict.agree and not verdict.ok


def test_a_runs_token_from_its_writes_alone_is_judged() -> None:
    # The watch never saw run 101 held, but its worker wrote under token 1.
    reused = history(
        "Allow",
        seen(60.0, 100, 1, None, 0),
        seen(60.5, 101, 20, None, 20),
        write(101, 61.1, 61.2, 1, "r2", ok=False),
        applied=(1,),
    )
    assert checker.check(reused).violations["cron-run-tokens-ordered"]


def test_a_run_is_ordered_by_its_schedule_time_not_its_name() -> None:
    assert checker.schedule_minute("ns/c", "ns/c-29000001") == 29000001
    assert checker.schedule_minute("ns/c", "ns/c-x-1") is None
    assert checker.schedule_minute("ns/c", "ns/cc-1") is None


# A run of several completions: its index leases (ns/c-<run>.<index>, spec.jobName
# its run) hold together; its own lease (its range) is never claimed.
def seen_index(
    t: float, run: int, index: int, token: int, holder: str | None, base: int
) -> dict[str, Any]:
    return {**seen(t, run, token, holder, base), "lease": f"ns/c-{run}.{index}", "index": index}


def write_index(
    run: int, index: int, check: float, t: float, token: int, holder: str, ok: bool
) -> dict[str, Any]:
    return {**write(run, check, t, token, holder, ok), "job": f"ns/c-{run}.{index}"}


@pytest.mark.parametrize("policy", ["Forbid", "Replace"])
def test_a_runs_index_leases_held_together_pass_both_checkers(tmp_path: Path, policy: str) -> None:
    records = history(
        policy,
        seen_index(3.0, 100, 0, 0, None, 0),
        seen_index(3.1, 100, 1, 0, None, 0),
        seen_index(3.5, 100, 0, 1, "i0", 0),
        seen_index(3.6, 100, 1, 1, "i1", 0),  # two indexes of one run: one token each
        write_index(100, 1, 3.7, 3.8, 1, "i1", ok=True),
        write_index(100, 0, 3.9, 4.0, 1, "i0", ok=True),
        seen_index(4.5, 100, 0, 1, None, 0),
        seen_index(4.6, 100, 1, 1, None, 0),
        seen(60.0, 100, 1, None, 0),
        seen(60.5, 101, 20, None, 20),
        seen(80.0, 101, 21, "r2", 20),
        write(101, 80.1, 80.2, 21, "r2", ok=True),
        applied=(1, 1, 1, 21),
    )
    verdict = judged(tmp_path, records)
    assert verdict.ok and verdict.agree, verdict.table()


@pytest.mark.parametrize("policy", ["Forbid", "Replace"])
def test_an_earlier_runs_index_lease_held_with_a_later_run_is_caught_by_both(
    tmp_path: Path, policy: str
) -> None:
    records = history(
        policy,
        seen(3.0, 100, 1, None, 0),
        seen_index(3.1, 100, 1, 0, None, 0),
        seen_index(3.6, 100, 1, 1, "i1", 0),  # index 1 of run 100 held...
        seen(60.5, 101, 20, None, 20),
        seen(61.0, 101, 21, "r2", 20),  # ...when run 101 claims
        seen_index(62.0, 100, 1, 1, None, 0),
        applied=(1,),
    )
    verdict = judged(tmp_path, records)
    assert verdict.report.violations["cron-runs-one-at-a-time"], verdict.table()
    assert verdict.porcupine.illegal == ["cron ns/c"]
    assert verdict.agree and not verdict.ok


def test_an_index_of_a_later_run_below_an_earlier_runs_token_is_caught_by_both(
    tmp_path: Path,
) -> None:
    records = history(
        "Allow",
        seen_index(60.5, 101, 0, 0, None, 0),
        seen_index(61.0, 101, 0, 1, "x", 0),  # run 101's index at run 100's token
        seen_index(62.0, 101, 0, 1, None, 0),
        applied=(1,),
    )
    verdict = judged(tmp_path, records)
    assert verdict.report.violations["cron-run-tokens-ordered"], verdict.table()
    assert verdict.porcupine.illegal == ["cron ns/c"]
