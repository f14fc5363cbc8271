"""The Promela model of the lifecycle protocol, checked by Spin (bounded run).

Runs ``model/check.sh quick``: a bitstate search of the correct model with
every scenario on must find no error, and each seeded protocol bug must be
caught with a counterexample. ``make model-check`` runs the exhaustive search.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

MODEL = Path(__file__).resolve().parents[2] / "model"
MUTATIONS = (
    "complete-no-token-check",
    "complete-twice",
    "rearm-resets-token",
    "target-no-fence",
    "stop-by-name",
    "no-local-deadline",
    "deadline-from-reply",
    "reclaim-no-precondition",
    "adopt-any",
    "no-uid-check",
    "renew-binds",
)


def test_model_holds_and_every_mutation_is_caught() -> None:
    """The correct model has 0 errors; every mutation yields a violation."""
    assert shutil.which("spin") and shutil.which("gcc"), "run hack/syspkgs.sh model"
    done = subprocess.run(
        ["nice", "-n", "10", str(MODEL / "check.sh"), "quick"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    verdicts = {
        m.group(1): m.group(2)
        for m in re.finditer(r"^(\S+)\s+(ok|caught: .*?)\s+states=", done.stdout, re.M)
    }
    assert verdicts.get("correct") == "ok", done.stdout + done.stderr
    for name in MUTATIONS:
        assert verdicts.get(name, "").startswith("caught"), (name, done.stdout, done.stderr)
    assert done.returncode == 0, done.stdout + done.stderr
