"""Both checkers of the chaos history: seeded bad histories are caught by each.

The porcupine judge (``hack/porcupine``) is built once from Go modules and
cached under ``LEASEHOLD_CACHE_DIR`` (the first build needs the Go module proxy).
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


def observed(t: float, token: int, holder: str | None, done: Any = None) -> dict[str, Any]:
    return {
        "kind": "observed",
        "t": t,
        "lease": "ns/a",
        "holder": holder,
        "token": token,
        "completion": done,
    }


def completion(token: int, holder: str) -> dict[str, Any]:
    return {"token": token, "holder": holder, "outcome": "Succeeded"}


def op(kind: str, call: float, t: float, token: int, holder: str, **extra: Any) -> dict[str, Any]:
    return {
        "kind": kind,
        "call": call,
        "t": t,
        "job": "ns/a",
        "key": "ns/a",
        "holder": holder,
        "token": token,
        "check_at": call,
        "deadline": call + 1.0,
        **extra,
    }


END = [{"kind": "job_end", "job": "ns/a", "phase": "Succeeded", "reason": "Completed"}]

# Attempt 1 is paused past its lease and reclaimed; attempt 2 writes and
# completes; attempt 1's late write and completion are refused.
CLEAN: list[dict[str, Any]] = [
    {"kind": "fault", "fault": "pause", "t": 0.5},
    observed(1.0, 0, None),
    observed(2.0, 1, "a-1"),
    op("write", 2.1, 2.2, 1, "a-1", ok=True, reason=None),
    observed(6.0, 1, None),
    observed(6.1, 2, "a-2"),
    op("write", 6.5, 6.6, 2, "a-2", ok=True, reason=None),
    op("write", 6.7, 6.8, 1, "a-1", ok=False, reason="StaleToken"),
    op("write-unknown", 6.9, 7.5, 2, "a-2"),
    op("complete", 7.0, 7.1, 1, "a-1", ok=False, reason="StaleToken"),
    op("complete", 7.6, 7.8, 2, "a-2", ok=True, reason=None),
    observed(7.9, 2, None, completion(2, "a-2")),
    {"kind": "applied", "seq": 1, "key": "ns/a", "token": 1},
    {"kind": "applied", "seq": 2, "key": "ns/a", "token": 2},
    *END,
]


def judged(tmp_path: Path, history: list[dict[str, Any]]) -> judge.Judgement:
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in history))
    return judge.judge(path, tmp_path / "porcupine.html")


def test_a_clean_history_passes_both_checkers(tmp_path: Path) -> None:
    verdict = judged(tmp_path, CLEAN)
    assert verdict.report.ok, verdict.table()
    assert verdict.porcupine.result == "Ok", verdict.table()
    assert verdict.agree and verdict.ok
    assert verdict.porcupine.partitions == 2  # the lease and the target key
    assert verdict.porcupine.operations["write refused"] == 1
    assert not (tmp_path / "porcupine.html").exists()
    assert "checkers agree: yes" in verdict.table()


def test_two_accepted_completions_under_one_token_are_caught_by_both(tmp_path: Path) -> None:
    history = [
        observed(1.0, 0, None),
        observed(2.0, 1, "a-1"),
        op("complete", 3.0, 3.2, 1, "a-1", ok=True, reason=None),
        op("complete", 4.0, 4.2, 1, "a-2", ok=True, reason=None),
        observed(4.5, 1, None, completion(1, "a-1")),
        *END,
    ]
    verdict = judged(tmp_path, history)
    assert verdict.report.violations["one-completion-per-job"], verdict.table()
    assert verdict.porcupine.result == "Illegal"
    assert verdict.porcupine.illegal == ["lease ns/a"]
    assert verdict.agree and not verdict.ok
    assert "<html" in (tmp_path / "porcupine.html").read_text().lower()


def test_a_stale_write_accepted_after_a_newer_one_is_caught_by_both(tmp_path: Path) -> None:
    history = [
        op("write", 1.0, 1.1, 2, "a-2", ok=True, reason=None),
        op("write", 2.0, 2.1, 1, "a-1", ok=True, reason=None),
        {"kind": "applied", "seq": 1, "key": "ns/a", "token": 2},
        {"kind": "applied", "seq": 2, "key": "ns/a", "token": 1},
        *END,
    ]
    verdict = judged(tmp_path, history)
    assert verdict.report.violations["target-tokens-never-go-back"], verdict.table()
    assert verdict.porcupine.illegal == ["target ns/a"]
    assert verdict.agree and not verdict.ok


def test_a_stale_completion_accepted_after_a_newer_claim_is_caught_by_both(
    tmp_path: Path,
) -> None:
    history = [
        observed(1.0, 1, "a-1"),
        observed(2.0, 1, None),
        observed(3.0, 2, "a-2"),
        op("complete", 5.0, 5.5, 1, "a-1", ok=True, reason=None),
        observed(6.0, 2, None, completion(1, "a-1")),
        *END,
    ]
    verdict = judged(tmp_path, history)
    assert verdict.report.violations["one-completion-per-job"], verdict.table()
    assert verdict.porcupine.illegal == ["lease ns/a"]
    assert verdict.agree


def test_porcupine_judges_real_time_the_project_checker_does_not(tmp_path: Path) -> None:
    # A completion accepted under token 1 although token 2 was granted (and
    # seen) before the completion was even sent: the watch never saw the
    # completion, so only the real-time order shows it.
    history = [
        observed(1.0, 1, "a-1"),
        observed(2.0, 1, None),
        observed(3.0, 2, "a-2"),
        op("complete", 5.0, 5.5, 1, "a-1", ok=True, reason=None),
        *END,
    ]
    verdict = judged(tmp_path, history)
    assert verdict.porcupine.illegal == ["lease ns/a"]
    assert verdict.report.ok
    assert not verdict.agree and not verdict.ok
    assert "checkers agree: NO" in verdict.table()


def test_a_write_whose_answer_was_lost_may_or_may_not_have_taken_effect(
    tmp_path: Path,
) -> None:
    lost = [op("write-unknown", 1.0, 1.1, 3, "a-3")]
    not_applied = [*lost, op("write", 2.0, 2.1, 2, "a-2", ok=True, reason=None), *END]
    applied = [*lost, op("write", 2.0, 2.1, 2, "a-2", ok=False, reason="StaleToken"), *END]
    assert judged(tmp_path, not_applied).porcupine.ok
    assert judged(tmp_path, applied).porcupine.ok


def test_a_refusal_the_register_would_have_accepted_is_not_linearizable(
    tmp_path: Path,
) -> None:
    history = [
        op("write", 1.0, 1.1, 2, "a-2", ok=True, reason=None),
        op("write", 2.0, 2.1, 2, "a-2", ok=False, reason="StaleToken"),
        op("write", 3.0, 3.1, 2, "a-2", ok=False, reason="DuplicateEffect"),
        *END,
    ]
    verdict = judged(tmp_path, history)
    assert verdict.porcupine.illegal == ["target ns/a"]


def test_the_project_checker_counts_what_porcupine_does_not_judge() -> None:
    lost = checker.check([*CLEAN[:-1], {"kind": "job_end", "job": "ns/a", "phase": "Running"}])
    assert lost.violations["no-job-lost"]
    verdict = judge.Judgement(lost, judge.Porcupine(result="Ok"))
    assert verdict.agree and not verdict.ok
