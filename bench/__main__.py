"""``python -m bench``: run the benchmark, print the tables, write ``bench/results.md``.

Why this module exists: it is the run's outline (parse the options, start a
control plane, run the chosen parts in order, report); each part lives in
its own module.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Final

from bench import contention, handover, jobs, operations, reclaim, scale
from bench.cluster import install_crds, local_cluster
from bench.harness import FULL, QUICK, REPO, Harness, log
from bench.report import Results, machine_facts, report

PARTS: Final = ("ops", "contention", "reclaim", "scale", "jobs", "handover")


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # run the finally blocks: stop operator and cluster


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark with the command-line arguments ``argv``; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmarks: lease operations against the raw API server, contention,"
        " reclaim latency, operator scale.",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes (about 3 minutes)")
    parser.add_argument(
        "--only", default=",".join(PARTS), help=f"comma-separated parts of {','.join(PARTS)}"
    )
    parser.add_argument("--output", type=Path, default=REPO / "bench" / "results.md")
    parser.add_argument("--tiers", help="scale tiers, e.g. 1000,5000 (overrides the size)")
    parser.add_argument("--threads", type=int, help="load generator threads")
    parser.add_argument(
        "--jobs", default="20", help="jobs created at once, per size, e.g. 20,200 (part jobs)"
    )
    parser.add_argument(
        "--handovers",
        type=int,
        default=20,
        help="hand-overs per system and signal (SIGKILL, SIGSTOP) (part handover)",
    )
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts: {', '.join(sorted(unknown))}")
    sizes = QUICK if args.quick else FULL
    if args.tiers:
        sizes = replace(sizes, scale_tiers=tuple(int(x) for x in args.tiers.split(",")))
    if args.threads:
        sizes = replace(sizes, scale_threads=args.threads)
    signal.signal(signal.SIGTERM, _terminate)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="leasehold-bench-") as tmp:
        work = Path(tmp)
        log("starting a local control plane")
        load_before = os.getloadavg()
        with local_cluster(work) as cluster:
            h = Harness(cluster, work, sizes)
            h.loads.append(("before the run", load_before))
            install_crds(h)
            facts = machine_facts(h.admin)
            results = Results(h.loads, h.notes, sizes.scale_window)
            for part in PARTS:
                if part not in parts:
                    continue
                h.note_load(f"before {part}")
                if part == "ops":
                    results.ops = operations.run(h)
                elif part == "contention":
                    results.contention = contention.run(h)
                elif part == "reclaim":
                    results.reclaim = reclaim.run(h)
                elif part == "scale":
                    results.scale = scale.run(h)
                elif part == "jobs":
                    counts = tuple(int(x) for x in args.jobs.split(","))
                    results.jobs = jobs.run(h, counts, rounds=sizes.rounds)
                else:
                    results.handover = handover.run(h, args.handovers)
            h.note_load("after the run")
    text = report(results, facts, args.quick, started)
    print(text)
    args.output.parent.mkdir(parents=True, exist_ok=True)  # e.g. build/ in a fresh clone
    args.output.write_text(text + "\n")
    log(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
