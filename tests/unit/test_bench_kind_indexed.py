"""The Indexed side by side's own arithmetic: node CPU files, API timestamps, the verdicts."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from bench.indexed import _stamp, pods_section
from bench.kind import read_node_cpu
from bench.stats import Summary, summarize


def test_node_cpu_reads_cgroup_v1_nanoseconds_and_v2_microseconds(tmp_path: Path) -> None:
    v1 = tmp_path / "cpuacct.usage"
    v1.write_text("2500000000\n")
    v2 = tmp_path / "cpu.stat"
    v2.write_text("usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n")
    gone = tmp_path / "gone" / "cpuacct.usage"

    got = read_node_cpu({"node a": v1, "node b": v2, "node c": gone})

    assert got == {"node a": pytest.approx(2.5), "node b": pytest.approx(1.5)}


def test_stamp_reads_both_forms_of_an_api_timestamp() -> None:
    at = datetime(2026, 12, 5, 1, 2, 3, tzinfo=UTC)

    assert _stamp(at) == at.timestamp()
    assert _stamp("2026-12-05T01:02:03Z") == at.timestamp()
    assert _stamp(None) is None


def _side(kind: str, seconds: float, writes: dict[str, int]) -> dict[str, Any]:
    return {
        "kind": kind,
        "done": True,
        "progress": "10",
        "seconds": seconds,
        "writes_per_index": sum(writes.values()) / 10,
        "events_per_index": 1.0,
        "writes": writes,
        "reads": {"GET pods": 10},
        "cpu": {"kube-apiserver": 0.5, "machine": 1.0, "other": 0.5},
        "cpu_seconds": {"kube-apiserver": 5.0},
        "load": ((1.0, 1.0, 1.0), (2.0, 2.0, 2.0)),
        "timeline": {
            "pods": 10,
            "to first pod": 0.0,
            "pod -> started": _summary(1.0),
            "run": _summary(1.0),
            "in flight": 4.0,
            "running": 3.0,
            "last exit -> done": 1.0,
        },
    }


def _summary(value: float) -> Summary:
    return summarize([value])


@pytest.mark.parametrize(
    ("leased_seconds", "leased_writes", "verdicts"),
    [
        (12.0, {"POST pods": 60, "POST jobleases": 12}, ("met", "met")),
        (12.1, {"POST pods": 60, "POST jobleases": 13}, ("missed", "missed")),
    ],
)
def test_section_judges_each_ratio_against_1_2x(
    leased_seconds: float, leased_writes: dict[str, int], verdicts: tuple[str, str]
) -> None:
    batch = _side("batch/v1 Job", 10.0, {"POST pods": 60})
    leased = _side("LeasedJob", leased_seconds, leased_writes)
    figures = {
        "completions": 10,
        "parallelism": 5,
        "command": "sleep 1",
        "batch": batch,
        "leased": leased,
        "time_ratio": leased_seconds / 10.0,
        "writes_ratio": leased["writes_per_index"] / batch["writes_per_index"],
    }

    lines = "\n".join(pods_section(figures, "t", "s")).splitlines()

    time_part, writes_part = lines[-1].split("; writes per index")
    assert f"target <= 1.2x: {verdicts[0]}" in time_part
    assert f"target <= 1.2x: {verdicts[1]}" in writes_part
    row = next(line for line in lines if "POST jobleases" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells == ["POST jobleases", "0.00", f"{leased_writes['POST jobleases'] / 10:.2f}"]
