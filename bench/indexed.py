"""An Indexed LeasedJob of 1,000 indexes run to completion: time, operator CPU, API writes.

Why this module exists: issue 15 asks what one index costs the operator and
the API server. ``python -m bench.indexed [--completions N] [--parallelism P]``
starts a fresh local control plane and an operator, creates a pull-mode
Indexed job, and lets a pool of worker threads in this process claim each
index's lease and complete it at once (no pods: the figures are the
operator's and the leases', not a kubelet's). It reports the wall time,
the operator's CPU seconds, and the API requests by verb and resource over
the run, per index; the pool's own writes (one claim, one complete per
index) are counted apart.

``python -m bench.indexed --pods [--completions N] [--parallelism P]`` runs
the side by side of issue 15 instead: one Indexed batch/v1 Job (the real job
controller) and one Indexed push-mode LeasedJob (the operator), the same
number of indexes and parallelism, the same command in the same pods (the
pod runner plays the kubelet for both; the LeasedJob's under ``leasehold
run``), one after the other on the same control plane. Each is timed from
its create to done (the Job's ``Complete`` condition, the LeasedJob's
``Succeeded`` phase, polled every second) and its API writes are the API
server's ``apiserver_request_total`` over that window (node and
leader-election heartbeats and Events counted apart, as in ``bench/jobs.py``).
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Final, cast

from kubernetes import client

from bench.cluster import install_crds, local_cluster
from bench.harness import (
    CLK_TCK,
    QUICK,
    WRITE_VERBS,
    CpuMeter,
    Harness,
    all_requests,
    apiserver_samples,
    log,
    new_client,
    sched_seconds,
)
from bench.jobs import (
    BACKGROUND,
    KINDS,
    LOCAL_PODS,
    LOCAL_SETTING,
    SETTLE_SECONDS,
    PodShape,
    _writes,
    grant_worker_rights,
    job_done,
    leased_job_done,
    pod_template,
)
from bench.stats import markdown_table, summarize
from leasehold import names
from leasehold.lease.errors import StoreError
from leasehold.lease.protocol import Outcome
from leasehold.lease.store import Accepted, LeaseStore
from operatorproc import OperatorProcess
from podrunner import PodRunner

JOB = "big"


def _pool(
    kubeconfig: Path, namespace: str, who: str, stop: threading.Event, done: Counter[str]
) -> None:
    """One worker: list the job's open index leases, claim one, complete it; until stopped."""
    api = new_client(kubeconfig)
    store = LeaseStore(api)
    selector = f"{names.LABEL_JOB}={JOB}"
    while not stop.is_set():
        try:
            leases = store.list_leases(namespace, label_selector=selector)
        except StoreError:
            time.sleep(0.2)
            continue
        open_leases = [
            lease
            for lease in leases
            if not lease.record.held
            and lease.record.completion is None
            and (lease.record.max_fencing_token or 1) > lease.record.fencing_token
        ]
        if not open_leases:
            time.sleep(0.1)
            continue
        lease = open_leases[hash(who) % len(open_leases)]
        claimed = store.claim(namespace, lease.name, who, observed=lease)
        done["claim requests"] += 1
        if not isinstance(claimed, Accepted):
            continue
        result = store.complete(namespace, lease.name, who, claimed.token, Outcome.SUCCEEDED)
        done["complete requests"] += 1
        if isinstance(result, Accepted):
            done["completed"] += 1
    api.close()


def run(completions: int, parallelism: int, workers: int) -> dict[str, Any]:
    """Run one Indexed job of ``completions`` indexes; returns the figures."""
    with tempfile.TemporaryDirectory(prefix="leasehold-bench-indexed-") as tmp:
        workdir = Path(tmp)
        with local_cluster(workdir) as cluster:
            h = Harness(cluster, workdir, QUICK)
            install_crds(h)
            namespace = h.namespace("indexed")
            op = OperatorProcess(h.kubeconfig, namespace, workdir / "operator.log")
            op.start()
            try:
                assert op.proc is not None
                body = {
                    "apiVersion": names.API_VERSION,
                    "kind": "LeasedJob",
                    "metadata": {"name": JOB},
                    "spec": {
                        "leaseDurationSeconds": 300,
                        "completions": completions,
                        "parallelism": parallelism,
                        "completionMode": "Indexed",
                    },
                }
                before = apiserver_samples(h.admin)
                cpu0 = sched_seconds(op.proc.pid)[0]
                t0 = time.monotonic()
                h.custom.create_namespaced_custom_object(
                    names.GROUP, names.VERSION, namespace, names.PLURAL_LEASED_JOBS, body
                )
                stop = threading.Event()
                counts: Counter[str] = Counter()
                threads = [
                    threading.Thread(
                        target=_pool, args=(h.kubeconfig, namespace, f"w{i}", stop, counts)
                    )
                    for i in range(workers)
                ]
                for t in threads:
                    t.start()
                phase = None
                while phase != "Succeeded":
                    time.sleep(0.5)
                    got: Any = h.custom.get_namespaced_custom_object(
                        names.GROUP, names.VERSION, namespace, names.PLURAL_LEASED_JOBS, JOB
                    )
                    status = got.get("status") or {}
                    phase = status.get("phase")
                    if time.monotonic() - t0 > 1800:
                        raise RuntimeError(
                            f"not done after 30 min: {status.get('completionProgress')}"
                        )
                elapsed = time.monotonic() - t0
                stop.set()
                for t in threads:
                    t.join()
                cpu = sched_seconds(op.proc.pid)[0] - cpu0
                after = apiserver_samples(h.admin)
            finally:
                op.stop()
    requests = all_requests(before, after)
    writes = Counter({k: v for k, v in requests.items() if k.split(" ", 1)[0] in WRITE_VERBS})
    pool_writes = counts["claim requests"] + counts["complete requests"]
    total_writes = sum(writes.values())
    return {
        "completions": completions,
        "parallelism": parallelism,
        "workers": workers,
        "seconds": elapsed,
        "operator_cpu_seconds": cpu,
        "completedIndexes": status.get("completedIndexes"),
        "writes": dict(writes),
        "writes_per_index": total_writes / completions,
        "operator_writes_per_index": (total_writes - pool_writes) / completions,
        "pool_writes_per_index": pool_writes / completions,
        "requests_per_index": sum(requests.values()) / completions,
        "pool": dict(counts),
    }


POD_COMMAND: Final = "sleep 1"
"""The shell command of every index's pod, for both kinds."""
POD_LEASE_SECONDS: Final = 30
"""The LeasedJob's ``leaseDurationSeconds`` (long: a loaded machine starts pods slowly)."""


def batch_indexed_job(
    name: str, completions: int, parallelism: int, shape: PodShape = LOCAL_PODS
) -> dict[str, Any]:
    """An Indexed batch/v1 Job of ``completions`` indexes: :data:`POD_COMMAND` in ``shape``."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completions": completions,
            "parallelism": parallelism,
            "completionMode": "Indexed",
            "backoffLimit": completions,
            "template": pod_template(["sh", "-c", POD_COMMAND], shape),
        },
    }


def leased_indexed_job(
    name: str, completions: int, parallelism: int, shape: PodShape = LOCAL_PODS
) -> dict[str, Any]:
    """The same job as a push-mode Indexed LeasedJob (its command under ``leasehold run``)."""
    return {
        "apiVersion": names.API_VERSION,
        "kind": "LeasedJob",
        "metadata": {"name": name},
        "spec": {
            "leaseDurationSeconds": POD_LEASE_SECONDS,
            "maxAttempts": 3,
            "completions": completions,
            "parallelism": parallelism,
            "completionMode": "Indexed",
            "template": pod_template(["leasehold", "run", "--", "sh", "-c", POD_COMMAND], shape),
        },
    }


def _stamp(value: Any) -> float | None:
    """Seconds since the epoch of an API timestamp (a datetime or an RFC 3339 string)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return float(value.timestamp())


def pod_timeline(
    h: Harness, ns: str, batch: bool, name: str, created: float, done: float
) -> dict[str, Any]:
    """Where a finished Indexed job's time went, from its pods' timestamps (1 s resolution).

    Args:
        h: the run's harness.
        ns: the namespace.
        batch: a batch/v1 Job's pods (label ``job-name``) or a LeasedJob's.
        name: the job's name.
        created: wall-clock seconds of the job's create.
        done: wall-clock seconds when it was seen done.

    Returns:
        ``pods`` (pods of the job), ``to first pod`` (create -> the first
        pod's creation, s), ``pod -> started`` and ``run`` (:class:`Summary`
        of pod creation -> its container started, and of the container's
        start -> exit, s), ``in flight`` (mean pods created and not yet
        exited over create -> done: what the controller kept of the
        parallelism), ``running`` (mean containers running), ``last exit ->
        done`` (s).
    """
    selector = f"job-name={name}" if batch else f"{names.LABEL_JOB}={name}"
    pods: Any = client.CoreV1Api(h.admin).list_namespaced_pod(ns, label_selector=selector)
    births: list[float] = []
    starts: list[float] = []
    runs: list[float] = []
    flights: list[float] = []
    exits: list[float] = []
    for pod in pods.items:
        born = _stamp(pod.metadata.creation_timestamp)
        if born is None:
            continue
        births.append(born)
        states = [c.state for c in (pod.status.container_statuses or []) if c.state]
        ended = next((st.terminated for st in states if st.terminated), None)
        started = _stamp(ended.started_at) if ended else None
        if started is None:
            running = next((st.running for st in states if st.running), None)
            started = _stamp(running.started_at) if running else None
        exited = _stamp(ended.finished_at) if ended else None
        if started is not None:
            starts.append(started - born)
            runs.append((exited if exited is not None else done) - started)
        flights.append((exited if exited is not None else done) - born)
        if exited is not None:
            exits.append(exited)
    span = max(done - created, 1e-9)
    return {
        "pods": len(births),
        # creationTimestamp has whole seconds: the create's second, not its instant
        "to first pod": (min(births) - math.floor(created)) if births else math.nan,
        "pod -> started": summarize(starts),
        "run": summarize(runs),
        "in flight": sum(flights) / span,
        "running": sum(runs) / span,
        "last exit -> done": (done - max(exits)) if exits else math.nan,
    }


def side(
    h: Harness,
    ns: str,
    batch: bool,
    completions: int,
    parallelism: int,
    timeout: float,
    shape: PodShape = LOCAL_PODS,
    name: str | None = None,
    extra_cpu: Callable[[], Mapping[str, float]] | None = None,
) -> dict[str, Any]:
    """Create one Indexed job of the kind in ``ns``, wait until done; its time, requests and CPU.

    Args:
        h: the run's harness (its admin client scrapes the API server; its
            CPU meter reads the cluster's processes).
        ns: the namespace.
        batch: a batch/v1 Job (True) or a LeasedJob (False).
        completions: indexes.
        parallelism: indexes running at once.
        timeout: seconds to wait for done before giving up (``done`` False).
        shape: the pods' image and ServiceAccount.
        name: the job's name (default ``bjob`` / ``ljob``); on a cluster that
            keeps earlier runs' index leases, a name new to the namespace.
        extra_cpu: more CPU counters (name -> CPU seconds so far, e.g. a
            kind node's cgroup), read with the CPU meter; their deltas join
            ``cpu`` and ``cpu_seconds``.

    Returns:
        ``kind``, ``name``, ``done``, ``progress`` (the Job's ``succeeded`` or
        the LeasedJob's ``completionProgress`` when last polled), ``seconds``
        (create -> done, polled every second), ``writes_per_index``,
        ``events_per_index``, ``writes`` (``"<verb> <resource>"`` -> count,
        heartbeats and Events left out), ``reads`` (GET and LIST, same
        keys), ``cpu`` (process name -> cores over the window, plus
        ``machine`` and ``other``), ``cpu_seconds`` (process name -> CPU
        seconds), ``load`` (1/5/15-min load average at the create and at done),
        ``timeline`` (:func:`pod_timeline`).
    """
    name = name or ("bjob" if batch else "ljob")
    batch_api = client.BatchV1Api(h.admin)
    load_before = os.getloadavg()
    cpu_before = h.meter.snapshot()
    extra_before = dict(extra_cpu()) if extra_cpu else {}
    before = apiserver_samples(h.admin)
    t0 = time.monotonic()
    wall0 = time.time()
    if batch:
        batch_api.create_namespaced_job(
            ns, cast(Any, batch_indexed_job(name, completions, parallelism, shape))
        )
    else:
        h.custom.create_namespaced_custom_object(
            names.GROUP,
            names.VERSION,
            ns,
            names.PLURAL_LEASED_JOBS,
            leased_indexed_job(name, completions, parallelism, shape),
        )
    progress = ""
    polls = 0
    while True:
        time.sleep(1.0)
        polls += 1
        if batch:
            got: Any = h.admin.sanitize_for_serialization(batch_api.read_namespaced_job(name, ns))
            finished = job_done(got)
            progress = str((got.get("status") or {}).get("succeeded", 0))
        else:
            got = h.custom.get_namespaced_custom_object(
                names.GROUP, names.VERSION, ns, names.PLURAL_LEASED_JOBS, name
            )
            finished = leased_job_done(got)
            progress = str((got.get("status") or {}).get("completionProgress"))
        elapsed = time.monotonic() - t0
        if finished or elapsed > timeout:
            break
    wall1 = time.time()
    cpu_after = h.meter.snapshot()
    extra = {k: v - extra_before.get(k, 0.0) for k, v in (extra_cpu() if extra_cpu else {}).items()}
    load_after = os.getloadavg()
    time.sleep(SETTLE_SECONDS)
    requests = all_requests(before, apiserver_samples(h.admin))
    timeline = pod_timeline(h, ns, batch, name, wall0, wall1)  # after the scrape: not counted
    # The benchmark's own create and polling reads are not the job's.
    plural = "jobs" if batch else names.PLURAL_LEASED_JOBS
    requests.subtract({f"POST {plural}": 1, f"GET {plural}": polls})
    requests = +requests
    events = sum(v for k, v in requests.items() if k.split(" ")[1].startswith("events"))
    counted = {
        k: v for k, v in sorted(requests.items()) if k.split(" ")[1].split("/")[0] not in BACKGROUND
    }
    return {
        "kind": KINDS[0] if batch else KINDS[1],
        "name": name,
        "done": finished,
        "progress": progress,
        "seconds": elapsed,
        "writes_per_index": _writes(requests) / completions,
        "events_per_index": events / completions,
        "writes": {k: v for k, v in counted.items() if k.split(" ")[0] in WRITE_VERBS},
        "reads": {k: v for k, v in counted.items() if k.split(" ")[0] in ("GET", "LIST")},
        "cpu": {
            **CpuMeter.cores(cpu_before, cpu_after),
            **{k: v / max(cpu_after.at - cpu_before.at, 1e-9) for k, v in extra.items()},
        },
        "cpu_seconds": {
            **{
                k: (cpu_after.ticks.get(k, 0) - cpu_before.ticks.get(k, 0)) / CLK_TCK
                for k in cpu_after.ticks
            },
            **extra,
        },
        "load": (load_before, load_after),
        "timeline": timeline,
    }


def run_pods(completions: int, parallelism: int, timeout: float) -> dict[str, Any]:
    """The side by side: an Indexed batch/v1 Job, then the same Indexed LeasedJob.

    Returns:
        ``batch`` and ``leased`` (each: ``done``, ``seconds``,
        ``writes_per_index``, ``events_per_index``, ``writes`` by verb and
        resource), and the two ratios (LeasedJob / Job).
    """
    with tempfile.TemporaryDirectory(prefix="leasehold-bench-indexed-pods-") as tmp:
        workdir = Path(tmp)
        with local_cluster(workdir) as cluster:
            h = Harness(cluster, workdir, QUICK)
            install_crds(h)
            ns = h.namespace("indexed-pods")
            grant_worker_rights(h, ns)
            op = OperatorProcess(
                h.kubeconfig, ns, workdir / "operator.log", start_timeout_seconds=120
            )
            runner = PodRunner(h.kubeconfig, workdir / "podrunner")
            try:
                op.start()
                runner.start()
                time.sleep(2.0)  # the operator's start-up settles
                log(f"batch/v1 Job: {completions} indexes, parallelism {parallelism}")
                batch = side(h, ns, True, completions, parallelism, timeout)
                log(f"batch/v1 Job: {batch['seconds']:.1f} s, done={batch['done']}")
                log(f"LeasedJob: {completions} indexes, parallelism {parallelism}")
                leased = side(h, ns, False, completions, parallelism, timeout)
                log(f"LeasedJob: {leased['seconds']:.1f} s, done={leased['done']}")
            finally:
                runner.stop()
                op.stop()
    return {
        "completions": completions,
        "parallelism": parallelism,
        "command": POD_COMMAND,
        "batch": batch,
        "leased": leased,
        "time_ratio": leased["seconds"] / batch["seconds"],
        "writes_ratio": leased["writes_per_index"] / batch["writes_per_index"],
    }


TARGET: Final = 1.2
"""Issue 29's bound on both ratios (LeasedJob / Job): total time and writes per index."""


def _verdict(ratio: float) -> str:
    return f"target <= {TARGET}x: {'met' if ratio <= TARGET else 'missed'}"


def pods_section(figures: dict[str, Any], title: str, setting: str) -> list[str]:
    """The Markdown lines of one side by side (:func:`run_pods`'s or ``bench.kind``'s figures).

    Args:
        figures: ``completions``, ``parallelism``, ``command``, ``batch`` and
            ``leased`` (:func:`side`'s dicts), ``time_ratio``, ``writes_ratio``,
            and optionally ``first`` (the kind run first; default the Job).
        title: the heading (``###``).
        setting: what both kinds ran on, opening the first sentence.

    Returns:
        The lines: method, a table of both kinds, writes per index by verb
        and resource, CPU per process, the two ratios with their verdicts.
    """
    n: int = figures["completions"]
    b, lj = figures["batch"], figures["leased"]
    sides = (b, lj)
    lines = [
        f"### {title}",
        "",
        f"{setting}. One Indexed job of each kind, {n} indexes at parallelism"
        f" {figures['parallelism']}, {figures.get('first', KINDS[0])} first, one after the"
        " other; every index runs"
        f" `sh -c '{figures['command']}'` (the LeasedJob's under `leasehold run`,"
        f" `leaseDurationSeconds: {POD_LEASE_SECONDS}`, `maxAttempts: 3`, push mode). Time:"
        " create -> the Job's `Complete` condition / the LeasedJob's `Succeeded` phase, polled"
        " every second. Requests: the API server's `apiserver_request_total` from just before"
        f" the create to {SETTLE_SECONDS:g} s after done, the benchmark's create and polls taken"
        f" out; writes exclude {', '.join(BACKGROUND)} (node and leader-election heartbeats;"
        " Events counted apart). CPU: each process's utime + stime from this host's `/proc`"
        " over create -> done; *other* is the machine's busy CPU less the processes named"
        " (on kind: containerd, the pods, the scheduler, and other sessions' work).",
        "",
    ]

    def per(counts: dict[str, int], verbs: tuple[str, ...]) -> float:
        return sum(v for k, v in counts.items() if k.split(" ")[0] in verbs) / n

    rows = []
    for s in sides:
        (l1, _, _), (l2, _, _) = s["load"]
        rows.append(
            [
                s["kind"],
                f"{s['seconds']:.1f}",
                f"{s['done']} ({s['progress']})",
                f"{s['writes_per_index']:.2f}",
                f"{s['events_per_index']:.2f}",
                f"{per(s['reads'], ('GET',)):.2f}",
                f"{per(s['reads'], ('LIST',)):.2f}",
                f"{l1:.1f} -> {l2:.1f}",
            ]
        )
    lines += [
        markdown_table(
            [
                "kind",
                "total s",
                "done (progress)",
                "writes / index",
                "Events / index",
                "GETs / index",
                "LISTs / index",
                "load (1 min) create -> done",
            ],
            rows,
        ),
        "",
        "Where the time went, from the pods' own timestamps (1 s resolution): create -> the"
        " first pod made; each pod's creation -> its container started, and the container's"
        " run (`sleep 1`; the LeasedJob's with `leasehold run` around it), p50/p99; pods"
        " in flight (made, not yet exited) and containers running, on average over create ->"
        " done (the parallelism allows"
        f" {figures['parallelism']}); the last exit -> done:",
        "",
    ]
    trows = []
    for s in sides:
        t = s["timeline"]
        start, run = t["pod -> started"], t["run"]
        trows.append(
            [
                s["kind"],
                str(t["pods"]),
                f"{t['to first pod']:.1f}",
                f"{start.p50:.1f} / {start.p99:.1f}",
                f"{run.p50:.1f} / {run.p99:.1f}",
                f"{t['in flight']:.1f}",
                f"{t['running']:.1f}",
                f"{t['last exit -> done']:.1f}",
            ]
        )
    lines += [
        markdown_table(
            [
                "kind",
                "pods",
                "-> first pod s",
                "pod -> started s",
                "run s",
                "in flight",
                "running",
                "last exit -> done s",
            ],
            trows,
        ),
        "",
        "Writes per index by verb and resource:",
        "",
    ]
    keys = sorted({k for s in sides for k in s["writes"]})
    lines += [
        markdown_table(
            ["request", b["kind"], lj["kind"]],
            [[k, *(f"{s['writes'].get(k, 0) / n:.2f}" for s in sides)] for k in keys],
        ),
        "",
        "CPU over create -> done (cores on average; CPU seconds in all):",
        "",
    ]
    procs = [k for k in b["cpu"] if k not in ("machine", "other")] + ["other", "machine"]
    lines += [
        markdown_table(
            ["process", f"{b['kind']} cores", "CPU s", f"{lj['kind']} cores", "CPU s"],
            [
                [
                    k,
                    *(
                        x
                        for s in sides
                        for x in (
                            f"{s['cpu'].get(k, 0):.2f}",
                            f"{s['cpu_seconds'].get(k, s['cpu'].get(k, 0) * s['seconds']):.1f}",
                        )
                    ),
                ]
                for k in procs
            ],
        ),
        "",
        f"- total time {lj['seconds']:.1f} s vs {b['seconds']:.1f} s ="
        f" **{figures['time_ratio']:.2f}x** ({_verdict(figures['time_ratio'])}); writes per"
        f" index {lj['writes_per_index']:.2f} vs {b['writes_per_index']:.2f} ="
        f" **{figures['writes_ratio']:.2f}x** ({_verdict(figures['writes_ratio'])}).",
    ]
    return lines


def main() -> None:
    """Parse the options, run, print the figures."""
    parser = argparse.ArgumentParser(prog="python -m bench.indexed", description=__doc__)
    parser.add_argument("--completions", type=int, default=1000)
    parser.add_argument("--parallelism", type=int, default=100)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument(
        "--pods", action="store_true", help="side by side with an Indexed batch/v1 Job, in pods"
    )
    parser.add_argument("--timeout", type=float, default=1200.0, help="per kind, seconds")
    args = parser.parse_args()
    log(f"indexed job: {args.completions} indexes, parallelism {args.parallelism}")
    if args.pods:
        figures = run_pods(args.completions, args.parallelism, args.timeout)
        print("\n".join(pods_section(figures, "Indexed, same pods", LOCAL_SETTING)), flush=True)
    else:
        figures = run(args.completions, args.parallelism, args.workers)
    for key, value in figures.items():
        print(f"{key}: {value}", flush=True)


if __name__ == "__main__":
    main()
