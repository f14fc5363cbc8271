"""The Promela models (lifecycle, schedules, indexes, work queue, Kueue), checked by Spin.

Runs ``model/check.sh quick``: a bitstate search of the lifecycle model with
every scenario on, and the exhaustive searches of the schedules, indexes and
work-queue models that end in seconds, and of the Kueue model
(``model/queue.pml``: two LeasedJobs in a quota for one, with preemption),
must find no error, and the seeded protocol
bugs whose counterexample Spin finds within seconds must be caught, each
with a trail Spin replays. ``make model-check`` runs the exhaustive search and every
mutation (the figures are in bench/model-check.md; the exhaustive searches,
one per scenario, take longer than every test run should).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

MODEL = Path(__file__).resolve().parents[2] / "model"
MUTATIONS = (
    "complete-no-token-check",
    "complete-twice",
    "target-no-fence",
    "stop-by-name",
    "adopt-any",
    "renew-binds",
    "lost-pod-no-uid-check",
    "claim-any-incarnation",
    "claim-suspended",
    "suspend-no-cap",
    "excuse-while-held",
    "excuse-twice",
    "no-hold-wait-recreate",
    "no-hold-wait-suspend",
    "held-create-overwrites",
    "held-adopt-any",
    "held-create-suspended",
    "held-keep-any",
    # model/schedules.pml, model/indexes.pml and model/workqueue.pml
    "failed-retry-final",
    "failed-retry-final-replace",
    "closed-excuse",
    "closed-suspend",
    "untaken-final",
    "untaken-final-replace",
    "no-ceiling",
    "forbid-no-hold-wait",
    "replace-no-hold-wait",
    "stop-by-name-index",
    "wq-no-stop",
    # a cron job's run of several completions (schedules.pml S_INDEXED)
    "first-index-only",
    "first-index-only-replace",
    "index-no-run-check",
    "index-list-before-close",
    # model/queue.pml: LeasedJobs queued by Kueue (Q1 gate, Q2 quota, Q3 fence, Q4 no hang)
    "queue-no-gate",
    "queue-no-gate-pull",
    "queue-unset-first",
    "queue-unset-first-pull",
    "queue-resume-old-token",
    "queue-unfenced-evict",
    "queue-no-finish",
    "queue-no-fence",
)
"""The mutations caught within seconds; ``make model-check`` runs every one."""
CORRECT = (
    "correct",
    "sched-forbid",
    "sched-replace",
    "sched-allow",
    "sched-forbid-indexed",
    "sched-replace-indexed",
    "index",
    "index-collide",
    "workqueue",
    "queue",
    "queue-pull",
    "queue-shared",
)
"""The searches of the correct models in the quick mode."""


@pytest.mark.timeout(1800)  # `make test` runs it at nice 19 beside the cluster tiers
def test_model_holds_and_every_mutation_is_caught() -> None:
    """The correct model has 0 errors; every mutation yields a violation."""
    assert shutil.which("spin") and shutil.which("gcc"), "run hack/syspkgs.sh model"
    done = subprocess.run(
        ["nice", "-n", "10", str(MODEL / "check.sh"), "quick"],
        env={**os.environ, "MODEL_MUTATIONS": " ".join(MUTATIONS)},
        capture_output=True,
        text=True,
        timeout=1800,  # two busy cores: the bitstate search alone took 500 s
        check=False,
    )
    verdicts = {
        m.group(1): m.group(2)
        for m in re.finditer(r"^(\S+)\s+(ok|caught: .*?)\s+states=", done.stdout, re.M)
    }
    for name in CORRECT:
        assert verdicts.get(name) == "ok", (name, done.stdout + done.stderr)
    for name in MUTATIONS:
        assert verdicts.get(name, "").startswith("caught"), (name, done.stdout, done.stderr)
        # Spin replayed the counterexample pan wrote (its trail) to the same violation.
        assert re.search(r"trail=[1-9]", verdicts[name]), (name, done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
