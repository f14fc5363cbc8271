"""A short chaos run (the one `make chaos` runs, smaller): faults, then 0 violations.

Plain, suspended and Indexed jobs and the three cron jobs (Forbid, Replace,
Allow), so both checkers judge the cron invariants too.
"""

from __future__ import annotations

from pathlib import Path

from tests.e2e.chaosrun import faults_injected, run_chaos


def test_short_chaos_run_has_no_violations(tmp_path: Path) -> None:
    output = run_chaos(
        tmp_path / "run",
        *("--seed", "7", "--jobs", "24", "--concurrency", "8", "--minutes", "1.5"),
        # the three cron jobs too, their runs shorter than make chaos's (the test's time)
        *("--cron-hold-seconds", "20"),
    )
    faults = faults_injected(output)
    assert len([line for line in faults.splitlines() if line.strip()]) >= 3, faults
    assert "write accepted" in output
