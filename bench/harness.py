"""What every benchmark shares: sizes, clients, test objects, API scrapes, CPU meters.

Why this module exists: the parts of the benchmark (:mod:`bench.operations`,
:mod:`bench.contention`, :mod:`bench.reclaim`, :mod:`bench.scale`) measure
different things the same way: clients with their own connection pool and
a request counter, objects created in parallel, the API server's request
counters scraped around a measurement, CPU read from ``/proc``. One
:class:`Harness` carries the run's cluster, admin client and meters to each.
"""

from __future__ import annotations

import concurrent.futures
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Protocol

import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from bench.stats import (
    Sample,
    counter_delta,
    cpu_ticks,
    flat_to_samples,
    parse_samples,
    rss_bytes,
    schedstat,
    system_cpu_ticks,
)
from leasehold import names
from leasehold.lease.store import LeaseStore, format_time
from operatorproc import OperatorProcess

REPO: Final = Path(__file__).resolve().parents[1]
G: Final = names.GROUP
V: Final = names.VERSION
PLURAL: Final = names.PLURAL_JOB_LEASES
WRITE_VERBS: Final = ("POST", "PUT", "PATCH", "DELETE", "APPLY")
CLK_TCK: Final = os.sysconf("SC_CLK_TCK")


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
    """Print a progress line, with the time, to stderr."""
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# Clients and objects


def new_client(kubeconfig: Path) -> Any:
    """A new ``ApiClient`` (its own connection pool) from the kubeconfig file."""
    return config.new_client_from_config(config_file=str(kubeconfig), persist_config=False)


WATCH_RETRY_SECONDS: Final = 0.5
"""Pause before a broken watch is started again."""


def _resource_version(obj: Any) -> str | None:
    if isinstance(obj, dict):
        return (obj.get("metadata") or {}).get("resourceVersion")
    metadata = getattr(obj, "metadata", None)
    return getattr(metadata, "resource_version", None)


def _items(listed: Any) -> tuple[list[Any], str]:
    if isinstance(listed, dict):
        return list(listed.get("items") or []), str(listed["metadata"]["resourceVersion"])
    return list(listed.items or []), str(listed.metadata.resource_version)


def follow(
    lister: Callable[..., Any], *args: Any, resource_version: str, stop: threading.Event
) -> Iterator[tuple[str, Any]]:
    """Watch ``lister(*args)`` from ``resource_version`` until ``stop`` is set, across streams.

    A stream the API server ends (after ``timeout_seconds``), or a connection
    that breaks (``ProtocolError: Response ended prematurely`` under load),
    is watched again from the last ``resourceVersion`` seen, after
    `WATCH_RETRY_SECONDS`. A ``410 Gone`` (that version compacted away)
    lists again and yields every listed object as ``("LISTED", obj)``: what
    changed meanwhile is seen as its latest state. ``stop`` is checked after
    each event and between streams (a quiet stream ends within 60 s).

    Args:
        lister: A list call of the official client (typed or custom objects).
        args: Its positional arguments (namespace, group, ...).
        resource_version: Where to start (a LIST's ``resourceVersion``).
        stop: Set to end the generator.

    Yields:
        ``(event type, object)``: ``ADDED``, ``MODIFIED``, ``DELETED``, or
        ``LISTED``; the object as the lister returns it (typed or a dict).
    """
    version = resource_version
    while not stop.is_set():
        stream = watch.Watch()
        try:
            for event in stream.stream(lister, *args, resource_version=version, timeout_seconds=60):
                obj = event["object"]
                version = _resource_version(obj) or version
                yield str(event["type"]), obj
                if stop.is_set():
                    stream.stop()
                    return
        except ApiException as exc:
            if exc.status != 410:
                log(f"watch of {getattr(lister, '__name__', lister)} failed ({exc.status}); again")
                time.sleep(WATCH_RETRY_SECONDS)
                continue
            items, version = _items(lister(*args))
            for obj in items:
                yield "LISTED", obj
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            log(f"watch of {getattr(lister, '__name__', lister)} broke ({exc!r}); again")
            time.sleep(WATCH_RETRY_SECONDS)


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
    """A worker (number ``index``) whose every HTTP request is counted by method.

    The count wraps the client's REST layer, the one place every request of
    the official client goes through.
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
    """
    spec: dict[str, Any] = {"jobName": name, "leaseDurationSeconds": duration}
    if holder is not None:
        stamp = format_time(now())
        spec |= {
            "holderIdentity": holder,
            "fencingToken": max(token, 1),
            "acquireTime": stamp,
            "renewTime": stamp,
        }
    else:
        spec["fencingToken"] = token
    return {
        "apiVersion": names.API_VERSION,
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
    """Create custom objects of ``plural`` from ``threads`` clients at once.

    Returns:
        Seconds it took.

    Raises:
        kubernetes.client.ApiException: a create failed (a 5xx after 5 tries).
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


# --------------------------------------------------------------------------
# Scrapes of /metrics


@dataclass(frozen=True)
class Scrape:
    """Samples of one scrape and when it was taken.

    Attributes:
        at: monotonic time, the middle of the scrape.
        samples: the samples.
    """

    at: float
    samples: list[Sample]


def apiserver_samples(api: Any, names: Sequence[str] = ("apiserver_request_total",)) -> Scrape:
    """Scrape the API server's own ``/metrics`` through ``api``, keeping only ``names``.

    The full text is megabytes; parsing only the lines needed keeps the
    scrape short (it runs next to timed clients in this process).
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
    """Scrape the operator's ``/metrics``."""
    t0 = time.monotonic()
    flat = op.metrics()
    return Scrape((t0 + time.monotonic()) / 2, flat_to_samples(flat))


def jobleases_requests(before: Scrape, after: Scrape) -> Counter[str]:
    """JobLease requests the API server served between two scrapes: verb -> count.

    Subresources are included.
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
    """Every request the API server served between two scrapes.

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


def read_proc(path: str) -> str:
    """A ``/proc`` file's text, or ``""`` when the process is gone."""
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

    Processes come and go during a run (operator, floors): ``pids`` (name ->
    pid) is changed in place.
    """

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = dict(pids)

    def snapshot(self) -> CpuSnapshot:
        """Every process's ticks, and the machine's, now."""
        ticks = {}
        for name, pid in self.pids.items():
            stat = read_proc(f"/proc/{pid}/stat")
            ticks[name] = cpu_ticks(stat) if stat else 0
        busy, _ = system_cpu_ticks(read_proc("/proc/stat"))
        return CpuSnapshot(time.monotonic(), ticks, busy)

    @staticmethod
    def cores(before: CpuSnapshot, after: CpuSnapshot) -> dict[str, float]:
        """CPU use between two snapshots, in cores.

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
    """``(run, wait)``: seconds all threads of a process ran, and waited runnable for a CPU.

    Summed over ``/proc/<pid>/task/*/schedstat``.
    """
    run = wait = 0
    for task in Path(f"/proc/{pid}/task").glob("*"):
        r, w = schedstat(read_proc(str(task / "schedstat")))
        run += r
        wait += w
    return run / 1e9, wait / 1e9


def rss_mb(pid: int) -> float:
    """Resident memory (``VmRSS``) of a process, MiB."""
    return rss_bytes(read_proc(f"/proc/{pid}/status")) / 2**20


# --------------------------------------------------------------------------
# The run


class HasPid(Protocol):
    """A running process (``localcluster.Process`` or a pid found on a kind node)."""

    @property
    def pid(self) -> int:
        """Its process id on this machine."""
        ...


class Cluster(Protocol):
    """What a run needs of its cluster: a kubeconfig and its control plane's processes.

    ``localcluster.LocalCluster`` is one; :class:`bench.kind.KindCluster` is
    the other (its processes run in node containers, seen from this host).
    """

    @property
    def kubeconfig(self) -> Path:
        """The cluster's admin kubeconfig file."""
        ...

    @property
    def processes(self) -> Mapping[str, HasPid]:
        """Component name (``kube-apiserver``, ``etcd``, ...) -> its process."""
        ...


@dataclass
class Harness:
    """One run's cluster, admin client, CPU meter, load record and notes.

    Attributes:
        cluster: the started cluster (a local control plane, or kind).
        workdir: scratch folder (operator logs, profiles).
        sizes: how much to measure.
        admin: an admin ApiClient (set-up, scrapes, checks; never timed).
        custom: a CustomObjectsApi on ``admin``.
        meter: CPU of the control plane, this process (``bench``) and the
            process under test.
        loads: (moment, load average 1/5/15 min), in order.
        notes: lines for the report's notes.
    """

    cluster: Cluster
    workdir: Path
    sizes: Sizes
    admin: Any = field(init=False)
    custom: Any = field(init=False)
    meter: CpuMeter = field(init=False)
    loads: list[tuple[str, tuple[float, float, float]]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.admin = new_client(self.kubeconfig)
        self.custom = client.CustomObjectsApi(self.admin)
        pids = {name: p.pid for name, p in self.cluster.processes.items()}
        pids["bench"] = os.getpid()
        self.meter = CpuMeter(pids)

    @property
    def kubeconfig(self) -> Path:
        """The cluster's kubeconfig file."""
        return self.cluster.kubeconfig

    def note_load(self, label: str) -> None:
        """Record the load average now, as the moment ``label`` (e.g. ``before ops``)."""
        self.loads.append((label, os.getloadavg()))

    def namespace(self, name: str) -> str:
        """Create the namespace ``name``; returns the name."""
        client.CoreV1Api(self.admin).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=name))
        )
        return name
