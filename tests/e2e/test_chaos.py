"""A short chaos run (the one `make chaos` runs, smaller): faults, then 0 violations."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_short_chaos_run_has_no_violations(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "chaos.run",
            "--seed",
            "7",
            "--jobs",
            "24",
            "--concurrency",
            "8",
            "--minutes",
            "1.5",
            "--keep",
            str(tmp_path / "run"),
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO / "testing")},
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    assert "0 violations" in output
    assert "checkers agree: yes" in output  # the project's checker and porcupine
    faults = output.split("faults injected:", 1)[1].split("operations:", 1)[0]
    assert len([line for line in faults.splitlines() if line.strip()]) >= 3, faults
    assert "write accepted" in output
