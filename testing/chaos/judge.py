"""The chaos history judged twice: the project's checker and porcupine.

Why two: the project's checker (:mod:`chaos.checker`) was written by the
system's authors; porcupine (``hack/porcupine``, the Go linearizability
checker, with a model of each lease record and each fenced target key as a
compare-and-swap register) was not. A run passes only when both find the
history correct; a disagreement is reported as such.

The checkers overlap on the register invariants (one completion per job,
tokens only go up per lease, a target never accepts an older token) and on
the cron invariants (Forbid and Replace runs never hold at once, a replaced
run's worker stops before the next run's claim, later runs' tokens above
earlier runs'; porcupine models each cron job as one more partition): there
they must agree. ``no-job-lost`` and ``no-effect-after-deadline`` are judged by
the project's checker alone (they are not linearizability properties).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos import checker

BUILD = Path(__file__).resolve().parents[2] / "hack" / "porcupine" / "build.sh"
REGISTER_INVARIANTS = (
    "one-completion-per-job",
    "tokens-increase-per-lease",
    "target-tokens-never-go-back",
    "cron-runs-one-at-a-time",
    "replaced-run-stops-before-next",
    "cron-run-tokens-ordered",
)
"""The project's invariants that porcupine's model also judges (registers and cron jobs)."""


def porcupine_binary() -> Path:
    """Build (once; cached under ``LEASEHOLD_CACHE_DIR``) and locate the judge.

    Returns:
        The path of the ``leasehold-porcupine`` binary.

    Raises:
        subprocess.CalledProcessError: the Go build failed.
    """
    done = subprocess.run([str(BUILD)], capture_output=True, text=True, check=True)
    return Path(done.stdout.strip().splitlines()[-1])


@dataclass
class Porcupine:
    """Porcupine's verdict on one history.

    Attributes:
        result: ``Ok`` (linearizable), ``Illegal`` or ``Unknown`` (timed out).
        operations: operations by kind and answer (``complete ok``, ...).
        partitions: lease records and target keys checked.
        illegal: the partitions with no linearization.
        html: the visualisation written for the failing partitions, if any.
    """

    result: str
    operations: dict[str, int] = field(default_factory=dict)
    partitions: int = 0
    illegal: list[str] = field(default_factory=list)
    html: str | None = None

    @property
    def ok(self) -> bool:
        """Whether porcupine found a linearization of every partition."""
        return self.result == "Ok"


def run_porcupine(history: Path, html: Path | None = None, timeout_seconds: int = 60) -> Porcupine:
    """Judge a history file (JSON lines) with porcupine.

    Args:
        history: the chaos run's history file.
        html: where to write the visualisation when it is not linearizable.
        timeout_seconds: porcupine's time limit per partition.

    Returns:
        The verdict.

    Raises:
        RuntimeError: the judge could not read the history.
    """
    argv = [str(porcupine_binary()), "-timeout", f"{timeout_seconds}s"]
    if html is not None:
        argv += ["-html", str(html)]
    done = subprocess.run([*argv, str(history)], capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1, 2) or not done.stdout.strip():
        raise RuntimeError(f"leasehold-porcupine failed ({done.returncode}): {done.stderr}")
    verdict: dict[str, Any] = json.loads(done.stdout)
    return Porcupine(
        result=str(verdict["result"]),
        operations=dict(verdict.get("operations") or {}),
        partitions=int(verdict.get("partitions", 0)),
        illegal=list(verdict.get("illegal") or []),
        html=verdict.get("html"),
    )


@dataclass
class Judgement:
    """Both verdicts on one history.

    Attributes:
        report: the project's checker's report.
        porcupine: porcupine's verdict.
    """

    report: checker.Report
    porcupine: Porcupine

    @property
    def register_ok(self) -> bool:
        """The project's verdict on the invariants porcupine also judges."""
        return not any(self.report.violations.get(name) for name in REGISTER_INVARIANTS)

    @property
    def agree(self) -> bool:
        """Whether both checkers reached the same verdict on the register invariants."""
        return self.register_ok == self.porcupine.ok

    @property
    def ok(self) -> bool:
        """The run's verdict: both checkers found no violation."""
        return self.report.ok and self.porcupine.ok

    def table(self) -> str:
        """The project's table, then porcupine's verdict and the agreement."""
        lines = [
            self.report.table(),
            "porcupine (lease records and target keys as CAS registers, cron jobs' runs):",
        ]
        lines += [f"  {k:<32} {v:>6}" for k, v in sorted(self.porcupine.operations.items())]
        lines.append(f"  {'partitions':<32} {self.porcupine.partitions:>6}")
        lines.append(f"  {'verdict':<32} {self.porcupine.result:>6}")
        lines += [f"    - not linearizable: {name}" for name in self.porcupine.illegal[:5]]
        if self.porcupine.html:
            lines.append(f"    visualisation: {self.porcupine.html}")
        verdict = "yes" if self.agree else "NO (the checkers disagree)"
        lines.append(f"checkers agree: {verdict}")
        return "\n".join(lines)


def judge(history: Path, html: Path | None = None) -> Judgement:
    """Judge a history file with both checkers.

    Args:
        history: the chaos run's history file (JSON lines).
        html: where porcupine writes its visualisation on failure.

    Returns:
        Both verdicts.
    """
    lines = history.read_text().splitlines()
    report = checker.check([json.loads(line) for line in lines if line.strip()])
    return Judgement(report, run_porcupine(history, html))
