"""Operator scale: 1k/5k/10k JobLeases renewed every 10 s; what the operator costs.

Why this module exists: every renewal is a watch event the operator must
handle, so its CPU per renewal, memory, watch lag and API writes per
renewal decide how many leases one operator can carry. After the last
tier the operator is profiled (:mod:`bench.profile`) and replaced by two
floors (:mod:`bench.floors`) watching the same leases under the same load:
what Kopf alone costs, and what any watch-based design must pay.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

from kubernetes import client, watch

from bench import profile
from bench.harness import (
    CLK_TCK,
    PLURAL,
    REPO,
    WRITE_VERBS,
    CpuMeter,
    CpuSnapshot,
    G,
    Harness,
    Scrape,
    V,
    all_requests,
    apiserver_samples,
    create_objects,
    jobleases_requests,
    lease_body,
    log,
    new_client,
    operator_samples,
    read_proc,
    rss_mb,
    sched_seconds,
)
from bench.loadgen import LoadGenerator
from bench.reclaim import MARGIN_SECONDS
from bench.stats import (
    bucket_delta,
    counter_delta,
    cpu_ticks,
    fraction_above,
    histogram_buckets,
    histogram_quantile,
    ratio,
    reclaim_floor,
    sum_samples,
    summarize,
)
from leasehold import names as contract
from leasehold.lease.errors import LeaseNotFoundError
from leasehold.lease.store import Accepted, LeaseStore
from operatorproc import OperatorProcess

RENEW_PERIOD: Final = 10.0
"""Seconds between two renewals of one lease."""
LEASE_DURATION: Final = 600
"""The tier leases' ``leaseDurationSeconds``: long, so a load generator that falls
behind on a small machine never lets one expire (a reclaim storm is not the load
measured)."""
BURST_DURATION: Final = 3
"""The expiry burst's leases' ``leaseDurationSeconds`` (the reclaim part's)."""
BURST_SETTLE: Final = 2.0
"""Seconds the burst's reclaims window runs on after the last reclaim was seen: the
operator's writes that follow a reclaim (the job's status, its Event)."""
FLOORS: Final = {
    "kopf": REPO / "bench" / "floors" / "kopf_floor.py",
    "watch": REPO / "bench" / "floors" / "plain_watch.py",
}
"""The floors, by kind: scripts run as their own process."""


@dataclass
class ScaleResults:
    """What :func:`run` measured.

    Attributes:
        rows: one per tier (see :func:`window`).
        floors: one per floor (see :func:`floor`), after the last tier.
        profile: the operator's profile (see :func:`bench.profile.record`),
            empty when not taken.
        burst: the 1% expiry burst after the last tier (see :func:`expiry_burst`).
    """

    rows: list[dict[str, Any]] = field(default_factory=list)
    floors: list[dict[str, Any]] = field(default_factory=list)
    profile: dict[str, Any] = field(default_factory=dict)
    burst: dict[str, Any] = field(default_factory=dict)


def run(h: Harness) -> ScaleResults:
    """Measure every tier of ``scale_tiers``, then the profile and the floors.

    Tiers are cumulative in one namespace. Each tier's new leases are
    created while nothing else runs (generator paused, operator stopped),
    then a fresh operator starts on all of them, the generator renews
    them for one period, and a window is measured. A restarted operator
    starts every expiry window afresh, so the pause never expires a lease.
    """
    ns = h.namespace("scale")
    sizes = h.sizes
    out = ScaleResults()
    gen = LoadGenerator(h.kubeconfig, ns, RENEW_PERIOD, sizes.scale_threads)
    gen.pause()
    gen.start()
    op: OperatorProcess | None = None
    try:
        created = 0
        for tier in sizes.scale_tiers:
            gen.pause()
            if op is not None:
                op.stop()
            log(f"scale: creating leases {created}..{tier}")
            h.note_load(f"scale {tier}: create")
            names = [f"s{i}" for i in range(created, tier)]
            took = create_objects(
                h.kubeconfig,
                ns,
                PLURAL,
                [lease_body(x, holder=f"g-{x}", duration=LEASE_DURATION) for x in names],
                threads=16,
            )
            for name in names:
                gen.add(name)
            created = tier
            log(f"scale: created {len(names)} in {took:.1f}s; starting the operator")
            op = OperatorProcess(
                h.kubeconfig, ns, h.workdir / f"operator-scale-{tier}.log", MARGIN_SECONDS
            )
            began = time.monotonic()
            op.start()
            assert op.proc is not None
            h.meter.pids["operator"] = op.proc.pid
            # Until it has seen every lease: its first LIST, one event each
            # (given 120 s, or 2 ms per lease for the largest tiers).
            deadline = time.monotonic() + max(120.0, tier * 0.002)
            while True:
                seen = sum_samples(operator_samples(op).samples, "leasehold_leases_held")
                if seen >= tier or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            startup = time.monotonic() - began
            if seen < tier:
                h.notes.append(
                    f"scale {tier}: the operator had seen only {seen:.0f} leases"
                    f" after {startup:.0f} s (the start-up figure is a lower bound)"
                )
            # Its start-up work (a reconcile per first-seen lease) must be
            # over before the window: wait until it idles (generator paused).
            idle_deadline = time.monotonic() + max(180.0, tier * 0.003)
            while time.monotonic() < idle_deadline:
                before = h.meter.snapshot()
                time.sleep(2.0)
                if CpuMeter.cores(before, h.meter.snapshot())["operator"] < 0.03:
                    break
            settled = time.monotonic() - began
            gen.resume()
            time.sleep(RENEW_PERIOD)  # one full period: the load is steady
            h.note_load(f"scale {tier}: window")
            row = window(h, op, op.proc.pid, gen, tier)
            row["create_seconds"] = took
            row["startup_seconds"] = startup
            row["settled_seconds"] = settled
            out.rows.append(row)
            h.notes.append(
                f"scale {tier}: created {len(names)} leases in {took:.0f} s; a fresh operator"
                f" saw all {tier} in {startup:.1f} s and was idle after {settled:.1f} s;"
                " in the window: renewals sent"
                f" {row['sent']:.0f}, accepted {row['accepted']:.0f}, operator observed"
                f" {row['observed']:.0f} (lag histogram count {row['lag_count']:.0f}); API"
                f" server JobLease requests: {dict(row['requests'])}; all API requests"
                f" (top): {row['all_requests']}"
            )
            log(
                f"scale {tier}: {row['rate']:.0f} renewals/s, operator"
                f" {row['op_cpu_per_event'] * 1000:.2f} ms CPU per renewal,"
                f" {row['rss']:.0f} MB"
            )
        if op is not None and created:
            out.burst = expiry_burst(h, ns, created, gen)
            log(f"scale: 1% expiry burst: {out.burst}")
        if sizes.profile_seconds > 0 and op is not None and op.proc is not None:
            out.profile = profile.record(op.proc.pid, sizes.profile_seconds, h.workdir)
        if sizes.floors and op is not None:
            op.stop()
            for kind in FLOORS:
                out.floors.append(floor(h, kind, ns, gen, created))
    finally:
        gen.stop()
        if op is not None:
            op.stop()
        h.meter.pids.pop("operator", None)
    return out


def expiry_burst(h: Harness, ns: str, leases: int, gen: LoadGenerator) -> dict[str, Any]:
    """Claim 1% more leases at once, never renew them, and time their reclaims.

    Pull-mode LeasedJobs (``b<i>``, duration :data:`BURST_DURATION`) are
    created and their leases, made by the operator, claimed from 8 threads at
    once, while the tier's leases keep being renewed (by ``gen``): the
    operator reclaims the burst while it carries the whole tier. Latency:
    from each lease's expiry (its claim's answer + duration) to its reclaim
    seen through a watch; the operator's margin is part of it by design.

    The API server's requests (by verb and resource) and CPU are measured in
    two windows: *claims* (the benchmark's claims, the operator seeing them)
    and *reclaims* (from the last claim's answer until every reclaim was seen,
    plus :data:`BURST_SETTLE` s for the operator's follow-up writes). The
    reclaims window gives the floor (:func:`~bench.stats.reclaim_floor`):
    the operator's requests per reclaimed lease x the API server's CPU per
    request, at what the renewals leave of the API server.

    Returns:
        ``leases`` (the burst's size), ``expiries_spread_s`` (first to last
        expiry), ``lag`` (:class:`~bench.stats.Summary` of the latencies, s),
        ``missing`` (not seen reclaimed in time), ``margin`` (s), and per
        window (``claims``, ``reclaims``): ``seconds``, ``requests`` (the
        operator's, by ``"<verb> <resource>"``: the renewals and the
        benchmark's claims taken out), ``served`` (every request), ``renewals``
        (answered, of ``gen``), ``cpu`` (cores by process); ``floor``
        (:class:`~bench.stats.BurstFloor`, from the reclaims window).

    Raises:
        RuntimeError: the operator did not make the burst's leases in time
            (120 s, or 0.2 s per lease for bursts of over 600).
        AssertionError: a claim was refused.
    """
    names = [f"b{i}" for i in range(max(1, leases // 100))]
    jobs = [
        {
            "apiVersion": contract.API_VERSION,
            "kind": "LeasedJob",
            "metadata": {"name": x},
            "spec": {"leaseDurationSeconds": BURST_DURATION, "maxAttempts": 10},
        }
        for x in names
    ]
    create_objects(h.kubeconfig, ns, contract.PLURAL_LEASED_JOBS, jobs, threads=16)
    store = LeaseStore(new_client(h.kubeconfig))
    made_within = max(120.0, len(names) * 0.2)
    deadline = time.monotonic() + made_within
    for x in names:  # the operator makes one JobLease per LeasedJob
        while True:
            try:
                store.get(ns, x)
                break
            except LeaseNotFoundError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the operator made no lease for {x} in {made_within:.0f} s"
                    ) from None
                time.sleep(0.5)
    reclaimed: dict[str, float] = {}
    stop, ready = threading.Event(), threading.Event()

    def watch_burst() -> None:
        custom = client.CustomObjectsApi(new_client(h.kubeconfig))
        listed: Any = custom.list_namespaced_custom_object(G, V, ns, PLURAL, limit=1)
        stream = watch.Watch()
        ready.set()
        for event in stream.stream(
            custom.list_namespaced_custom_object,
            G,
            V,
            ns,
            PLURAL,
            resource_version=listed["metadata"]["resourceVersion"],
            timeout_seconds=300,
        ):
            obj = event["object"]
            spec = obj.get("spec", {})
            if spec.get("fencingToken") == 1 and not spec.get("holderIdentity"):
                reclaimed.setdefault(obj["metadata"]["name"], time.monotonic())
            if len(reclaimed) >= len(names) or stop.is_set():
                stream.stop()
                break

    watcher = threading.Thread(target=watch_burst, daemon=True)
    watcher.start()
    ready.wait(120)
    claimed: dict[str, float] = {}

    def claim(name: str) -> None:
        result = store.claim(ns, name, f"silent-{name}")
        claimed[name] = time.monotonic()  # the change has landed by now
        if not isinstance(result, Accepted) or result.token != 1:
            raise AssertionError(f"claim of {name}: {result}")

    marks = [_mark(h, gen)]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for f in [pool.submit(claim, x) for x in names]:
            f.result()
    marks.append(_mark(h, gen))
    watcher.join(timeout=BURST_DURATION + MARGIN_SECONDS + 60)
    stop.set()
    time.sleep(BURST_SETTLE)  # the operator's writes after its last reclaim
    marks.append(_mark(h, gen))
    expiry = {x: at + BURST_DURATION for x, at in claimed.items()}
    lag = [reclaimed[x] - at for x, at in expiry.items() if x in reclaimed]
    spread = max(expiry.values()) - min(expiry.values()) if expiry else 0.0
    # The benchmark's claims: GET + PATCH each (store.claim reads first).
    claims = _window(
        marks[0], marks[1], {"GET jobleases": len(names), "PATCH jobleases": len(names)}
    )
    reclaims = _window(marks[1], marks[2], {"WATCH jobleases": 1})  # our watch's end
    floor = reclaim_floor(
        reclaims=len(lag),
        operator_requests=sum(reclaims["requests"].values()),
        renewals=reclaims["renewals"],
        served=reclaims["served"],
        apiserver_cpu_seconds=reclaims["cpu"].get("kube-apiserver", math.nan) * reclaims["seconds"],
        window_seconds=reclaims["seconds"],
        expiry_spread=spread,
        margin=MARGIN_SECONDS,
        idle_cores=(os.cpu_count() or 1) - reclaims["cpu"]["machine"],
    )
    return {
        "leases": len(names),
        "expiries_spread_s": spread,
        "lag": summarize(lag),
        "missing": len(names) - len(lag),
        "margin": MARGIN_SECONDS,
        "claims": claims,
        "reclaims": reclaims,
        "floor": floor,
    }


@dataclass(frozen=True)
class _Mark:
    """One end of a measuring window: API server counters, CPU, renewals answered."""

    server: Scrape
    cpu: CpuSnapshot
    renewals: float
    renewals_unsure: float


def _mark(h: Harness, gen: LoadGenerator) -> _Mark:
    """The API server's request counters, every process's CPU and ``gen``'s renewals, now.

    Renewals keep landing while the scrape runs: they are counted as the mean
    of the generator's answered renewals just before and just after it, give
    or take half their difference (``renewals_unsure``).
    """
    first = gen.totals()["answered"]
    server = apiserver_samples(h.admin)
    last = gen.totals()["answered"]
    return _Mark(server, h.meter.snapshot(), (first + last) / 2, (last - first) / 2)


def _window(before: _Mark, after: _Mark, ours: dict[str, int]) -> dict[str, Any]:
    """What the API server served between two marks, the operator's requests apart.

    Args:
        before: the window's start.
        after: its end.
        ours: the benchmark's own requests in it, by ``"<verb> <resource>"``
            (taken out along with the renewals, PATCH jobleases each).

    Returns:
        ``seconds``, ``served`` (every request), ``renewals`` (give or take
        ``renewals_unsure``), ``requests`` (the rest: the operator's; the
        API server's own identity lease and discovery left out, listed in
        ``control_plane``), ``cpu`` (cores by process, ``machine`` and
        ``other``).
    """
    every = all_requests(before.server, after.server)
    served = sum(every.values())
    renewals = after.renewals - before.renewals
    every.subtract({**ours, "PATCH jobleases": ours.get("PATCH jobleases", 0) + round(renewals)})
    control_plane = Counter(
        {k: v for k, v in every.items() if k.endswith((" leases", " /api", " /apis"))}
    )
    every.subtract(control_plane)
    return {
        "seconds": after.cpu.at - before.cpu.at,
        "served": served,
        "renewals": renewals,
        "renewals_unsure": before.renewals_unsure + after.renewals_unsure,
        "requests": +every,
        "control_plane": +control_plane,
        "cpu": CpuMeter.cores(before.cpu, after.cpu),
    }


def floor(h: Harness, kind: str, ns: str, gen: LoadGenerator, leases: int) -> dict[str, Any]:
    """CPU per renewal of a stand-in (``kind`` of :data:`FLOORS`) watching the same JobLeases.

    ``kopf``: Kopf, tuned by the operator's own startup handler, with one
    empty ``@kopf.on.event`` handler for JobLeases (Kopf's own per-event
    cost). ``watch``: the official client's watch in a loop, remembering
    each lease's generation (what any watch-based design must pay); it also
    measures the watch lag.

    Returns:
        ``kind``, ``leases``, ``rate`` (renewals/s), ``cpu`` (cores by
        process, the stand-in as ``floor``), ``per_event`` (CPU seconds per
        renewal), ``rss`` (MiB, peak), ``settled_seconds``, ``lag``
        (:class:`~bench.stats.Summary` or ``None``).

    Raises:
        RuntimeError: the stand-in exited before its window.
    """
    gen.pause()
    lag_file = h.workdir / "floor_watch_lags.json"
    cmd = [sys.executable, str(FLOORS[kind]), str(h.kubeconfig), ns]
    if kind == "watch":
        cmd.append(str(lag_file))
    log(f"scale: floor {kind} at {leases} leases")
    with (h.workdir / f"floor_{kind}.log").open("ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "KUBECONFIG": str(h.kubeconfig)},
        )
    h.meter.pids["floor"] = proc.pid
    try:
        began = time.monotonic()
        time.sleep(3.0)
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:  # its first LIST and one event per lease
            before = h.meter.snapshot()
            time.sleep(2.0)
            if CpuMeter.cores(before, h.meter.snapshot())["floor"] < 0.03:
                break
        settled = time.monotonic() - began
        if proc.poll() is not None:
            raise RuntimeError(f"floor {kind} exited with {proc.returncode}")
        gen.resume()
        time.sleep(RENEW_PERIOD)
        gen.pause()
        sent_before = gen.totals()["sent"]
        cpu_before = h.meter.snapshot()
        if kind == "watch":
            proc.send_signal(signal.SIGUSR1)  # its lag window starts
        gen.resume()
        rss_peak = 0.0
        end = time.monotonic() + h.sizes.scale_window
        while time.monotonic() < end:
            rss_peak = max(rss_peak, rss_mb(proc.pid))
            time.sleep(min(1.0, max(0.0, end - time.monotonic())))
        gen.pause()
        cpu_after = h.meter.snapshot()
        sent = gen.totals()["sent"] - sent_before
        gen.resume()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        h.meter.pids.pop("floor", None)
    cpu = CpuMeter.cores(cpu_before, cpu_after)
    seconds = cpu_after.at - cpu_before.at
    lag = None
    if kind == "watch":
        with contextlib.suppress(OSError, ValueError):
            lag = summarize(json.loads(lag_file.read_text()))
    return {
        "lag": lag,
        "kind": kind,
        "leases": leases,
        "rate": sent / seconds,
        "cpu": cpu,
        "per_event": ratio(cpu["floor"], sent / seconds),
        "rss": rss_peak,
        "settled_seconds": settled,
    }


def window(
    h: Harness, op: OperatorProcess, pid: int, gen: LoadGenerator, tier: int
) -> dict[str, Any]:
    """Measure one window of ``scale_window`` seconds, bracketed by pauses of ``gen``.

    With the generator paused and drained, the counts at both ends are
    exact: renewals sent, JobLease writes the API server served, and
    renewals the operator observed cover the same renewals.

    Returns:
        The tier's row (keys as read by :func:`bench.report.scale_table`).
    """
    length = h.sizes.scale_window

    def quiesce() -> tuple[Counter[str], Scrape, Scrape]:
        gen.pause()
        totals = gen.totals()
        # Let the operator see the last renewals (its watch lags a little).
        deadline = time.monotonic() + 15
        last = -1.0
        while True:
            scrape = operator_samples(op)
            seen = sum_samples(scrape.samples, "leasehold_renewals_observed_total")
            if seen == last or time.monotonic() > deadline:
                break
            last = seen
            time.sleep(0.5)
        return totals, apiserver_samples(h.admin), scrape

    gen_before, server_before, op_before = quiesce()
    cpu_before = h.meter.snapshot()
    sched_before = sched_seconds(pid)
    gen.recording = True
    gen.resume()
    rss_peak = 0.0
    end = time.monotonic() + length
    while time.monotonic() < end:
        rss_peak = max(rss_peak, rss_mb(pid))
        time.sleep(min(1.0, max(0.0, end - time.monotonic())))
    gen.pause()
    cpu_after = h.meter.snapshot()
    gen.recording = False
    gen_after, server_after, op_after = quiesce()
    # The operator's CPU is counted until it has seen the window's last
    # renewal (a backlog it works off after the window is its cost too).
    op_cpu = (cpu_ticks(read_proc(f"/proc/{pid}/stat")) - cpu_before.ticks["operator"]) / CLK_TCK
    sched_after = sched_seconds(pid)
    gen.resume()
    latencies, lateness = gen.take_latencies()
    cpu = CpuMeter.cores(cpu_before, cpu_after)
    seconds = cpu_after.at - cpu_before.at
    sent = gen_after["sent"] - gen_before["sent"]
    accepted = gen_after["accepted"] - gen_before["accepted"]
    lag = bucket_delta(
        histogram_buckets(op_before.samples, "leasehold_watch_lag_seconds"),
        histogram_buckets(op_after.samples, "leasehold_watch_lag_seconds"),
    )
    requests = jobleases_requests(server_before, server_after)
    writes = sum(v for k, v in requests.items() if k in WRITE_VERBS)
    every = all_requests(server_before, server_after)
    observed = counter_delta(
        op_before.samples, op_after.samples, "leasehold_renewals_observed_total"
    )
    run_s = sched_after[0] - sched_before[0]
    return {
        "leases": tier,
        "seconds": seconds,
        "op_cpu_per_event": op_cpu / observed if observed else math.nan,
        "op_wait_per_run": (sched_after[1] - sched_before[1]) / run_s if run_s else math.nan,
        "target_rate": tier / RENEW_PERIOD,
        "rate": sent / seconds,
        "sent": sent,
        "accepted": accepted,
        "rejected": gen_after["rejected"] - gen_before["rejected"],
        "errors": gen_after["errors"] - gen_before["errors"],
        "renew_latency": summarize(latencies),
        "lateness": summarize(lateness),
        "reclaimed": gen_after["reclaimed"] - gen_before["reclaimed"],
        "cpu": cpu,
        "rss": rss_peak,
        "lag_p50": histogram_quantile(0.5, lag),
        "lag_p99": histogram_quantile(0.99, lag),
        "lag_over_1s": fraction_above(1.0, lag),
        "lag_count": lag[-1][1] if lag else 0,
        "observed": observed,
        "writes": writes,
        "requests": requests,
        "all_requests": ", ".join(f"{k} {v}" for k, v in every.most_common(6)),
        "writes_per_renewal": writes / sent if sent else math.nan,
        "reclaims": counter_delta(op_before.samples, op_after.samples, "leasehold_reclaims_total"),
    }
