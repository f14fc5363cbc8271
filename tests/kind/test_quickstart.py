"""The README's Helm quickstart, run as written on a real kind cluster (the kind tier).

The commands are the ``sh`` block under "Quickstart with a cluster" in README.md,
run by ``bash -e`` in the repository with kubectl, helm and kind on PATH, a
kubeconfig of the tier's own and ``KIND_CLUSTER`` naming the tier's cluster (the
block's ``make kind-up`` creates it; the session's end deletes it). The transcript is
written to build/kind-quickstart-transcript.txt.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.kind.kube import QUICKSTART_RAN

REPO = Path(__file__).resolve().parents[2]
TRANSCRIPT = REPO / "build" / "kind-quickstart-transcript.txt"
# A cold run builds the node image (Go builds, debootstrap) before the cluster starts.
DEADLINE_SECONDS = 45 * 60

pytestmark = [pytest.mark.kind, pytest.mark.timeout(DEADLINE_SECONDS + 300)]


def quickstart_commands() -> str:
    """Return the ``sh`` block under README.md's "Quickstart with a cluster" heading."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Quickstart with a cluster", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert block is not None, "README.md has no sh block under 'Quickstart with a cluster'"
    return block.group(1)


def test_readme_quickstart_runs_to_succeeded(kind_env: dict[str, str]) -> None:
    TRANSCRIPT.parent.mkdir(exist_ok=True)
    started = time.monotonic()
    ran = subprocess.run(
        ["bash", "-e", "-x", "-c", quickstart_commands()],
        cwd=REPO,
        env={**kind_env, "PS4": "$ "},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=DEADLINE_SECONDS,
    )
    transcript = f"{ran.stdout}# exit {ran.returncode} after {time.monotonic() - started:.0f}s\n"
    TRANSCRIPT.write_text(transcript)
    assert ran.returncode == 0, transcript
    phase = subprocess.run(
        ["kubectl", "-n", "demo", "get", "ljob", "hello", "-o", "jsonpath={.status.phase}"],
        env=kind_env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert phase == "Succeeded", transcript
    assert re.search(r"leasedjob\S*/hello\s+Succeeded", transcript), transcript
    assert re.search(r"joblease\S*/hello\s.*Succeeded", transcript), transcript
    kind_env[QUICKSTART_RAN] = "1"
