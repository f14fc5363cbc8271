"""The chaos harness (``testing/chaos``) run as `make chaos` runs it, for the e2e tests."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

RUN_LOCK = Path(tempfile.gettempdir()) / "leasehold-chaos-run.lock"
"""Held while a chaos run runs: one at a time on this machine.

A run starts an operator, Kueue, a pod runner and a worker process per
attempt on its own, with 3 s leases. Two at once on a 2-core machine (the
xdist workers put the two chaos files side by side) starved their workers
past their windows attempt after attempt, and a run ended with jobs never
done (CI, 2026-12-05). The lock is the machine's, not the session's: a
second checkout's run waits too.
"""


def run_chaos(keep: Path, *args: str) -> str:
    """Run ``python -m chaos.run *args --keep keep`` to its end (10 min at most).

    Waits first until no other chaos run runs on this machine (`RUN_LOCK`).

    It must exit 0 with no violation, the project's checker and porcupine
    agreeing.

    Returns:
        Its output (stdout, then stderr).
    """
    with RUN_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
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
