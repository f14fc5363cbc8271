"""A short chaos run (the one `make chaos` runs, smaller): faults, then 0 violations."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.chaosrun import faults_injected, run_chaos


def test_short_chaos_run_has_no_violations(tmp_path: Path) -> None:
    output = run_chaos(
        tmp_path / "run", "--seed", "7", "--jobs", "24", "--concurrency", "8", "--minutes", "1.5"
    )
    faults = faults_injected(output)
    assert len([line for line in faults.splitlines() if line.strip()]) >= 3, faults
    assert "write accepted" in output
