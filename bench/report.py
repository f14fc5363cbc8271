"""The report: every part's tables, the machine's facts and load, as Markdown.

Why this module exists: the parts measure, this module presents, so a
figure's arithmetic (:mod:`bench.stats`) and its measurement (the part's
module) can be read without the formatting. The output is
``bench/results.md``; ``bench/README.md`` says how each figure is measured
and what limits it.
"""

from __future__ import annotations

import math
import os
import platform
import subprocess
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

from kubernetes import client

from bench.handover import section as handover_section
from bench.harness import read_proc
from bench.jobs import section as jobs_section
from bench.operations import LEVELS, OPS, OpResult, OpsResults, Paired
from bench.scale import (
    BURST_DURATION,
    BURST_SETTLE,
    LEASE_DURATION,
    RENEW_PERIOD,
    ScaleResults,
)
from bench.stats import fmt, markdown_table, ratio, summarize
from localcluster import control_plane_bin_dir


@dataclass
class Results:
    """Everything one run measured, as :func:`report` reads it.

    Attributes:
        loads: (moment, load average 1/5/15 min), in order.
        notes: lines for the notes section.
        scale_window: seconds measured per scale tier.
        ops: the lease operations, if run.
        contention: the contention figures, if run (else empty).
        reclaim: the reclaim rows, if run.
        scale: the scale tiers, floors and profile, if run.
        jobs: the LeasedJob vs batch/v1 Job rows, if run.
        handover: the hand-over rows and keep-alive write rates, if run.
    """

    loads: list[tuple[str, tuple[float, float, float]]]
    notes: list[str]
    scale_window: float
    ops: OpsResults | None = None
    contention: dict[str, Any] = field(default_factory=dict)
    reclaim: list[dict[str, Any]] = field(default_factory=list)
    scale: ScaleResults | None = None
    jobs: list[dict[str, Any]] = field(default_factory=list)
    handover: dict[str, Any] = field(default_factory=dict)


def machine_facts(admin: Any | None) -> dict[str, str]:
    """Cores, memory, CPU model, kernel and versions: fact -> value.

    ``admin`` (an ApiClient) asks the API server its version, when given.
    """
    meminfo = read_proc("/proc/meminfo")
    mem_kb = next(
        (int(line.split()[1]) for line in meminfo.splitlines() if line.startswith("MemTotal:")),
        0,
    )
    cpuinfo = read_proc("/proc/cpuinfo")
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in cpuinfo.splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "?",
    )
    facts = {
        "cores": str(os.cpu_count()),
        "memory": f"{mem_kb / 2**20:.1f} GiB",
        "CPU": model,
        "kernel": platform.release(),
        "Python": platform.python_version(),
        "kubernetes client": metadata.version("kubernetes"),
        "kopf": metadata.version("kopf"),
    }
    if admin is not None:
        info = client.VersionApi(admin).get_code()
        facts["Kubernetes"] = str(info.git_version)
    try:
        out = subprocess.run(
            [str(control_plane_bin_dir() / "etcd"), "--version"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        facts["etcd"] = out.splitlines()[0].split(":", 1)[1].strip() if out else "?"
    except Exception as exc:  # the version is a nicety
        facts["etcd"] = f"? ({exc})"
    return facts


def ms(seconds: float) -> str:
    """Seconds as milliseconds for a table cell.

    Args:
        seconds: the value.

    Returns:
        e.g. ``"3.21"``.
    """
    return fmt(seconds * 1000, digits=2)


def ops_table(ops: Sequence[OpResult]) -> str:
    """Baseline and lease operations, with ratios to the baseline at the same level.

    Args:
        ops: the results.

    Returns:
        A Markdown table.
    """
    base = {r.clients: r for r in ops if r.op == "baseline"}
    rows = []
    names = {
        "baseline": "raw CAS: PUT + rv (baseline)",
        "raw-patch": "raw JSON patch, renew's ops",
        "claim-known": "LeaseStore.claim (token known)",
        "claim": "LeaseStore.claim (cold: GET + PATCH)",
    }
    for r in sorted(ops, key=lambda r: (r.clients, OPS.index(r.op))):
        b = base.get(r.clients)
        lat, blat = r.latency, (b.latency if b else None)
        req = r.requests_per_op("client")
        srv = r.requests_per_op("server")
        rows.append(
            [
                names.get(r.op, f"LeaseStore.{r.op}"),
                str(r.clients),
                str(r.count),
                fmt(r.throughput, digits=0),
                fmt(ratio(r.throughput, b.throughput), "x", 2) if b else "-",
                ms(lat.p50),
                fmt(ratio(lat.p50, blat.p50), "x", 2) if blat else "-",
                ms(lat.p99),
                fmt(ratio(lat.p99, blat.p99), "x", 2) if blat else "-",
                " ".join(f"{k} {v:.2f}" for k, v in sorted(req.items())) or "-",
                " ".join(f"{k} {v:.2f}" for k, v in sorted(srv.items())) or "-",
                str(r.failures),
                fmt(r.cpu("bench"), digits=2),
                fmt(r.cpu("kube-apiserver"), digits=2),
                fmt(r.cpu("etcd"), digits=2),
                fmt(r.cpu("other"), digits=2),
                fmt(r.cpu("machine"), digits=2),
            ]
        )
    return markdown_table(
        [
            "operation",
            "clients",
            "ops",
            "ops/s",
            "vs raw",
            "p50 ms",
            "vs raw",
            "p99 ms",
            "vs raw",
            "requests/op (client)",
            "requests/op (apiserver)",
            "failed",
            "bench CPU",
            "apiserver CPU",
            "etcd CPU",
            "other CPU",
            "machine CPU",
        ],
        rows,
    )


def paired_ratios(put: Sequence[float], op: Sequence[float]) -> tuple[float, float]:
    """Ratios of an operation to the raw PUT it alternated with.

    Each client is a closed loop (the next request waits for the answer), so
    its throughput is 1 / mean latency: the ratio of mean latencies is the
    throughput ratio, measured under the same moment's load.

    Args:
        put: the PUT latencies (seconds).
        op: the operation's latencies (seconds).

    Returns:
        ``(op p50 / PUT p50, PUT mean / op mean)``: latency and throughput
        ratios (``nan`` when a series is empty).
    """
    a, b = summarize(put), summarize(op)
    return ratio(b.p50, a.p50), ratio(a.mean, b.mean)


def paired_table(paired: Paired) -> str:
    """Renew vs raw CAS latency when the same clients alternate the two.

    Args:
        paired: clients -> (PUT latencies, renew latencies).

    Returns:
        A Markdown table.
    """
    rows = []
    for clients, (put, renew) in sorted(paired.items()):
        a, b = summarize(put), summarize(renew)
        r50, _ = paired_ratios(put, renew)
        rows.append(
            [
                str(clients),
                str(a.n + b.n),
                ms(a.p50),
                ms(b.p50),
                fmt(r50, "x", 2),
                ms(a.p99),
                ms(b.p99),
                fmt(ratio(b.p99, a.p99), "x", 2),
                "met" if r50 <= 1.2 else "MISSED",
            ]
        )
    return markdown_table(
        [
            "clients",
            "ops",
            "raw CAS PUT p50 ms",
            "renew p50 ms",
            "renew/raw p50",
            "raw CAS PUT p99 ms",
            "renew p99 ms",
            "renew/raw p99",
            "target p50 <= 1.2x",
        ],
        rows,
    )


def paired_claim_table(paired: Paired) -> str:
    """Token-known claim vs raw CAS PUT when the same clients alternate the two.

    Throughput ratio as in :func:`paired_ratios`.

    Args:
        paired: clients -> (PUT latencies, claim latencies).

    Returns:
        A Markdown table.
    """
    rows = []
    for clients, (put, claim) in sorted(paired.items()):
        a, b = summarize(put), summarize(claim)
        r50, throughput = paired_ratios(put, claim)
        rows.append(
            [
                str(clients),
                str(a.n + b.n),
                ms(a.p50),
                ms(b.p50),
                fmt(r50, "x", 2),
                ms(a.mean),
                ms(b.mean),
                fmt(throughput, "x", 2),
                "met" if throughput >= 0.8 else "MISSED",
            ]
        )
    return markdown_table(
        [
            "clients",
            "ops",
            "raw CAS PUT p50 ms",
            "claim p50 ms",
            "claim/raw p50",
            "raw CAS PUT mean ms",
            "claim mean ms",
            "claim throughput vs raw (mean PUT / mean claim)",
            "target >= 0.8x",
        ],
        rows,
    )


def _one_patch(r: OpResult) -> bool:
    """Whether every operation of ``r`` was exactly one PATCH and no GET (client and server)."""
    req = r.requests_per_op("client")
    srv = r.requests_per_op("server")
    return (
        abs(sum(req.values()) - 1.0) < 1e-9
        and abs(req.get("PATCH", 0) - 1.0) < 1e-9
        and abs(srv.get("PATCH", 0) - 1.0) < 0.01
        and srv.get("GET", 0) < 0.01
    )


def ops_targets(
    ops: Sequence[OpResult],
    paired: Paired,
    paired_claim: Paired,
) -> list[str]:
    """The targets of the lease operations, met or not.

    Both ratio targets are judged on the paired runs (the same clients
    alternate the operation and the raw PUT, so both see the same load);
    the segment ratios, measured one after another, are shown next to them.
    The claim target (uncontended claim throughput >= 0.8x raw) is judged on
    the token-known claim: the raw CAS baseline writes with a
    resourceVersion it already knows, without reading first, and so does a
    claim that knows the lease's token. The cold claim (GET + PATCH) is
    shown next to it.

    Args:
        ops: the segment results.
        paired: clients -> (PUT latencies, renew latencies), alternated.
        paired_claim: clients -> (PUT latencies, token-known claim latencies).

    Returns:
        One line per concurrency level.
    """
    by = {(r.op, r.clients): r for r in ops}
    lines = []
    for c in LEVELS:
        b, renew = by.get(("baseline", c)), by.get(("renew", c))
        known, cold = by.get(("claim-known", c)), by.get(("claim", c))
        if b is None or renew is None or known is None or cold is None:
            continue
        req = renew.requests_per_op("client")
        srv = renew.requests_per_op("server")
        r50, _ = paired_ratios(*paired.get(c, ([], [])))
        _, tput = paired_ratios(*paired_claim.get(c, ([], [])))
        seg_r50 = ratio(renew.latency.p50, b.latency.p50)
        seg_tput = ratio(known.throughput, b.throughput)
        cold_tput = ratio(cold.throughput, b.throughput)
        lines.append(
            f"- {c} client(s): renew ="
            f" {'exactly one PATCH, no GET' if _one_patch(renew) else 'NOT one write'}"
            f" (client {dict(req)}, apiserver {dict(srv)}); renew latency p50 {r50:.2f}x raw"
            f" paired {'(<= 1.2x: met)' if r50 <= 1.2 else '(> 1.2x: MISSED)'}"
            f" (segments: {seg_r50:.2f}x); claim (token known,"
            f" {'one PATCH, no GET' if _one_patch(known) else 'NOT one write'}) throughput"
            f" {tput:.2f}x raw paired {'(>= 0.8x: met)' if tput >= 0.8 else '(< 0.8x: MISSED)'}"
            f" (segments: {seg_tput:.2f}x); cold claim (GET + PATCH) {cold_tput:.2f}x raw"
            " (segments)"
        )
    return lines


def contention_table(c: dict[str, Any]) -> str:
    """The contention figures.

    Args:
        c: the results.

    Returns:
        A Markdown table.
    """
    req: Counter[str] = c["requests"]
    return markdown_table(
        [
            "claimers",
            "rounds",
            "winners per round",
            "final tokens",
            "settled p50 ms",
            "settled max ms",
            "winner's claim p50 ms",
            "requests per successful claim",
            "of which",
            "bench CPU",
            "apiserver CPU",
            "machine CPU",
        ],
        [
            [
                str(c["claimers"]),
                str(c["rounds"]),
                ",".join(str(w) for w in c["winners"]),
                ",".join(str(t) for t in c["tokens"]),
                ms(c["settle"].p50),
                ms(c["settle"].max),
                ms(c["win_latency"].p50),
                fmt(c["requests_per_success"], digits=1),
                " ".join(
                    f"{k} {v / max(1, sum(c['winners'])):.1f}" for k, v in sorted(req.items())
                ),
                fmt(c["cpu"].get("bench", math.nan), digits=2),
                fmt(c["cpu"].get("kube-apiserver", math.nan), digits=2),
                fmt(c["cpu"].get("machine", math.nan), digits=2),
            ]
        ],
    )


def reclaim_table(rows: Sequence[dict[str, Any]]) -> str:
    """The reclaim latency figures.

    Args:
        rows: one per mode.

    Returns:
        A Markdown table.
    """
    return markdown_table(
        [
            "claims",
            "leases",
            "duration s",
            "margin s",
            "claims made over s",
            "p50 s",
            "p99 s",
            "max s",
            "p99 - margin s",
            "target (p99 <= margin + 1 s)",
            "missing",
            "reclaims/s",
            "operator API requests per lease (claim seen, then reclaim)",
        ],
        [
            [
                r["mode"],
                str(r["leases"]),
                str(r["duration"]),
                fmt(r["margin"], digits=1),
                fmt(r["claim_spread"], digits=2),
                fmt(r["lag"].p50, digits=3),
                fmt(r["lag"].p99, digits=3),
                fmt(r["lag"].max, digits=3),
                fmt(r["lag"].p99 - r["margin"], digits=3),
                "met" if r["lag"].p99 <= r["margin"] + 1.0 and not r["missing"] else "MISSED",
                str(r["missing"]),
                fmt(r["reclaims_per_s"], digits=0),
                f"{sum(r['operator_requests'].values()) / r['leases']:.1f} ("
                + ", ".join(
                    f"{k} {v / r['leases']:.1f}"
                    for k, v in r["operator_requests"].most_common()
                    if v / r["leases"] >= 0.1
                )
                + ")",
            ]
            for r in rows
        ],
    )


def scale_table(rows: Sequence[dict[str, Any]]) -> str:
    """The operator scale figures.

    Args:
        rows: one per tier.

    Returns:
        A Markdown table.
    """
    out = []
    for r in rows:
        cpu = r["cpu"]
        per_event = r["op_cpu_per_event"]
        out.append(
            [
                f"{r['leases']:,}",
                fmt(r["target_rate"], digits=0),
                f"{fmt(r['rate'], digits=0)} (every {r['leases'] / r['rate']:.1f} s)"
                if r["rate"]
                else "-",
                fmt(r["lateness"].p99, digits=2),
                fmt(per_event * r["rate"], digits=3),
                fmt(per_event * 1000, digits=2),
                fmt(per_event * r["target_rate"], digits=2),
                fmt(r["op_wait_per_run"], digits=2),
                fmt(r["rss"], digits=0),
                f"{fmt(r.get('startup_seconds', math.nan), digits=1)}"
                f" / {fmt(r.get('settled_seconds', math.nan), digits=1)}",
                ms(r["lag_p50"]),
                ms(r["lag_p99"]),
                f"{r['lag_over_1s'] * 100:.1f}%" if not math.isnan(r["lag_over_1s"]) else "-",
                f"{r['observed']:.0f}/{r['accepted']:.0f}",
                f"{r['writes']:.0f}/{r['sent']:.0f} = {fmt(r['writes_per_renewal'], digits=3)}",
                f"{r['rejected']:.0f}/{r['errors']:.0f}/{r['reclaims']:.0f}",
                f"{ms(r['renew_latency'].p50)} / {ms(r['renew_latency'].p99)}",
                " / ".join(
                    fmt(cpu.get(k, math.nan), digits=2)
                    for k in ("bench", "kube-apiserver", "etcd", "other", "machine")
                ),
            ]
        )
    return markdown_table(
        [
            "leases",
            "target renewals/s",
            "achieved renewals/s",
            "generator late p99 s",
            "operator CPU cores",
            "operator CPU ms/renewal",
            "operator cores at target rate (projected)",
            "operator waited for a CPU, s per s run",
            "operator RSS MB (peak)",
            "fresh operator: all leases seen / idle after s",
            "watch lag p50 ms",
            "watch lag p99 ms",
            "lag > 1 s",
            "renewals seen by operator / accepted",
            "API writes / renewals sent",
            "rejected / errors / operator reclaims",
            "renew p50 / p99 ms",
            "CPU cores: load gen / apiserver / etcd / other / machine",
        ],
        out,
    )


def burst_verdict(burst: dict[str, Any]) -> str:
    """``met``, or ``missed: floor X s`` with what the floor says about the miss.

    Args:
        burst: :func:`bench.scale.expiry_burst`'s result.
    """
    lag, margin = burst["lag"], burst["margin"]
    target = margin + 1.0
    if lag.n and lag.p99 <= target and not burst["missing"]:
        return "met"
    floor = burst.get("floor")
    if floor is None or math.isnan(floor.p99_floor):
        return "MISSED (no floor measured)"
    if floor.p99_floor > target:
        return f"missed: floor {fmt(floor.p99_floor, digits=2)} s (the API server's CPU)"
    return (
        f"missed: floor {fmt(floor.p99_floor, digits=2)} s, within the target (the API"
        " server's CPU does not explain the miss)"
    )


def requests_text(requests: Counter[str], per: int) -> str:
    """``"3.0 (PATCH jobleases 1.0, ...)"``: requests per ``per``, by verb and resource."""
    if not per:
        return "-"
    parts = ", ".join(f"{k} {v / per:.2f}" for k, v in requests.most_common() if v / per >= 0.01)
    return f"{sum(requests.values()) / per:.2f} ({parts})"


def burst_table(leases: int, burst: dict[str, Any]) -> str:
    """The 1% expiry burst's reclaim latency next to its floor, judged against margin + 1 s.

    Args:
        leases: the leases the operator carried.
        burst: :func:`bench.scale.expiry_burst`'s result.

    Returns:
        Two Markdown tables: the latency with its verdict, then the floor's terms.
    """
    lag, margin = burst["lag"], burst["margin"]
    floor = burst.get("floor")
    row = [
        f"{leases:,}",
        f"{burst['leases']:,}",
        fmt(burst["expiries_spread_s"]),
        fmt(margin, digits=1),
        fmt(lag.p50, digits=3),
        fmt(lag.p99, digits=3),
        fmt(lag.max, digits=3),
        fmt(lag.p99 - margin, digits=3),
        fmt(floor.p99_floor, digits=3) if floor is not None else "-",
        burst_verdict(burst),
        str(burst["missing"]),
    ]
    header = [
        "leases carried",
        "burst",
        "expiries within s",
        "margin s",
        "p50 s",
        "p99 s",
        "max s",
        "p99 - margin s",
        "p99 floor s (API server CPU)",
        "target (p99 <= margin + 1 s)",
        "missing",
    ]
    parts = [markdown_table(header, [row])]
    if floor is None or "reclaims" not in burst:
        return parts[0]
    n = burst["leases"] - burst["missing"]
    rows = []
    for label, w in (("claims", burst["claims"]), ("reclaims", burst["reclaims"])):
        cpu = w["cpu"]
        rows.append(
            [
                label,
                fmt(w["seconds"], digits=1),
                f"{w['served']:,}",
                f"{w['renewals']:,.0f} ± {w['renewals_unsure']:,.0f}"
                f" ({fmt(w['renewals'] / w['seconds'], digits=0)}/s)",
                requests_text(w["requests"], n),
                " / ".join(
                    fmt(cpu.get(k, math.nan), digits=2)
                    for k in ("operator", "kube-apiserver", "etcd", "bench", "other", "machine")
                ),
                ms(cpu.get("kube-apiserver", math.nan) * w["seconds"] / w["served"])
                if w["served"]
                else "-",
            ]
        )
    unsure = burst["reclaims"]["renewals_unsure"] / n if n else math.nan
    parts += [
        "",
        markdown_table(
            [
                "window",
                "s",
                "requests served (all)",
                "renewals",
                "operator requests per reclaimed lease",
                "CPU cores: operator / apiserver / etcd / bench / other / machine",
                "apiserver CPU ms per request",
            ],
            rows,
        ),
        "",
        "Floor (reclaims window): "
        f"{fmt(floor.requests_per_reclaim, digits=2)} requests per reclaim x"
        f" {ms(floor.cpu_per_request)} ms API server CPU per request x {n:,} reclaims ="
        f" {fmt(floor.requests_per_reclaim * floor.cpu_per_request * n, digits=2)} CPU s;"
        f" at the {fmt(floor.apiserver_cores, digits=2)} cores the API server could have"
        " had (used + idle), the"
        f" burst needs {fmt(floor.burst_seconds, digits=2)} s of it; expiries spread over"
        f" {fmt(burst['expiries_spread_s'], digits=2)} s, so p99 >= margin + 0.99 x"
        f" (need - spread) = {fmt(floor.p99_floor, digits=3)} s. The renewals took"
        f" {fmt(floor.renewal_cores, digits=2)} cores at the same mean cost; had they kept"
        f" their rate, the burst would need {fmt(floor.burst_seconds_with_renewals, digits=2)}"
        f" s, p99 {fmt(floor.p99_with_renewals, digits=3)} s (an estimate, not a bound:"
        " they slow down while the burst is served). Measured p99:"
        f" {fmt(lag.p99, digits=3)} s. PATCH jobleases per reclaim is give or take"
        f" {fmt(unsure, digits=2)} (renewals landing during a scrape).",
    ]
    return "\n".join(parts)


def floors_table(operator: dict[str, Any], floors: Sequence[dict[str, Any]]) -> str:
    """The operator next to Kopf alone and a plain watch, at the same lease count.

    Args:
        operator: the operator's last scale row.
        floors: the stand-ins' figures.

    Returns:
        A Markdown table.
    """
    target = operator["target_rate"]
    op_per_event = operator["op_cpu_per_event"]
    op_cores = op_per_event * operator["rate"]
    rows = [
        [
            "leasehold operator",
            f"{operator['leases']:,}",
            fmt(operator["rate"], digits=0),
            fmt(op_cores, digits=3),
            fmt(op_per_event * 1000, digits=3),
            fmt(op_per_event * target, digits=2),
            fmt(operator["rss"], digits=0),
            fmt(operator.get("settled_seconds", math.nan), digits=1),
            f"{ms(operator['lag_p50'])} / {ms(operator['lag_p99'])}",
        ]
    ]
    labels = {"kopf": "Kopf alone (empty on.event handler)", "watch": "plain watch (client)"}
    for f in floors:
        rows.append(
            [
                labels.get(f["kind"], f["kind"]),
                f"{f['leases']:,}",
                fmt(f["rate"], digits=0),
                fmt(f["cpu"].get("floor", math.nan), digits=3),
                fmt(f["per_event"] * 1000, digits=3),
                fmt(f["per_event"] * target, digits=2),
                fmt(f["rss"], digits=0),
                fmt(f["settled_seconds"], digits=1),
                f"{ms(f['lag'].p50)} / {ms(f['lag'].p99)}" if f.get("lag") else "-",
            ]
        )
    return markdown_table(
        [
            "watcher",
            "leases",
            "renewals/s",
            "CPU cores",
            "CPU ms per renewal",
            f"cores at {target:,.0f} renewals/s (projected)",
            "RSS MB (peak)",
            "start-up until idle s",
            "watch lag p50 / p99 ms",
        ],
        rows,
    )


def report(r: Results, facts: dict[str, str], quick: bool, started: float) -> str:
    """The whole report as Markdown.

    Args:
        r: what the run measured.
        facts: machine facts (:func:`machine_facts`).
        quick: whether this was a ``--quick`` run.
        started: monotonic time the run started.
    """
    parts = [
        "# leasehold benchmark results",
        "",
        f"Run {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}"
        f" ({'--quick' if quick else 'full'}), {time.monotonic() - started:.0f} s in total,"
        " one fresh local control plane (`testing/localcluster`). Written by `python -m bench`;"
        " `bench/README.md` says how each figure is measured and what limits it.",
        "",
        "## Machine",
        "",
        markdown_table(["fact", "value"], [[k, v] for k, v in facts.items()]),
        "",
        "Load average (1/5/15 min) at each step; the machine is shared, so"
        " *other CPU* columns give what other processes used during a measurement:",
        "",
        markdown_table(
            ["moment", "load 1m", "5m", "15m"],
            [[label, *(f"{x:.2f}" for x in la)] for label, la in r.loads],
        ),
        "",
    ]
    if r.ops is not None and r.ops.ops:
        parts += [
            "## Lease operations vs raw compare-and-swap",
            "",
            "Each client is a thread with its own `ApiClient` (own connection pool: one"
            " keep-alive TLS connection), for the baseline and the lease operations alike."
            " Baseline: PUT `replace_namespaced_custom_object` of a JobLease (same CRD, same"
            " CEL rules) with the resourceVersion of the previous response. renew: loop on a"
            " held lease; claim (token known): fresh unheld leases, claimed with"
            " `observed=` the lease as created (one PATCH); claim (cold): fresh unheld"
            " leases, read first (GET + PATCH); complete: held leases. Segments are"
            " interleaved round by round. CPU columns are cores used during the segments.",
            "",
            ops_table(r.ops.ops),
            "",
            "Renew latency against the raw CAS write, with each client alternating the two"
            " (PUT on one JobLease, renew on another), so both see the same moment's load:",
            "",
            paired_table(r.ops.paired),
            "",
            "Token-known claim against the raw CAS write, paired the same way (each client"
            " alternates PUT on its CAS object and a claim of a fresh lease). Segment"
            " throughputs above are measured one after another and move with the shared"
            " machine's load (the raw JSON patch row, the same kind of request as a renew,"
            " varies by tens of percent against the PUT between runs); the paired ratio is"
            " the fair one:",
            "",
            paired_claim_table(r.ops.paired_claim),
            "",
            "Targets, judged on the paired runs (segment ratios in brackets). The claim"
            " target (uncontended claim throughput >= 0.8x raw) is judged on the"
            " token-known claim: the raw CAS baseline also writes with a resourceVersion it"
            " already knows, without a read. The cold claim is shown next to it:",
            "",
            *ops_targets(r.ops.ops, r.ops.paired, r.ops.paired_claim),
            "",
        ]
    if r.contention:
        parts += [
            "## Contention: claimers racing for one lease",
            "",
            "Each round, every claimer (a thread with its own warmed ApiClient) calls"
            " `LeaseStore.claim` on the same fresh lease at once (a barrier). Settled: from"
            " the barrier to the last claimer's answer.",
            "",
            contention_table(r.contention),
            "",
        ]
    if r.reclaim:
        parts += [
            "## Reclaim latency",
            "",
            "Pull-mode LeasedJobs; each lease claimed once and never renewed. Latency: from"
            " expiry (claim answered + leaseDurationSeconds) to the reclaim seen through a"
            " watch. The operator's margin is part of the figure by design. *spread*: claims"
            " evenly over the window; *burst*: all at once from 8 threads.",
            "",
            reclaim_table(r.reclaim),
            "",
        ]
    if r.scale is not None and r.scale.rows:
        parts += [
            "## Operator scale",
            "",
            f"Bare JobLeases created held (duration {LEASE_DURATION} s) in one namespace; the"
            f" load generator renews each every {RENEW_PERIOD:.0f} s (`LeaseStore.renew`,"
            " threads with their own ApiClients, slots spread evenly) in the same process as"
            " the benchmark. Each"
            f" tier is measured over {r.scale_window:.0f} s after one full period at"
            " that size. Watch lag: the operator's `leasehold_watch_lag_seconds` (renewTime"
            " to the operator's observation), buckets differenced across the window."
            " API writes per renewal: the API server's JobLease writes in the window"
            " / renewals sent.",
            "",
            scale_table(r.scale.rows),
            "",
        ]
    if r.scale is not None and r.scale.burst and r.scale.rows:
        parts += [
            "## Expiry burst at scale",
            "",
            "After the last tier, 1% more leases (pull-mode LeasedJobs, their JobLeases made"
            f" by the operator, duration {BURST_DURATION} s) are claimed at once from 8"
            " threads and never renewed, while the load generator renews the tier's leases."
            " Latency: from each lease's expiry (its claim's answer + leaseDurationSeconds)"
            " to its reclaim seen through a watch; the operator's margin is part of it by"
            " design. The floor: the API server's requests and CPU in the *reclaims*"
            " window (from the last claim's answer until every reclaim was seen, plus"
            f" {BURST_SETTLE:.0f} s): the operator's requests per reclaimed lease (every"
            " request but the renewals and the benchmark's claims) x the API server's CPU"
            " per request (its CPU seconds / every request it served, watch fan-out"
            " included) is the API server time the burst needs, at the cores the API"
            " server got in the window (its share of the machine); reclaims start at the"
            " first expiry + margin, so p99 >= margin + 0.99 x (that time - the expiries'"
            " spread). The cores: what the API server used in the window plus what the"
            " machine left idle. A lower bound from the API server alone, renewals set"
            " aside (the operator's own CPU is not in it either), as far as the mean CPU"
            " per request is the burst's: on a nearly idle API server the mean is mostly"
            " its own background work and overstates a request's cost.",
            "",
            burst_table(r.scale.rows[-1]["leases"], r.scale.burst),
            "",
        ]
    if r.scale is not None and r.scale.floors and r.scale.rows:
        parts += [
            "## Operator vs its floors (same leases, same load generator)",
            "",
            "After the last tier the operator is stopped and two stand-ins watch the same"
            " JobLeases under the same renewals: *Kopf alone* (`bench/floors/kopf_floor.py`:"
            " Kopf tuned by the operator's own startup handler, one empty `@kopf.on.event`"
            " handler for JobLeases) and *plain watch* (`bench/floors/plain_watch.py`:"
            " the official client's watch in a loop, one dict update per event). Their CPU"
            " per renewal is what Kopf itself costs, and what any watch-based design must"
            " pay.",
            "",
            floors_table(r.scale.rows[-1], r.scale.floors),
            "",
        ]
    if r.scale is not None and r.scale.profile:
        prof = r.scale.profile
        parts += ["## Operator profile (py-spy, after the last tier, load still on)", ""]
        if "error" in prof:
            parts += [prof["error"], ""]
        else:
            parts += [
                f"Raw collapsed stacks: `{prof['path']}`. Shares are of all samples"
                " (py-spy, 100 Hz, threads holding or waiting for the CPU; frames merged by"
                " function).",
                "",
                markdown_table(
                    ["part of the operator", "share of samples"],
                    [[k, f"{v * 100:.1f}%"] for k, v in prof["groups"].items()],
                ),
                "",
                markdown_table(
                    ["self time share", "frame"],
                    [[f"{s * 100:.1f}%", f"`{f}`"] for f, s in prof["self"]],
                ),
                "",
                markdown_table(
                    ["inclusive share", "frame"],
                    [[f"{s * 100:.1f}%", f"`{f}`"] for f, s in prof["inclusive"]],
                ),
                "",
            ]
    if r.jobs:
        parts += jobs_section(r.jobs)
    if r.handover:
        parts += handover_section(r.handover)
    if r.notes:
        parts += ["## Notes", "", *(f"- {n}" for n in r.notes), ""]
    return "\n".join(parts)
