"""Benchmarks: lease operations against the raw API server, reclaim latency, operator scale.

One run starts one fresh local control plane (etcd, kube-apiserver,
controller manager, scheduler; ``hack/localcluster``) and measures, each
figure next to a baseline taken in the same run:

* **baseline**: a raw compare-and-swap loop (GET once, then PUT with the
  ``resourceVersion`` of the last response) on JobLeases, with the official
  client, at 1, 8 and 32 concurrent clients;
* **lease operations** (:class:`leasehold.lease.store.LeaseStore`): renew, claim
  (token known: one PATCH; cold: GET + PATCH) and complete at the same
  concurrency, as ratios to the baseline, with the HTTP requests each one
  sent (counted in the client and in the API server);
* **contention**: 50 claimers on one lease at once;
* **reclaim latency**: the operator (a real process, margin 1 s) reclaiming
  leases that were claimed once and never renewed;
* **operator scale**: 1k/5k/10k JobLeases renewed every 10 s by a load
  generator: the operator's CPU, RSS, watch lag, and API writes per renewal.

Segments of the baseline and of the lease operations are interleaved, round
after round, so background load (other tests on the machine) hits both alike.

Usage::

    PYTHONPATH=hack .venv/bin/python bench/bench.py [--quick] [--only ops,scale]

It prints the tables and writes them, with the machine's facts, to
``bench/results.md``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, Final, cast

REPO: Final = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):
    # Run as a script: the script's folder is sys.path[0]; make ``bench`` a package.
    sys.path[0] = str(REPO)
if str(REPO / "hack") not in sys.path:
    sys.path.append(str(REPO / "hack"))  # the test harness: localcluster, operatorproc

from kubernetes import client, config, watch  # noqa: E402

from bench.stats import (  # noqa: E402
    Sample,
    Summary,
    bucket_delta,
    counter_delta,
    cpu_ticks,
    flat_to_samples,
    fmt,
    fraction_above,
    histogram_buckets,
    histogram_quantile,
    markdown_table,
    parse_samples,
    ratio,
    renewal_offsets,
    rss_bytes,
    schedstat,
    stack_share,
    sum_samples,
    summarize,
    system_cpu_ticks,
    top_frames,
)
from leasehold import names  # noqa: E402
from leasehold.lease.errors import StoreError  # noqa: E402
from leasehold.lease.protocol import Outcome  # noqa: E402
from leasehold.lease.store import (  # noqa: E402
    Accepted,
    LeaseStore,
    Rejected,
    StoredLease,
    format_time,
    to_stored,
)
from localcluster import LocalCluster, control_plane_bin_dir, tools_bin_dir  # noqa: E402
from operatorproc import OperatorProcess  # noqa: E402

G: Final = names.GROUP
V: Final = names.VERSION
PLURAL: Final = "jobleases"
LEVELS: Final = (1, 8, 32)
OPS: Final = ("baseline", "raw-patch", "renew", "claim-known", "claim", "complete")
"""Measured operations: two raw baselines, then the LeaseStore's.

``claim-known`` is ``LeaseStore.claim(..., observed=lease)`` with the lease
as created (the caller knows its token: one PATCH); ``claim`` is the cold
claim that reads first (GET + PATCH).
"""
WRITE_VERBS: Final = ("POST", "PUT", "PATCH", "DELETE", "APPLY")
CLK_TCK: Final = os.sysconf("SC_CLK_TCK")
RENEW_PERIOD: Final = 10.0
"""Seconds between two renewals of one lease in the scale test."""


@dataclass(frozen=True)
class Sizes:
    """How much each part measures.

    Attributes:
        ops_per_segment: lease/baseline operations per segment (split across clients).
        rounds: interleaved rounds of baseline + lease op segments per level.
        contention_claimers: claimers racing for one lease.
        contention_rounds: races (one fresh lease each).
        reclaim_leases: leases claimed once and left to expire.
        reclaim_duration: their ``leaseDurationSeconds``.
        reclaim_spread: seconds over which the spread claims are made.
        scale_tiers: JobLease counts of the scale test.
        scale_window: seconds measured per tier.
        scale_threads: load generator threads.
        profile_seconds: py-spy sampling of the operator after the last tier (0: none).
        floors: after the last tier, measure Kopf alone and a plain watch on the same leases.
    """

    ops_per_segment: int
    rounds: int
    contention_claimers: int
    contention_rounds: int
    reclaim_leases: int
    reclaim_duration: int
    reclaim_spread: float
    scale_tiers: tuple[int, ...]
    scale_window: float
    scale_threads: int
    profile_seconds: float
    floors: bool


FULL: Final = Sizes(
    ops_per_segment=200,
    rounds=5,
    contention_claimers=50,
    contention_rounds=10,
    reclaim_leases=100,
    reclaim_duration=3,
    reclaim_spread=10.0,
    scale_tiers=(1000, 5000, 10000),
    scale_window=30.0,
    scale_threads=64,
    profile_seconds=15.0,
    floors=True,
)
QUICK: Final = Sizes(
    ops_per_segment=96,
    rounds=2,
    contention_claimers=50,
    contention_rounds=3,
    reclaim_leases=20,
    reclaim_duration=3,
    reclaim_spread=4.0,
    scale_tiers=(1000,),
    scale_window=20.0,
    scale_threads=16,
    profile_seconds=0.0,
    floors=False,
)


def now() -> datetime:
    """The wall clock, UTC (for renewTime values only)."""
    return datetime.now(UTC)


def log(message: str) -> None:
    """Print a progress line to stderr, with the time.

    Args:
        message: what is happening.
    """
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# Clients


def new_client(kubeconfig: Path) -> Any:
    """A new ``ApiClient`` (its own connection pool) from a kubeconfig.

    Args:
        kubeconfig: the cluster's kubeconfig.

    Returns:
        The client.
    """
    return config.new_client_from_config(config_file=str(kubeconfig), persist_config=False)


@dataclass
class Worker:
    """One benchmark client: its own ApiClient, a request counter, a LeaseStore.

    Attributes:
        api: the ApiClient (one keep-alive connection in practice).
        counts: HTTP requests sent, by method.
        store: a LeaseStore on ``api``.
        custom: a CustomObjectsApi on ``api``.
        index: the worker's number.
    """

    api: Any
    counts: Counter[str]
    store: LeaseStore
    custom: Any
    index: int


def new_worker(kubeconfig: Path, index: int) -> Worker:
    """Build a worker whose every HTTP request is counted by method.

    The count wraps the client's REST layer, the one place every request of
    the official client goes through.

    Args:
        kubeconfig: the cluster's kubeconfig.
        index: the worker's number.

    Returns:
        The worker.
    """
    api = new_client(kubeconfig)
    counts: Counter[str] = Counter()
    rest = api.rest_client
    original = rest.request

    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        counts[method.upper()] += 1
        return original(method, url, *args, **kwargs)

    rest.request = request
    return Worker(api, counts, LeaseStore(api), client.CustomObjectsApi(api), index)


def lease_body(
    name: str, *, holder: str | None = None, duration: int = 30, token: int = 0
) -> dict[str, Any]:
    """A JobLease object to create; held (``token`` >= 1) when ``holder`` is given.

    Args:
        name: the lease's (and its job's) name.
        holder: the holder, or ``None`` for an unheld lease.
        duration: ``leaseDurationSeconds``.
        token: the fencing token (at least 1 when held).

    Returns:
        The object.
    """
    spec: dict[str, Any] = {"jobName": name, "leaseDurationSeconds": duration}
    if holder is not None:
        now = format_time(datetime.now(UTC))
        spec |= {
            "holderIdentity": holder,
            "fencingToken": max(token, 1),
            "acquireTime": now,
            "renewTime": now,
        }
    else:
        spec["fencingToken"] = token
    return {
        "apiVersion": f"{G}/{V}",
        "kind": "JobLease",
        "metadata": {"name": name},
        "spec": spec,
    }


def create_objects(
    kubeconfig: Path,
    namespace: str,
    plural: str,
    bodies: Sequence[dict[str, Any]],
    threads: int = 8,
) -> float:
    """Create custom objects in parallel.

    Args:
        kubeconfig: the cluster's kubeconfig.
        namespace: where.
        plural: the resource (``jobleases``, ``leasedjobs``).
        bodies: the objects.
        threads: parallel clients.

    Returns:
        Seconds it took.
    """
    local = threading.local()
    began = time.monotonic()

    def create(body: dict[str, Any]) -> None:
        if not hasattr(local, "custom"):
            local.custom = client.CustomObjectsApi(new_client(kubeconfig))
        for attempt in range(5):
            try:
                local.custom.create_namespaced_custom_object(G, V, namespace, plural, body)
                break
            except client.ApiException as exc:
                if exc.status == 409 or attempt == 4 or (exc.status or 500) < 500:
                    raise
                time.sleep(0.5)

    pool = concurrent.futures.ThreadPoolExecutor(threads)
    try:
        for future in [pool.submit(create, b) for b in bodies]:
            future.result()
    finally:
        pool.shutdown(cancel_futures=True)
    return time.monotonic() - began


def apiserver_samples(api: Any, names: Sequence[str] = ("apiserver_request_total",)) -> Scrape:
    """Scrape the API server's own ``/metrics``, keeping only some metrics.

    The full text is megabytes; parsing only the lines needed keeps the
    scrape short (it runs next to timed clients in this process).

    Args:
        api: an admin ApiClient.
        names: metric names to keep.

    Returns:
        The samples, timed.
    """
    t0 = time.monotonic()
    response = api.rest_client.request("GET", f"{api.configuration.host}/metrics")
    text = response.read().decode()
    prefixes = tuple(names)
    kept = "\n".join(
        line
        for line in text.splitlines()
        if line.startswith(prefixes) or line.startswith(tuple(f"# TYPE {n} " for n in names))
    )
    return Scrape((t0 + time.monotonic()) / 2, parse_samples(kept))


def operator_samples(op: OperatorProcess) -> Scrape:
    """Scrape the operator's ``/metrics``.

    Args:
        op: the operator.

    Returns:
        The samples, timed.
    """
    t0 = time.monotonic()
    flat = op.metrics()
    return Scrape((t0 + time.monotonic()) / 2, flat_to_samples(flat))


@dataclass(frozen=True)
class Scrape:
    """Samples of one scrape and when it was taken.

    Attributes:
        at: monotonic time, the middle of the scrape.
        samples: the samples.
    """

    at: float
    samples: list[Sample]


def jobleases_requests(before: Scrape, after: Scrape) -> Counter[str]:
    """JobLease requests the API server served between two scrapes, by verb.

    Args:
        before: first scrape.
        after: second scrape.

    Returns:
        verb -> count (subresources included).
    """
    verbs = {
        s.labels.get("verb", "")
        for s in after.samples
        if s.name == "apiserver_request_total" and s.labels.get("resource") == PLURAL
    }
    out: Counter[str] = Counter()
    for verb in verbs:
        delta = counter_delta(
            before.samples, after.samples, "apiserver_request_total", resource=PLURAL, verb=verb
        )
        if delta:
            out[verb] = round(delta)
    return out


def all_requests(before: Scrape, after: Scrape) -> Counter[str]:
    """Every request the API server served between two scrapes, by resource and verb.

    Args:
        before: first scrape.
        after: second scrape.

    Returns:
        ``"<verb> <resource>[/<subresource>]"`` -> count, zeros left out.
    """
    old: Counter[str] = Counter()
    new: Counter[str] = Counter()
    for scrape, into in ((before, old), (after, new)):
        for s in scrape.samples:
            if s.name == "apiserver_request_total":
                sub = s.labels.get("subresource", "")
                key = f"{s.labels.get('verb', '')} {s.labels.get('resource', '')}"
                into[key + (f"/{sub}" if sub else "")] += round(s.value)
    return Counter({k: v - old[k] for k, v in new.items() if v - old[k] > 0})


# --------------------------------------------------------------------------
# CPU and memory of processes


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


@dataclass(frozen=True)
class CpuSnapshot:
    """CPU ticks of named processes and of the whole machine at one moment.

    Attributes:
        at: monotonic time.
        ticks: process name -> utime + stime ticks.
        busy: machine busy ticks (all CPUs).
    """

    at: float
    ticks: dict[str, int]
    busy: int


class CpuMeter:
    """Measures CPU use (in cores) of named processes over a window.

    Args:
        pids: process name -> pid.
    """

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = dict(pids)

    def snapshot(self) -> CpuSnapshot:
        """Read every process's ticks now.

        Returns:
            The snapshot.
        """
        ticks = {}
        for name, pid in self.pids.items():
            stat = _read(f"/proc/{pid}/stat")
            ticks[name] = cpu_ticks(stat) if stat else 0
        busy, _ = system_cpu_ticks(_read("/proc/stat"))
        return CpuSnapshot(time.monotonic(), ticks, busy)

    @staticmethod
    def cores(before: CpuSnapshot, after: CpuSnapshot) -> dict[str, float]:
        """CPU use between two snapshots, in cores.

        Args:
            before: the first snapshot.
            after: the second.

        Returns:
            name -> cores, plus ``machine`` (all CPUs busy) and ``other``
            (machine minus the named processes: other engineers' tests etc.).
        """
        seconds = max(after.at - before.at, 1e-9)
        out = {
            name: (after.ticks.get(name, 0) - before.ticks.get(name, 0)) / CLK_TCK / seconds
            for name in after.ticks
        }
        out["machine"] = (after.busy - before.busy) / CLK_TCK / seconds
        out["other"] = max(0.0, out["machine"] - sum(v for k, v in out.items() if k != "machine"))
        return out


def sched_seconds(pid: int) -> tuple[float, float]:
    """Seconds all threads of a process ran, and waited runnable for a CPU.

    Args:
        pid: the process.

    Returns:
        ``(run, wait)`` summed over ``/proc/<pid>/task/*/schedstat``.
    """
    run = wait = 0
    for task in Path(f"/proc/{pid}/task").glob("*"):
        r, w = schedstat(_read(str(task / "schedstat")))
        run += r
        wait += w
    return run / 1e9, wait / 1e9


def rss_mb(pid: int) -> float:
    """Resident memory of a process, MB.

    Args:
        pid: the process.

    Returns:
        ``VmRSS`` in MiB.
    """
    return rss_bytes(_read(f"/proc/{pid}/status")) / 2**20


# --------------------------------------------------------------------------
# Part 1: baseline and lease operations


@dataclass
class Segment:
    """One measured segment: one operation, one concurrency level, one round.

    Attributes:
        latencies: seconds per operation.
        elapsed: wall seconds from start to the last operation's end.
        client_requests: HTTP requests the clients sent, by method.
        server_requests: JobLease requests the API server served, by verb.
        failures: operations that did not succeed.
        cpu: cores used, by process.
    """

    latencies: list[float]
    elapsed: float
    client_requests: Counter[str]
    server_requests: Counter[str]
    failures: int
    cpu: dict[str, float]


@dataclass
class OpResult:
    """All segments of one operation at one concurrency level.

    Attributes:
        op: one of :data:`OPS`.
        clients: concurrency.
        segments: the rounds.
    """

    op: str
    clients: int
    segments: list[Segment] = field(default_factory=list)

    @property
    def count(self) -> int:
        """Operations measured."""
        return sum(len(s.latencies) for s in self.segments)

    @property
    def throughput(self) -> float:
        """Operations per second (all rounds: total ops / total time)."""
        total = sum(s.elapsed for s in self.segments)
        return self.count / total if total else math.nan

    @property
    def latency(self) -> Summary:
        """Latency figures over all rounds."""
        return summarize([x for s in self.segments for x in s.latencies])

    def requests_per_op(self, source: str = "client") -> Counter[str]:
        """Average HTTP requests per operation, by method.

        Args:
            source: ``client`` (counted in the client) or ``server`` (the API
                server's ``apiserver_request_total`` for jobleases).

        Returns:
            method -> requests per operation.
        """
        total: Counter[str] = Counter()
        for s in self.segments:
            total.update(s.client_requests if source == "client" else s.server_requests)
        return Counter({k: v / self.count for k, v in total.items()}) if self.count else total

    @property
    def failures(self) -> int:
        """Operations that did not succeed."""
        return sum(s.failures for s in self.segments)

    def cpu(self, name: str) -> float:
        """Mean cores used by a process over the segments (time-weighted).

        Args:
            name: process name (``bench``, ``kube-apiserver``, ``etcd``, ``machine``, ``other``).

        Returns:
            Cores.
        """
        total = sum(s.elapsed for s in self.segments)
        return sum(s.cpu.get(name, 0.0) * s.elapsed for s in self.segments) / total if total else 0


class Bench:
    """The run: one cluster, its clients, meters and results.

    Args:
        cluster: the started local control plane.
        workdir: scratch folder (operator logs, profiles).
        sizes: how much to measure.
    """

    def __init__(self, cluster: LocalCluster, workdir: Path, sizes: Sizes) -> None:
        self.cluster = cluster
        self.kubeconfig = cluster.kubeconfig
        self.workdir = workdir
        self.sizes = sizes
        self.admin = new_client(self.kubeconfig)
        self.custom = client.CustomObjectsApi(self.admin)
        pids = {name: p.pid for name, p in cluster.processes.items()}
        pids["bench"] = os.getpid()
        self.meter = CpuMeter(pids)
        self.kubectl = str(tools_bin_dir() / "kubectl")
        self.loads: list[tuple[str, tuple[float, float, float]]] = []
        self.ops: list[OpResult] = []
        self.contention: dict[str, Any] = {}
        self.reclaim: list[dict[str, Any]] = []
        self.scale: list[dict[str, Any]] = []
        self.profile: dict[str, Any] = {}
        self.floors: list[dict[str, Any]] = []
        self.paired: dict[int, tuple[list[float], list[float]]] = {}
        self.paired_claim: dict[int, tuple[list[float], list[float]]] = {}
        self.notes: list[str] = []

    def note_load(self, label: str) -> None:
        """Record the load average now.

        Args:
            label: the moment (e.g. ``before ops``).
        """
        self.loads.append((label, os.getloadavg()))

    # -- set-up -------------------------------------------------------------

    def setup(self) -> None:
        """Install the CRDs and wait until they are served."""
        base = [self.kubectl, "--kubeconfig", str(self.kubeconfig)]
        subprocess.run(
            [*base, "apply", "--server-side", "-f", str(REPO / "deploy" / "crds")],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [
                *base,
                "wait",
                "--for=condition=Established",
                "crd/jobleases.leasehold.dev",
                "crd/leasedjobs.leasehold.dev",
            ],
            check=True,
            capture_output=True,
        )
        deadline = time.monotonic() + 30
        while True:  # Established is not yet "served by this API server's handlers"
            try:
                self.custom.list_namespaced_custom_object(G, V, "default", PLURAL, limit=1)
                break
            except client.ApiException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def namespace(self, name: str) -> str:
        """Create a namespace.

        Args:
            name: its name.

        Returns:
            The name.
        """
        client.CoreV1Api(self.admin).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=name))
        )
        return name

    # -- part 1 -------------------------------------------------------------

    def _segment(
        self, workers: Sequence[Worker], per_worker: int, op: Callable[[Worker, int], bool]
    ) -> Segment:
        for w in workers:
            w.counts.clear()
        latencies: list[list[float]] = [[] for _ in workers]
        failures = [0] * len(workers)
        barrier = threading.Barrier(len(workers) + 1)
        ends = [0.0] * len(workers)

        def run(i: int, w: Worker) -> None:
            barrier.wait()
            mine = latencies[i]
            for k in range(per_worker):
                t0 = time.perf_counter()
                try:
                    ok = op(w, k)
                except StoreError:
                    ok = False
                mine.append(time.perf_counter() - t0)
                if not ok:
                    failures[i] += 1
            ends[i] = time.perf_counter()

        threads = [
            threading.Thread(target=run, args=(i, w), daemon=True) for i, w in enumerate(workers)
        ]
        for t in threads:
            t.start()
        server_before = apiserver_samples(self.admin)
        cpu_before = self.meter.snapshot()
        barrier.wait()
        start = time.perf_counter()
        for t in threads:
            t.join()
        elapsed = max(ends) - start
        cpu_after = self.meter.snapshot()
        server_after = apiserver_samples(self.admin)
        client_requests: Counter[str] = Counter()
        for w in workers:
            client_requests.update(w.counts)
        return Segment(
            latencies=[x for lat in latencies for x in lat],
            elapsed=elapsed,
            client_requests=client_requests,
            server_requests=jobleases_requests(server_before, server_after),
            failures=sum(failures),
            cpu=CpuMeter.cores(cpu_before, cpu_after),
        )

    def _paired(
        self,
        workers: Sequence[Worker],
        per_worker: int,
        first: Callable[[Worker, int], bool],
        second: Callable[[Worker, int], bool],
    ) -> tuple[list[float], list[float]]:
        """Each client alternates two operations; latencies of each.

        Both see the same moment's load, so their latency ratio is fair on a
        machine shared with other work.
        """
        lat: list[tuple[list[float], list[float]]] = [([], []) for _ in workers]
        barrier = threading.Barrier(len(workers))

        def run(i: int, w: Worker) -> None:
            barrier.wait()
            for k in range(per_worker):
                for op in (first, second) if k % 2 else (second, first):
                    t0 = time.perf_counter()
                    op(w, k)
                    lat[i][0 if op is first else 1].append(time.perf_counter() - t0)

        threads = [
            threading.Thread(target=run, args=(i, w), daemon=True) for i, w in enumerate(workers)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return [x for a, _ in lat for x in a], [x for _, b in lat for x in b]

    def run_ops(self) -> None:
        """Baseline CAS writes and lease operations at each concurrency level."""
        ns = self.namespace("ops")
        sizes = self.sizes
        for clients in LEVELS:
            per_worker = max(1, math.ceil(sizes.ops_per_segment / clients))
            log(f"ops: {clients} clients x {per_worker} ops x {sizes.rounds} rounds")
            workers = [new_worker(self.kubeconfig, i) for i in range(clients)]
            # Fixed objects: one per worker for the CAS loop, one for renewals;
            # pools of fresh unheld (claim: known token and cold) and held
            # (complete) leases per round.
            cas = [f"cas-{clients}-{w.index}" for w in workers]
            ren = [f"ren-{clients}-{w.index}" for w in workers]
            pat = [f"pat-{clients}-{w.index}" for w in workers]
            bodies = [lease_body(n, holder=f"h-{n}") for n in cas + ren + pat]

            def pool_name(kind: str, rnd: int, w: int, k: int, c: int = clients) -> str:
                return f"{kind}-{c}-{rnd}-{w}-{k}"

            # The token-known claims' `observed`: each lease as this benchmark
            # created it (unheld, token 0), parsed before timing starts. No
            # resourceVersion: a known-token claim does not need one.
            known: dict[str, StoredLease] = {}
            for rnd in range(sizes.rounds):
                for w in workers:
                    for k in range(per_worker):
                        bodies.append(lease_body(pool_name("cl", rnd, w.index, k)))
                        name = pool_name("ck", rnd, w.index, k)
                        body = lease_body(name)
                        bodies.append(body)
                        known[name] = to_stored(
                            {**body, "metadata": {**body["metadata"], "namespace": ns}}
                        )
                        name = pool_name("co", rnd, w.index, k)
                        bodies.append(lease_body(name, holder=f"h-{name}"))
                        name = pool_name("pk", rnd, w.index, k)  # paired with PUT
                        body = lease_body(name)
                        bodies.append(body)
                        known[name] = to_stored(
                            {**body, "metadata": {**body["metadata"], "namespace": ns}}
                        )
            took = create_objects(self.kubeconfig, ns, PLURAL, bodies, threads=16)
            log(f"ops: created {len(bodies)} leases in {took:.1f}s")
            # Warm every connection (TLS handshake) and read the CAS objects once.
            current: list[dict[str, Any]] = [
                cast(
                    "dict[str, Any]",
                    w.custom.get_namespaced_custom_object(G, V, ns, PLURAL, cas[w.index]),
                )
                for w in workers
            ]
            for w in workers:
                w.store.get(ns, ren[w.index])

            def baseline(
                w: Worker, k: int, current: list[dict[str, Any]] = current, cas: list[str] = cas
            ) -> bool:
                body = current[w.index]
                body["spec"]["renewTime"] = format_time(now())
                current[w.index] = cast(
                    "dict[str, Any]",
                    w.custom.replace_namespaced_custom_object(G, V, ns, PLURAL, cas[w.index], body),
                )
                return True

            def raw_patch(w: Worker, k: int, pat: list[str] = pat) -> bool:
                name = pat[w.index]
                ops = [
                    {"op": "test", "path": "/spec/holderIdentity", "value": f"h-{name}"},
                    {"op": "test", "path": "/spec/fencingToken", "value": 1},
                    {"op": "add", "path": "/spec/renewTime", "value": format_time(now())},
                ]
                w.custom.patch_namespaced_custom_object(
                    G, V, ns, PLURAL, name, ops, _content_type="application/json-patch+json"
                )
                return True

            def renew(w: Worker, k: int, ren: list[str] = ren) -> bool:
                name = ren[w.index]
                return isinstance(w.store.renew(ns, name, f"h-{name}", 1), Accepted)

            results = {op: OpResult(op, clients) for op in OPS}
            for rnd in range(sizes.rounds):

                def claim(w: Worker, k: int, rnd: int = rnd) -> bool:
                    name = pool_name("cl", rnd, w.index, k)
                    return isinstance(w.store.claim(ns, name, f"c-{w.index}"), Accepted)

                def claim_known(
                    w: Worker, k: int, rnd: int = rnd, known: dict[str, StoredLease] = known
                ) -> bool:
                    name = pool_name("ck", rnd, w.index, k)
                    result = w.store.claim(ns, name, f"c-{w.index}", observed=known[name])
                    return isinstance(result, Accepted)

                def complete(w: Worker, k: int, rnd: int = rnd) -> bool:
                    name = pool_name("co", rnd, w.index, k)
                    result = w.store.complete(ns, name, f"h-{name}", 1, Outcome.SUCCEEDED)
                    return isinstance(result, Accepted)

                ops: dict[str, Callable[[Worker, int], bool]] = {
                    "baseline": baseline,
                    "raw-patch": raw_patch,
                    "renew": renew,
                    "claim-known": claim_known,
                    "claim": claim,
                    "complete": complete,
                }
                order = list(ops)
                if rnd % 2:
                    order.reverse()  # no operation always runs first
                for op in order:
                    results[op].segments.append(self._segment(workers, per_worker, ops[op]))
                put, patch = self._paired(workers, max(1, per_worker // 2), baseline, renew)
                self.paired.setdefault(clients, ([], []))
                self.paired[clients][0].extend(put)
                self.paired[clients][1].extend(patch)

                def paired_claim(
                    w: Worker, k: int, rnd: int = rnd, known: dict[str, StoredLease] = known
                ) -> bool:
                    name = pool_name("pk", rnd, w.index, k)
                    result = w.store.claim(ns, name, f"c-{w.index}", observed=known[name])
                    return isinstance(result, Accepted)

                put, claimed = self._paired(workers, per_worker, baseline, paired_claim)
                self.paired_claim.setdefault(clients, ([], []))
                self.paired_claim[clients][0].extend(put)
                self.paired_claim[clients][1].extend(claimed)
            self.ops.extend(results.values())
            for w in workers:
                w.api.close()

    # -- part 2: contention -------------------------------------------------

    def run_contention(self) -> None:
        """Many claimers race for one fresh lease, round after round."""
        ns = self.namespace("contention")
        n, rounds = self.sizes.contention_claimers, self.sizes.contention_rounds
        log(f"contention: {n} claimers x {rounds} rounds")
        workers = [new_worker(self.kubeconfig, i) for i in range(n)]
        names = [f"race-{r}" for r in range(rounds)]
        create_objects(self.kubeconfig, ns, PLURAL, [lease_body(x) for x in names])
        for w in workers:  # warm the connections
            w.store.get(ns, names[0])
        settle: list[float] = []
        first_win: list[float] = []
        winners: list[int] = []
        tokens: list[int] = []
        requests: Counter[str] = Counter()
        failures = 0
        cpu: list[dict[str, float]] = []
        for name in names:
            for w in workers:
                w.counts.clear()
            barrier = threading.Barrier(n + 1)
            outcomes: list[tuple[float, bool]] = [(0.0, False)] * n

            def run(
                w: Worker,
                name: str = name,
                barrier: threading.Barrier = barrier,
                outcomes: list[tuple[float, bool]] = outcomes,
            ) -> None:
                barrier.wait()
                try:
                    result = w.store.claim(ns, name, f"claimer-{w.index}")
                except StoreError:
                    outcomes[w.index] = (time.perf_counter(), False)
                    raise
                outcomes[w.index] = (time.perf_counter(), isinstance(result, Accepted))
                if not isinstance(result, Accepted | Rejected):
                    raise AssertionError(result)

            threads = [threading.Thread(target=run, args=(w,), daemon=True) for w in workers]
            for t in threads:
                t.start()
            before = self.meter.snapshot()
            barrier.wait()
            start = time.perf_counter()
            for t in threads:
                t.join()
            cpu.append(CpuMeter.cores(before, self.meter.snapshot()))
            settle.append(max(t for t, _ in outcomes) - start)
            wins = [t for t, ok in outcomes if ok]
            winners.append(len(wins))
            first_win.extend(t - start for t in wins)
            failures += sum(1 for t, ok in outcomes if t == 0.0)
            for w in workers:
                requests.update(w.counts)
            lease = self.custom.get_namespaced_custom_object(G, V, ns, PLURAL, name)
            tokens.append(int(cast("dict[str, Any]", lease)["spec"]["fencingToken"]))
        for w in workers:
            w.api.close()
        successes = sum(winners)
        self.contention = {
            "claimers": n,
            "rounds": rounds,
            "winners": winners,
            "tokens": tokens,
            "settle": summarize(settle),
            "win_latency": summarize(first_win),
            "requests": requests,
            "requests_per_success": sum(requests.values()) / successes if successes else math.nan,
            "failures": failures,
            "cpu": {k: sum(c[k] for c in cpu) / len(cpu) for k in cpu[0]},
        }

    # -- part 3: reclaim latency --------------------------------------------

    def run_reclaim(self) -> None:
        """Leases claimed once and never renewed: time from expiry to reclaim."""
        ns = self.namespace("reclaim")
        sizes = self.sizes
        n, duration, margin = sizes.reclaim_leases, sizes.reclaim_duration, 1.0
        op = OperatorProcess(self.kubeconfig, ns, self.workdir / "operator-reclaim.log", margin)
        op.start()
        try:
            jobs = [
                {
                    "apiVersion": f"{G}/{V}",
                    "kind": "LeasedJob",
                    "metadata": {"name": f"r{i}"},
                    "spec": {"leaseDurationSeconds": duration, "maxAttempts": 10},
                }
                for i in range(n)
            ]
            create_objects(self.kubeconfig, ns, "leasedjobs", jobs)
            deadline = time.monotonic() + 60
            while True:  # the operator creates one JobLease per LeasedJob
                listed = self.custom.list_namespaced_custom_object(G, V, ns, PLURAL)
                items = cast("dict[str, Any]", listed)["items"]
                if len(items) >= n:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the operator created {len(items)} of {n} leases")
                time.sleep(0.2)
            time.sleep(2.0)  # its status writes settle
            store = LeaseStore(new_client(self.kubeconfig))
            names = [f"r{i}" for i in range(n)]
            for mode, token in (("spread", 1), ("burst", 2)):
                self.note_load(f"reclaim {mode}")
                log(f"reclaim: {n} leases, {mode}")
                seen: dict[str, float] = {}
                claimed: dict[str, float] = {}
                stop = threading.Event()
                ready = threading.Event()
                watcher = threading.Thread(
                    target=self._watch_reclaims,
                    args=(ns, token, seen, n, stop, ready),
                    daemon=True,
                )
                watcher.start()
                ready.wait(10)
                before = self.meter.snapshot()
                server_before = apiserver_samples(self.admin)

                def claim(
                    name: str,
                    store: LeaseStore = store,
                    claimed: dict[str, float] = claimed,
                    token: int = token,
                ) -> None:
                    result = store.claim(ns, name, f"silent-{name}")
                    claimed[name] = time.monotonic()  # the change has landed by now
                    if not isinstance(result, Accepted) or result.token != token:
                        raise AssertionError(f"claim of {name}: {result}")

                if mode == "spread":
                    gap = sizes.reclaim_spread / n
                    start = time.monotonic()
                    for i, name in enumerate(names):
                        time.sleep(max(0.0, start + i * gap - time.monotonic()))
                        claim(name)
                else:
                    with concurrent.futures.ThreadPoolExecutor(8) as pool:
                        for f in [pool.submit(claim, x) for x in names]:
                            f.result()
                watcher.join(timeout=duration + margin + 60)
                stop.set()
                cpu = CpuMeter.cores(before, self.meter.snapshot())
                time.sleep(1.0)  # the operator's follow-up reconciles
                every = all_requests(server_before, apiserver_samples(self.admin))
                # The claims are ours (GET + PATCH each); the rest is the operator's.
                every.subtract({"GET jobleases": n, "PATCH jobleases": n})
                lags = [seen[x] - (claimed[x] + duration) for x in names if x in seen]
                first_expiry = min(claimed.values()) + duration
                self.reclaim.append(
                    {
                        "mode": mode,
                        "leases": n,
                        "duration": duration,
                        "margin": margin,
                        "lag": summarize(lags),
                        "missing": n - len(lags),
                        "claim_spread": max(claimed.values()) - min(claimed.values()),
                        "cpu": cpu,
                        "operator_requests": +every,
                        "reclaims_per_s": len(lags) / (max(seen.values()) - first_expiry)
                        if seen
                        else math.nan,
                    }
                )
            time.sleep(1.0)  # the operator counts a reclaim after its write returns
            metrics = operator_samples(op).samples
            self.notes.append(
                "reclaim: operator counted "
                f"{sum_samples(metrics, 'leasehold_reclaims_total'):.0f}"
                f" reclaims for {2 * n} expiries"
            )
        finally:
            op.stop()

    def _watch_reclaims(
        self,
        ns: str,
        token: int,
        seen: dict[str, float],
        n: int,
        stop: threading.Event,
        ready: threading.Event,
    ) -> None:
        custom = client.CustomObjectsApi(new_client(self.kubeconfig))
        listed = cast("dict[str, Any]", custom.list_namespaced_custom_object(G, V, ns, PLURAL))
        rv = listed["metadata"]["resourceVersion"]
        stream = watch.Watch()
        ready.set()
        for event in stream.stream(
            custom.list_namespaced_custom_object,
            G,
            V,
            ns,
            PLURAL,
            resource_version=rv,
            timeout_seconds=120,
        ):
            obj: Any = event["object"]
            spec = obj.get("spec", {})
            if spec.get("fencingToken") == token and not spec.get("holderIdentity"):
                seen.setdefault(obj["metadata"]["name"], time.monotonic())
            if len(seen) >= n or stop.is_set():
                stream.stop()
                break

    # -- part 4: operator scale ---------------------------------------------

    def run_scale(self) -> None:
        """1k/5k/10k JobLeases renewed every 10 s: what the operator costs.

        Tiers are cumulative in one namespace. Each tier's new leases are
        created while nothing else runs (generator paused, operator stopped),
        then a fresh operator starts on all of them, the generator renews
        them for one period, and a window is measured. A restarted operator
        starts every expiry window afresh, so the pause never expires a lease.
        """
        ns = self.namespace("scale")
        sizes = self.sizes
        gen = LoadGenerator(self.kubeconfig, ns, RENEW_PERIOD, sizes.scale_threads)
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
                self.note_load(f"scale {tier}: create")
                names = [f"s{i}" for i in range(created, tier)]
                took = create_objects(
                    self.kubeconfig,
                    ns,
                    PLURAL,
                    [lease_body(x, holder=f"g-{x}", duration=60) for x in names],
                    threads=16,
                )
                for name in names:
                    gen.add(name)
                created = tier
                log(f"scale: created {len(names)} in {took:.1f}s; starting the operator")
                op = OperatorProcess(
                    self.kubeconfig, ns, self.workdir / f"operator-scale-{tier}.log", 1.0
                )
                began = time.monotonic()
                op.start()
                assert op.proc is not None
                self.meter.pids["operator"] = op.proc.pid
                # Until it has seen every lease: its first LIST, one event each.
                deadline = time.monotonic() + 120
                while True:
                    seen = sum_samples(operator_samples(op).samples, "leasehold_leases_held")
                    if seen >= tier or time.monotonic() > deadline:
                        break
                    time.sleep(0.5)
                startup = time.monotonic() - began
                # Its start-up work (a reconcile per first-seen lease) must be
                # over before the window: wait until it idles (generator paused).
                idle_deadline = time.monotonic() + 180
                while time.monotonic() < idle_deadline:
                    before = self.meter.snapshot()
                    time.sleep(2.0)
                    if CpuMeter.cores(before, self.meter.snapshot())["operator"] < 0.03:
                        break
                settled = time.monotonic() - began
                gen.resume()
                time.sleep(RENEW_PERIOD)  # one full period: the load is steady
                self.note_load(f"scale {tier}: window")
                row = self._scale_window(op, op.proc.pid, gen, tier)
                row["create_seconds"] = took
                row["startup_seconds"] = startup
                row["settled_seconds"] = settled
                self.scale.append(row)
                self.notes.append(
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
            if sizes.profile_seconds > 0 and op is not None and op.proc is not None:
                self.profile = profile(op.proc.pid, sizes.profile_seconds, self.workdir)
            if sizes.floors and op is not None:
                op.stop()
                for kind in ("kopf", "watch"):
                    self.floors.append(self._floor(kind, ns, gen, created))
        finally:
            gen.stop()
            if op is not None:
                op.stop()
            self.meter.pids.pop("operator", None)

    def _floor(self, kind: str, ns: str, gen: LoadGenerator, leases: int) -> dict[str, Any]:
        """CPU per renewal of a stand-in that only watches the same JobLeases.

        ``kopf``: Kopf with the operator's settings and one empty
        ``@kopf.on.event`` handler for JobLeases (Kopf's own per-event cost).
        ``watch``: the official client's watch in a loop, remembering each
        lease's generation (what any watch-based design must pay).
        """
        gen.pause()
        script = self.workdir / f"floor_{kind}.py"
        lag_file = self.workdir / "floor_watch_lags.json"
        script.write_text(KOPF_FLOOR if kind == "kopf" else WATCH_FLOOR)
        if kind == "kopf":
            cmd = [str(Path(sys.prefix) / "bin" / "kopf"), "run", "--standalone", "-q"]
            cmd += ["-n", ns, str(script)]
        else:
            cmd = [sys.executable, str(script), str(self.kubeconfig), ns, str(lag_file)]
        log(f"scale: floor {kind} at {leases} leases")
        with (self.workdir / f"floor_{kind}.log").open("ab") as out:
            proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "KUBECONFIG": str(self.kubeconfig)},
            )
        self.meter.pids["floor"] = proc.pid
        try:
            began = time.monotonic()
            time.sleep(3.0)
            deadline = time.monotonic() + 150
            while time.monotonic() < deadline:  # its first LIST and one event per lease
                before = self.meter.snapshot()
                time.sleep(2.0)
                if CpuMeter.cores(before, self.meter.snapshot())["floor"] < 0.03:
                    break
            settled = time.monotonic() - began
            if proc.poll() is not None:
                raise RuntimeError(f"floor {kind} exited with {proc.returncode}")
            gen.resume()
            time.sleep(RENEW_PERIOD)
            gen.pause()
            sent_before = gen.totals()["sent"]
            cpu_before = self.meter.snapshot()
            if kind == "watch":
                proc.send_signal(signal.SIGUSR1)  # its lag window starts
            gen.resume()
            rss_peak = 0.0
            end = time.monotonic() + self.sizes.scale_window
            while time.monotonic() < end:
                rss_peak = max(rss_peak, rss_mb(proc.pid))
                time.sleep(min(1.0, max(0.0, end - time.monotonic())))
            gen.pause()
            cpu_after = self.meter.snapshot()
            sent = gen.totals()["sent"] - sent_before
            gen.resume()
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            self.meter.pids.pop("floor", None)
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

    def _scale_window(
        self, op: OperatorProcess, pid: int, gen: LoadGenerator, tier: int
    ) -> dict[str, Any]:
        """Measure one window, bracketed by pauses of the load generator.

        With the generator paused and drained, the counts at both ends are
        exact: renewals sent, JobLease writes the API server served, and
        renewals the operator observed cover the same renewals.
        """
        window = self.sizes.scale_window

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
            return totals, apiserver_samples(self.admin), scrape

        gen_before, server_before, op_before = quiesce()
        cpu_before = self.meter.snapshot()
        sched_before = sched_seconds(pid)
        gen.recording = True
        gen.resume()
        rss_peak = 0.0
        end = time.monotonic() + window
        while time.monotonic() < end:
            rss_peak = max(rss_peak, rss_mb(pid))
            time.sleep(min(1.0, max(0.0, end - time.monotonic())))
        gen.pause()
        cpu_after = self.meter.snapshot()
        gen.recording = False
        gen_after, server_after, op_after = quiesce()
        # The operator's CPU is counted until it has seen the window's last
        # renewal (a backlog it works off after the window is its cost too).
        op_cpu = (cpu_ticks(_read(f"/proc/{pid}/stat")) - cpu_before.ticks["operator"]) / CLK_TCK
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
        run = sched_after[0] - sched_before[0]
        return {
            "leases": tier,
            "seconds": seconds,
            "op_cpu_per_event": op_cpu / observed if observed else math.nan,
            "op_wait_per_run": (sched_after[1] - sched_before[1]) / run if run else math.nan,
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
            "reclaims": counter_delta(
                op_before.samples, op_after.samples, "leasehold_reclaims_total"
            ),
        }


class LoadGenerator:
    """Renews every lease it is given once per period, spread evenly, from threads.

    Each thread owns every ``threads``-th lease and walks through its share
    once per period, one renewal per slot (slots of different threads
    interleave). A thread that falls behind renews as fast as it can, so the
    achieved rate shows what the machine allowed.

    Args:
        kubeconfig: the cluster's kubeconfig.
        namespace: the leases' namespace.
        period: seconds between two renewals of one lease.
        threads: renewing threads, each with its own ApiClient.
    """

    def __init__(self, kubeconfig: Path, namespace: str, period: float, threads: int) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.period = period
        self.threads = threads
        self.recording = False
        self._shares: list[list[str]] = [[] for _ in range(threads)]
        self._added = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._counts = [Counter[str]() for _ in range(threads)]
        self._latencies: list[list[float]] = [[] for _ in range(threads)]
        self._late: list[list[float]] = [[] for _ in range(threads)]
        self._threads: list[threading.Thread] = []
        self._go = threading.Event()
        self._go.set()
        self._busy = [False] * threads

    def add(self, name: str) -> None:
        """Start renewing a lease (held by ``g-<name>`` under token 1).

        Args:
            name: the lease's name.
        """
        with self._lock:
            self._shares[self._added % self.threads].append(name)
            self._added += 1

    def start(self) -> None:
        """Start the threads."""
        for t in range(self.threads):
            thread = threading.Thread(target=self._run, args=(t,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Stop the threads."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)

    def pause(self) -> None:
        """Stop sending, and wait until no renewal is in flight."""
        self._go.clear()
        deadline = time.monotonic() + 60
        while any(self._busy) and time.monotonic() < deadline:
            time.sleep(0.005)

    def resume(self) -> None:
        """Send again, on a fresh schedule from now (no catch-up burst)."""
        self._go.set()

    def totals(self) -> Counter[str]:
        """Renewals ``sent``, ``accepted``, ``rejected`` and ``errors`` so far.

        Returns:
            The counts.
        """
        total: Counter[str] = Counter()
        for c in self._counts:
            total.update(dict(c))
        return total

    def take_latencies(self) -> tuple[list[float], list[float]]:
        """Figures recorded while ``recording`` was on; clears them.

        Returns:
            ``(latencies, lateness)``: seconds per renewal, and seconds each
            renewal started after its slot (the generator falling behind).
        """
        out = [x for lat in self._latencies for x in lat]
        late = [x for lat in self._late for x in lat]
        for lat in (*self._latencies, *self._late):
            lat.clear()
        return out, late

    def _run(self, t: int) -> None:
        api = new_client(self.kubeconfig)
        store = LeaseStore(api)
        counts, latencies, late = self._counts[t], self._latencies[t], self._late[t]
        tokens: dict[str, int] = {}
        cycle = time.monotonic()
        while not self._stop.is_set():
            with self._lock:
                mine = list(self._shares[t])
            if not mine or not self._go.is_set():
                self._stop.wait(0.05)
                cycle = time.monotonic()  # after a pause, a fresh schedule from now
                continue
            offsets = renewal_offsets(len(mine), self.period, phase=t / self.threads)
            paused = False
            for name, offset in zip(mine, offsets, strict=True):
                delay = cycle + offset - time.monotonic()
                if delay > 0 and self._stop.wait(delay):
                    break
                self._busy[t] = True
                if not self._go.is_set():
                    self._busy[t] = False
                    paused = True
                    break
                t0 = time.perf_counter()
                if self.recording:
                    late.append(max(0.0, time.monotonic() - (cycle + offset)))
                counts["sent"] += 1
                try:
                    result = store.renew(self.namespace, name, f"g-{name}", tokens.get(name, 1))
                    if self.recording:
                        latencies.append(time.perf_counter() - t0)
                    if isinstance(result, Accepted):
                        counts["accepted"] += 1
                    else:
                        # Reclaimed by the operator (this generator fell more than
                        # a lease duration behind): claim it again and go on.
                        counts["rejected"] += 1
                        again = store.claim(self.namespace, name, f"g-{name}")
                        if isinstance(again, Accepted):
                            tokens[name] = again.token
                            counts["reclaimed"] += 1
                except StoreError:
                    counts["errors"] += 1
                finally:
                    self._busy[t] = False
            if not paused:
                # Slots are absolute: a thread that fell behind catches up (as
                # fast as it can) rather than dropping renewals.
                cycle += self.period
        api.close()


def profile(pid: int, seconds: float, workdir: Path) -> dict[str, Any]:
    """Sample a process with py-spy and return its top frames.

    Args:
        pid: the process.
        seconds: how long to sample.
        workdir: where the raw profile goes.

    Returns:
        ``{"self": [(frame, share)], "inclusive": [...], "path": ...}``, or
        ``{"error": ...}`` when py-spy is missing or fails.
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
    groups = {name: stack_share(text, needle) for name, needle in PROFILE_GROUPS.items()}
    return {
        "self": own,
        "inclusive": incl[:25],
        "groups": groups,
        "path": str(keep.relative_to(REPO)),
    }


KOPF_FLOOR: Final = '''"""Kopf with the operator's settings and an empty JobLease event handler."""
import logging

import kopf

PREFIX = "leasehold.dev"


@kopf.on.startup()
async def configure(settings, **_):
    settings.persistence.finalizer = f"{PREFIX}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=PREFIX, key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330


@kopf.on.event("leasehold.dev", "v1alpha1", "jobleases")
async def job_lease_event(**_):
    pass
'''
"""Stand-in for the operator's floor: Kopf's own per-event cost (``kopf run`` this)."""

WATCH_FLOOR: Final = '''"""The official client's watch on JobLeases; a dict update per event.

Also the watch lag (renewTime to this process seeing the event), as the
operator measures it: SIGUSR1 starts a window, SIGTERM writes the window's
lags (seconds, JSON) to argv[3] and exits.
"""
import json
import signal
import sys
from datetime import datetime, timezone

from kubernetes import client, config, watch

api = config.new_client_from_config(config_file=sys.argv[1])
custom = client.CustomObjectsApi(api)
seen = {}
lags = []
recording = [False]


def start(*_):
    lags.clear()
    recording[0] = True


def finish(*_):
    with open(sys.argv[3], "w") as out:
        json.dump(lags, out)
    sys.exit(0)


signal.signal(signal.SIGUSR1, start)
signal.signal(signal.SIGTERM, finish)
rv = None
while True:
    extra = {"resource_version": rv} if rv else {}
    stream = watch.Watch()
    for event in stream.stream(
        custom.list_namespaced_custom_object,
        "leasehold.dev", "v1alpha1", sys.argv[2], "jobleases",
        timeout_seconds=300, **extra,
    ):
        obj = event["object"]
        meta = obj["metadata"]
        seen[meta["uid"]] = (meta.get("generation"), obj["spec"].get("holderIdentity"))
        rv = meta["resourceVersion"]
        renewed = obj["spec"].get("renewTime")
        if recording[0] and renewed and event["type"] == "MODIFIED":
            written = datetime.fromisoformat(renewed.replace("Z", "+00:00"))
            lags.append((datetime.now(timezone.utc) - written).total_seconds())
'''
"""Stand-in for a Kopf-free lease watch: the client's watch and a dict update per event."""

PROFILE_GROUPS: Final = {
    "lease watch thread (ListWatch: read, parse, hand over)": (
        "_watch_from (leasehold/watching.py"
    ),
    "lease events on the loop (Runtime.on_lease_event)": "on_lease_event (leasehold/controller.py",
    "Kopf per-object event worker (queueing.worker; LeasedJobs only)": (
        "worker (kopf/_core/reactor/queueing.py"
    ),
    "Kopf watch stream (read, parse, dispatch)": "watcher (kopf/_core/reactor/queueing.py",
    "reconcile threads (JobService.reconcile)": "JobService.reconcile (leasehold/service.py",
    "expiry watch (ExpiryWatch.run)": "ExpiryWatch.run (leasehold/controller.py",
    "event loop idle (selector wait)": "select (selectors.py",
    "prometheus metrics server": "prometheus_client",
}
"""Named parts of the operator's profile: label -> a frame that marks them."""


# --------------------------------------------------------------------------
# Report


def machine_facts(bench: Bench | None) -> dict[str, str]:
    """Cores, memory, CPU model, kernel and versions.

    Args:
        bench: the run (for the API server's version), if it started.

    Returns:
        fact -> value.
    """
    meminfo = _read("/proc/meminfo")
    mem_kb = next(
        (int(line.split()[1]) for line in meminfo.splitlines() if line.startswith("MemTotal:")),
        0,
    )
    cpuinfo = _read("/proc/cpuinfo")
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
    if bench is not None:
        info = client.VersionApi(bench.admin).get_code()
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


def paired_table(paired: dict[int, tuple[list[float], list[float]]]) -> str:
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


def paired_claim_table(paired: dict[int, tuple[list[float], list[float]]]) -> str:
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
    paired: dict[int, tuple[list[float], list[float]]],
    paired_claim: dict[int, tuple[list[float], list[float]]],
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


def report(bench: Bench, facts: dict[str, str], quick: bool, started: float) -> str:
    """The whole report as Markdown.

    Args:
        bench: the run.
        facts: machine facts.
        quick: whether this was a ``--quick`` run.
        started: monotonic time the run started.

    Returns:
        The Markdown text.
    """
    parts = [
        "# leasehold benchmark results",
        "",
        f"Run {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}"
        f" ({'--quick' if quick else 'full'}), {time.monotonic() - started:.0f} s in total,"
        " one fresh local control plane (`hack/localcluster`). Written by `bench/bench.py`;"
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
            [[label, *(f"{x:.2f}" for x in la)] for label, la in bench.loads],
        ),
        "",
    ]
    if bench.ops:
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
            ops_table(bench.ops),
            "",
            "Renew latency against the raw CAS write, with each client alternating the two"
            " (PUT on one JobLease, renew on another), so both see the same moment's load:",
            "",
            paired_table(bench.paired),
            "",
            "Token-known claim against the raw CAS write, paired the same way (each client"
            " alternates PUT on its CAS object and a claim of a fresh lease). Segment"
            " throughputs above are measured one after another and move with the shared"
            " machine's load (the raw JSON patch row, the same kind of request as a renew,"
            " varies by tens of percent against the PUT between runs); the paired ratio is"
            " the fair one:",
            "",
            paired_claim_table(bench.paired_claim),
            "",
            "Targets, judged on the paired runs (segment ratios in brackets). The claim"
            " target (uncontended claim throughput >= 0.8x raw) is judged on the"
            " token-known claim: the raw CAS baseline also writes with a resourceVersion it"
            " already knows, without a read. The cold claim is shown next to it:",
            "",
            *ops_targets(bench.ops, bench.paired, bench.paired_claim),
            "",
        ]
    if bench.contention:
        parts += [
            "## Contention: claimers racing for one lease",
            "",
            "Each round, every claimer (a thread with its own warmed ApiClient) calls"
            " `LeaseStore.claim` on the same fresh lease at once (a barrier). Settled: from"
            " the barrier to the last claimer's answer.",
            "",
            contention_table(bench.contention),
            "",
        ]
    if bench.reclaim:
        parts += [
            "## Reclaim latency",
            "",
            "Pull-mode LeasedJobs; each lease claimed once and never renewed. Latency: from"
            " expiry (claim answered + leaseDurationSeconds) to the reclaim seen through a"
            " watch. The operator's margin is part of the figure by design. *spread*: claims"
            " evenly over the window; *burst*: all at once from 8 threads.",
            "",
            reclaim_table(bench.reclaim),
            "",
        ]
    if bench.scale:
        parts += [
            "## Operator scale",
            "",
            f"Bare JobLeases created held (duration 60 s) in one namespace; the load generator"
            f" renews each every {RENEW_PERIOD:.0f} s (`LeaseStore.renew`, threads with their"
            " own ApiClients, slots spread evenly) in the same process as the benchmark. Each"
            f" tier is measured over {bench.sizes.scale_window:.0f} s after one full period at"
            " that size. Watch lag: the operator's `leasehold_watch_lag_seconds` (renewTime"
            " to the operator's observation), buckets differenced across the window."
            " API writes per renewal: the API server's JobLease writes in the window"
            " / renewals sent.",
            "",
            scale_table(bench.scale),
            "",
        ]
    if bench.floors and bench.scale:
        parts += [
            "## Operator vs its floors (same leases, same load generator)",
            "",
            "After the last tier the operator is stopped and two stand-ins watch the same"
            " JobLeases under the same renewals: *Kopf alone* (`kopf run` with the"
            " operator's settings and one empty `@kopf.on.event` handler for JobLeases) and"
            " *plain watch* (the official client's watch in a loop, one dict update per"
            " event). Their CPU per renewal is what Kopf itself costs, and what any"
            " watch-based design must pay.",
            "",
            floors_table(bench.scale[-1], bench.floors),
            "",
        ]
    if bench.profile:
        parts += ["## Operator profile (py-spy, after the last tier, load still on)", ""]
        if "error" in bench.profile:
            parts += [bench.profile["error"], ""]
        else:
            parts += [
                f"Raw collapsed stacks: `{bench.profile['path']}`. Shares are of all samples"
                " (py-spy, 100 Hz, threads holding or waiting for the CPU; frames merged by"
                " function).",
                "",
                markdown_table(
                    ["part of the operator", "share of samples"],
                    [[k, f"{v * 100:.1f}%"] for k, v in bench.profile["groups"].items()],
                ),
                "",
                markdown_table(
                    ["self time share", "frame"],
                    [[f"{s * 100:.1f}%", f"`{f}`"] for f, s in bench.profile["self"]],
                ),
                "",
                markdown_table(
                    ["inclusive share", "frame"],
                    [[f"{s * 100:.1f}%", f"`{f}`"] for f, s in bench.profile["inclusive"]],
                ),
                "",
            ]
    if bench.notes:
        parts += ["## Notes", "", *(f"- {n}" for n in bench.notes), ""]
    return "\n".join(parts)


@contextlib.contextmanager
def _cluster(workdir: Path) -> Iterator[LocalCluster]:
    cluster = LocalCluster(workdir / "cluster", stop_with_parent=True)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


PARTS: Final = ("ops", "contention", "reclaim", "scale")


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # run the finally blocks: stop operator and cluster


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark, print the tables, write ``bench/results.md``.

    Args:
        argv: command-line arguments (default: ``sys.argv[1:]``).

    Returns:
        The exit code.
    """
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (about 3 minutes)")
    parser.add_argument(
        "--only", default=",".join(PARTS), help=f"comma-separated parts of {','.join(PARTS)}"
    )
    parser.add_argument("--output", type=Path, default=REPO / "bench" / "results.md")
    parser.add_argument("--tiers", help="scale tiers, e.g. 1000,5000 (overrides the size)")
    parser.add_argument("--threads", type=int, help="load generator threads")
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
        with _cluster(work) as cluster:
            bench = Bench(cluster, work, sizes)
            bench.loads.append(("before the run", load_before))
            bench.setup()
            facts = machine_facts(bench)
            for part in PARTS:
                if part in parts:
                    bench.note_load(f"before {part}")
                    getattr(bench, f"run_{part}")()
            bench.note_load("after the run")
    text = report(bench, facts, args.quick, started)
    print(text)
    args.output.write_text(text + "\n")
    log(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
