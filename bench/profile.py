"""Where the operator spends its time under load: py-spy samples, grouped by part.

Why this module exists: CPU per renewal says how much the operator costs,
not where. The parts of the operator are named here by the code objects
that mark them (a watch thread's loop, the loop's event handler), so a
part's module and qualified name follow the code when it moves: a frame
belongs to a part by its module, never by a file path.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from kopf._core.reactor import queueing

from bench.harness import REPO, log
from bench.stats import FrameGroup, stack_share, top_frames
from leasehold.controller.act.jobs import JobActor
from leasehold.controller.engines.expiry import ExpiryWatch
from leasehold.controller.engines.watching import ListWatch
from leasehold.controller.runtime import Runtime


def code_group(function: Callable[..., Any]) -> FrameGroup:
    """The frames of ``function``, named by its module and qualified name."""
    return FrameGroup(function.__module__, function.__qualname__)


PROFILE_GROUPS: Final = {
    "lease watch thread (ListWatch: read, parse, hand over)": code_group(ListWatch._watch_from),
    "lease events on the loop (Runtime.on_lease_event)": code_group(Runtime.on_lease_event),
    "Kopf per-object event worker (queueing.worker; LeasedJobs only)": code_group(queueing.worker),
    "Kopf watch stream (read, parse, dispatch)": code_group(queueing.watcher),
    "reconcile threads (JobActor.reconcile)": code_group(JobActor.reconcile),
    "expiry watch (ExpiryWatch.run)": code_group(ExpiryWatch.run),
    "event loop idle (selector wait)": FrameGroup("selectors", "select"),
    "prometheus metrics server": FrameGroup("prometheus_client"),
}
"""Named parts of the operator's profile: label -> the frames that mark them."""


def record(pid: int, seconds: float, workdir: Path) -> dict[str, Any]:
    """Sample process ``pid`` with py-spy for ``seconds``; its top frames and parts.

    The raw profile is written to ``workdir`` and copied to
    ``bench/operator-profile.txt``.

    Returns:
        ``{"self": [(frame, share)], "inclusive": [...], "groups": {label:
        share}, "path": ...}``, or ``{"error": ...}`` when py-spy is missing
        or fails.
    """
    spy = Path(sys.prefix) / "bin" / "py-spy"
    if not spy.exists():
        found = shutil.which("py-spy")
        if found is None:
            return {"error": "py-spy not installed (.venv/bin/pip install py-spy)"}
        spy = Path(found)
    out = workdir / "operator-profile.txt"
    log(f"profile: py-spy on the operator for {seconds:.0f}s")
    result = subprocess.run(
        [
            str(spy),
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(int(seconds)),
            "--rate",
            "100",
            "--format",
            "raw",
            "--output",
            str(out),
            "--nonblocking",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0 or not out.exists():
        return {"error": f"py-spy failed: {result.stderr.strip()[-500:]}"}
    text = out.read_text()
    own, incl = top_frames(text, limit=15)
    keep = REPO / "bench" / "operator-profile.txt"
    shutil.copy(out, keep)
    groups = {name: stack_share(text, group) for name, group in PROFILE_GROUPS.items()}
    return {
        "self": own,
        "inclusive": incl[:25],
        "groups": groups,
        "path": str(keep.relative_to(REPO)),
    }
