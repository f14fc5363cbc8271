"""A named incident replayed on the local control plane: 0 violations, both checkers agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.scenarios import SCENARIOS
from tests.e2e.chaosrun import faults_injected, run_chaos


def test_the_three_named_scenarios_are_kept() -> None:
    assert set(SCENARIOS) == {
        "partition-during-write",
        "gc-pause-past-lease",
        "apiserver-restart-during-renew",
    }
    assert all(s.steps and s.incident for s in SCENARIOS.values())


def test_an_unknown_scenario_is_refused() -> None:
    from chaos.run import main

    with pytest.raises(SystemExit):
        main(["--scenario", "no-such-incident"])


def test_gc_pause_past_lease_replayed_has_no_violations(tmp_path: Path) -> None:
    output = run_chaos(
        tmp_path / "run",
        "--scenario",
        "gc-pause-past-lease",
        "--seed",
        "5",
        "--jobs",
        "32",  # enough work that all three pauses find running workers on a quiet machine
        "--concurrency",
        "4",
        "--minutes",
        "1.5",
        *("--cron-policies", "none"),  # the incident's workload: jobs only
    )
    faults = faults_injected(output)
    assert faults.split() == ["gc-pause-past-lease", "3"], faults  # its 3 steps, no others
    assert "scenario gc-pause-past-lease done" in output
    assert (tmp_path / "run" / "history.jsonl").stat().st_size > 0
