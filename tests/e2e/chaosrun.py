"""The chaos harness (``testing/chaos``) run as `make chaos` runs it, for the e2e tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_chaos(keep: Path, *args: str) -> str:
    """Run ``python -m chaos.run *args --keep keep`` to its end (10 min at most).

    It must exit 0 with no violation, the project's checker and porcupine
    agreeing.

    Returns:
        Its output (stdout, then stderr).
    """
    result = subprocess.run(
        [sys.executable, "-m", "chaos.run", *args, "--keep", str(keep)],
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
    return output


def faults_injected(output: str) -> str:
    """The "faults injected:" section of a run's output."""
    return output.split("faults injected:", 1)[1].split("operations:", 1)[0]
