"""Hand-over: leasehold's lease against client-go's leader election, holder killed or frozen.

Why this module exists: a user who knows client-go's leader election asks
how fast a leasehold lease changes hands when its holder dies. Both run on
the same API server with the same lease duration (10 s; client-go's renew
deadline and retry period at its recommended ratios, 2/3 and 1/5 of it).
client-go: candidates of ``hack/leaderelect`` (built from Go modules) on a
coordination.k8s.io Lease. leasehold: a pull-mode LeasedJob's JobLease, the
operator (margin 1 s) and candidates of :mod:`bench.handover_candidate`.
The holder is SIGKILLed or SIGSTOPped (then SIGCONTed once the lease moved).
One watch on each lease times both the same way: from the last event with
the old holder (its last successful renewal) to the first event with a new
one (the new holder's first successful write). The watch also counts the
writes per minute that keep a held lease alive.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from kubernetes import client, watch

from bench.harness import REPO, G, Harness, V, log, new_client
from bench.stats import Summary, markdown_table, summarize
from leasehold import names
from operatorproc import OperatorProcess

LEASE_SECONDS: Final = 10
"""Lease duration of both."""
CANDIDATES: Final = 3
"""Candidates campaigning at any time, per system."""
MARGIN_SECONDS: Final = 1.0
"""The operator's expiry margin."""
LEASE_NAME: Final = "bench-leader"
NODE_LEASE_WRITES_PER_MINUTE: Final = 6.0
"""A kubelet renews its node Lease every 10 s (25% of ``nodeLeaseDurationSeconds``, default 40)."""


@dataclass
class LeaseWatch:
    """Events of one lease seen by a watch: (monotonic time, holder identity or "")."""

    events: list[tuple[float, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def holder(self) -> str:
        """The holder of the latest event, or ""."""
        with self.lock:
            return self.events[-1][1] if self.events else ""

    def since(self, t: float) -> list[tuple[float, str]]:
        """Events at or after ``t``."""
        with self.lock:
            return [e for e in self.events if e[0] >= t]


def watch_lease(
    lister: Callable[..., Any],
    args: tuple[Any, ...],
    holder_of: Callable[[Any], str],
    into: LeaseWatch,
    stop: threading.Event,
) -> None:
    """Append every write of the watched lease to ``into`` until ``stop`` is set.

    Each resourceVersion counts once: the watch restarts every 30 s with a
    fresh list, whose ADDED event is the last write again, not a new one.
    """
    versions: set[str] = set()
    while not stop.is_set():
        stream = watch.Watch()
        for event in stream.stream(lister, *args, timeout_seconds=30):
            seen = time.monotonic()
            obj = event["object"]
            meta = obj.metadata if hasattr(obj, "metadata") else obj.get("metadata", {})
            version = str(
                meta.resource_version
                if hasattr(meta, "resource_version")
                else meta.get("resourceVersion")
            )
            if version not in versions:  # a re-list after the timeout repeats the last write
                versions.add(version)
                with into.lock:
                    into.events.append((seen, holder_of(obj)))
            if stop.is_set():
                stream.stop()
                break


@dataclass
class System:
    """One system under test: how to start a candidate, and its lease's events."""

    name: str
    start: Callable[[str], subprocess.Popen[bytes]]
    events: LeaseWatch
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    serial: int = 0

    def top_up(self) -> None:
        """Start candidates until ``CANDIDATES`` run."""
        for ident, proc in list(self.procs.items()):
            if proc.poll() is not None:
                del self.procs[ident]
        while len(self.procs) < CANDIDATES:
            self.serial += 1
            ident = f"{self.name}-{self.serial}"
            self.procs[ident] = self.start(ident)

    def stop_all(self) -> None:
        """SIGKILL every candidate (after SIGCONT, in case it is frozen)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait()


def one_handover(system: System, how: int) -> float | None:
    """Wait for a steady holder, hit it with ``how``; returns the hand-over in seconds.

    None when the lease did not move within 60 s.
    """
    system.top_up()
    deadline = time.monotonic() + 60
    while True:  # a holder that has renewed at least twice since it took over
        holder = system.events.holder()
        if holder and holder in system.procs:
            recent = system.events.since(time.monotonic() - 2.5 * LEASE_SECONDS)
            mine = [e for e in recent if e[1] == holder]
            if len(mine) >= 3:
                break
        if time.monotonic() > deadline:
            return None
        time.sleep(0.2)
    hit = time.monotonic()
    proc = system.procs[holder]
    proc.send_signal(how)
    deadline = hit + 60
    moved: tuple[float, str] | None = None
    while moved is None and time.monotonic() < deadline:
        time.sleep(0.1)
        moved = next((e for e in system.events.since(hit) if e[1] and e[1] != holder), None)
    if how == signal.SIGSTOP:
        proc.send_signal(signal.SIGCONT)
        try:
            proc.wait(timeout=LEASE_SECONDS)  # it sees the loss and exits
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    else:
        proc.wait()
    if moved is None:
        return None
    with system.events.lock:
        last = max(t for t, who in system.events.events if who == holder and t <= moved[0])
    return moved[0] - last


def keepalive_writes_per_minute(events: LeaseWatch) -> float:
    """Writes per minute that keep a held lease alive: 60 / the median gap between renewals.

    The median of the gaps between consecutive writes of the same holder:
    a reign's first gap (client-go renews right after it acquires) and its
    short length (the holder is hit after three writes) would bias a
    writes-over-span rate.
    """
    with events.lock:
        gaps: list[float] = []
        previous: tuple[float, str] | None = None
        for t, who in events.events:
            if who and previous is not None and previous[1] == who:
                gaps.append(t - previous[0])
            previous = (t, who)
    return 60 / statistics.median(gaps) if gaps else float("nan")


def leaderelect_binary() -> str:
    """Build (or find in the cache) ``hack/leaderelect``; returns the binary's path."""
    built = subprocess.run(
        [str(REPO / "hack" / "leaderelect" / "build.sh")],
        check=True,
        capture_output=True,
        text=True,
    )
    return built.stdout.strip()


def run(h: Harness, each: int) -> dict[str, Any]:
    """Hand the lease over ``each`` times by SIGKILL and ``each`` times by SIGSTOP, per system.

    Returns:
        ``rows``: one per (system, signal): ``system``, ``signal``,
        ``handover`` (:class:`~bench.stats.Summary`, seconds), ``missed``;
        ``writes_per_minute``: system -> writes keeping the lease alive.

    Raises:
        subprocess.CalledProcessError: the Go candidate did not build.
    """
    ns = h.namespace("handover")
    binary = leaderelect_binary()
    env = {**os.environ, "KUBECONFIG": str(h.kubeconfig)}
    logs = h.workdir / "handover"
    logs.mkdir(exist_ok=True)

    def go_candidate(ident: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                binary,
                f"--kubeconfig={h.kubeconfig}",
                f"--namespace={ns}",
                f"--name={LEASE_NAME}",
                f"--id={ident}",
                f"--lease-duration={LEASE_SECONDS}s",
            ],
            stdout=(logs / f"{ident}.log").open("ab"),
            stderr=subprocess.STDOUT,
        )

    def py_candidate(ident: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "bench.handover_candidate", ns, LEASE_NAME, ident],
            stdout=(logs / f"{ident}.log").open("ab"),
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
        )

    stop = threading.Event()
    coord = client.CoordinationV1Api(new_client(h.kubeconfig))
    custom = client.CustomObjectsApi(new_client(h.kubeconfig))
    go_events, py_events = LeaseWatch(), LeaseWatch()
    threading.Thread(
        target=watch_lease,
        args=(
            coord.list_namespaced_lease,
            (ns,),
            lambda o: (o.spec.holder_identity or "") if o.spec else "",
            go_events,
            stop,
        ),
        kwargs={},
        daemon=True,
    ).start()
    op = OperatorProcess(
        h.kubeconfig,
        ns,
        h.workdir / "operator-handover.log",
        MARGIN_SECONDS,
        start_timeout_seconds=120,
    )
    systems = [
        System("leasehold", py_candidate, py_events),
        System("client-go", go_candidate, go_events),
    ]
    rows: list[dict[str, Any]] = []
    try:  # a start that times out leaves the process running: stop it in finally
        op.start()
        custom.create_namespaced_custom_object(
            G,
            V,
            ns,
            names.PLURAL_LEASED_JOBS,
            {
                "apiVersion": names.API_VERSION,
                "kind": "LeasedJob",
                "metadata": {"name": LEASE_NAME},
                "spec": {"leaseDurationSeconds": LEASE_SECONDS, "maxAttempts": 100},
            },
        )
        threading.Thread(
            target=watch_lease,
            args=(
                custom.list_namespaced_custom_object,
                (G, V, ns, names.PLURAL_JOB_LEASES),
                lambda o: str(o.get("spec", {}).get("holderIdentity") or ""),
                py_events,
                stop,
            ),
            kwargs={},
            daemon=True,
        ).start()
        for system in systems:
            for how in (signal.SIGKILL, signal.SIGSTOP):
                times: list[float] = []
                missed = 0
                for i in range(each):
                    h.note_load(f"handover {system.name} {how.name} {i + 1}")
                    took = one_handover(system, how)
                    log(f"handover: {system.name} {how.name} {i + 1}/{each}: {took}")
                    if took is None:
                        missed += 1
                    else:
                        times.append(took)
                rows.append(
                    {
                        "system": system.name,
                        "signal": how.name,
                        "handover": summarize(times),
                        "times": times,
                        "missed": missed,
                    }
                )
            system.stop_all()
    finally:
        stop.set()
        for system in systems:
            system.stop_all()
        op.stop()
    return {
        "rows": rows,
        "writes_per_minute": {s.name: keepalive_writes_per_minute(s.events) for s in systems},
    }


def section(r: dict[str, Any]) -> list[str]:
    """The Markdown lines of the hand-over section."""
    rows = r["rows"]
    table = []
    for row in rows:
        s: Summary = row["handover"]
        table.append(
            [
                row["system"],
                row["signal"],
                str(s.n),
                str(row["missed"]),
                f"{s.p50:.2f}",
                f"{s.p99:.2f}",
                f"{s.max:.2f}",
            ]
        )
    wpm = r["writes_per_minute"]
    lines = [
        "## Hand-over vs client-go leader election",
        "",
        f"Lease duration {LEASE_SECONDS} s for both. client-go: `hack/leaderelect`"
        " (k8s.io/client-go v0.34.1 `tools/leaderelection`, `LeaseLock`), renew deadline"
        f" {LEASE_SECONDS * 2 / 3:.2f} s, retry period {LEASE_SECONDS / 5:g} s (its"
        " recommended 10 / ~6.6 / 2 ratios). leasehold: a pull-mode LeasedJob's JobLease,"
        f" the operator (margin {MARGIN_SECONDS:g} s) and `bench/handover_candidate.py`"
        " (worker SDK `pull.claim`, renewing every duration/3). "
        f"{CANDIDATES} candidates each; the holder is SIGKILLed or SIGSTOPped (SIGCONT once"
        " the lease moved). Hand-over = from the last watch event with the old holder (its"
        " last successful renewal) to the first with a new holder (the new holder's first"
        " successful write), one watch per lease, same observer for both.",
        "",
        markdown_table(
            ["system", "signal", "hand-overs", "missed", "p50 s", "p99 s", "max s"], table
        ),
        "",
        markdown_table(
            ["lease kept alive by", "writes per minute"],
            [[k, f"{v:.1f}"] for k, v in wpm.items()]
            + [
                [
                    "kubelet node Lease (renew every 10 s = 0.25 x nodeLeaseDurationSeconds 40,"
                    " the kubelet default)",
                    f"{NODE_LEASE_WRITES_PER_MINUTE:.1f}",
                ]
            ],
        ),
        "",
    ]
    go = summarize([t for x in rows if x["system"] == "client-go" for t in x["times"]])
    lh = summarize([t for x in rows if x["system"] == "leasehold" for t in x["times"]])
    if go.n and lh.n:
        lines += [
            f"- Target leasehold p99 <= client-go p50 (both signals pooled): {lh.p99:.2f} s vs"
            f" {go.p50:.2f} s: **{'met' if lh.p99 <= go.p50 else 'missed'}**"
            f" (leasehold p50 {lh.p50:.2f} s, client-go p99 {go.p99:.2f} s).",
            "",
        ]
    return lines
