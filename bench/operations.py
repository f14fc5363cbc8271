"""Lease operations against a raw compare-and-swap baseline, at 1, 8 and 32 clients.

Why this module exists: a lease operation is worth its cost only if it is
close to the cheapest write the API server offers on the same object. The
baseline (GET once, then PUT with the last ``resourceVersion``) and the
:class:`~leasehold.lease.store.LeaseStore` operations run in segments,
interleaved round by round (the order reversed every other round), so
background load hits both alike; the ratio targets are also measured
*paired* (each client alternates a PUT and the operation), so both series
come from the same moments.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, cast

from bench.harness import (
    PLURAL,
    CpuMeter,
    G,
    Harness,
    V,
    Worker,
    apiserver_samples,
    create_objects,
    jobleases_requests,
    lease_body,
    log,
    new_worker,
    now,
)
from bench.stats import Summary, summarize
from leasehold.lease.errors import StoreError
from leasehold.lease.protocol import Outcome
from leasehold.lease.store import Accepted, StoredLease, format_time, to_stored

LEVELS: Final = (1, 8, 32)
OPS: Final = ("baseline", "raw-patch", "renew", "claim-known", "claim", "complete")
"""Measured operations: two raw baselines, then the LeaseStore's.

``claim-known`` is ``LeaseStore.claim(..., observed=lease)`` with the lease
as created (the caller knows its token: one PATCH); ``claim`` is the cold
claim that reads first (GET + PATCH).
"""

Op = Callable[[Worker, int], bool]
"""One operation: (worker, its k-th call) -> succeeded."""
Paired = dict[int, tuple[list[float], list[float]]]
"""clients -> (raw PUT latencies, the operation's latencies), alternated by each client."""


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
        """Mean cores used by process ``name`` over the segments (time-weighted).

        ``name`` is one of ``bench``, ``kube-apiserver``, ``etcd``,
        ``machine``, ``other``.
        """
        total = sum(s.elapsed for s in self.segments)
        return sum(s.cpu.get(name, 0.0) * s.elapsed for s in self.segments) / total if total else 0


@dataclass
class OpsResults:
    """What :func:`run` measured.

    Attributes:
        ops: every operation at every level, in segments.
        paired: renew alternated with the raw PUT.
        paired_claim: the token-known claim alternated with the raw PUT.
    """

    ops: list[OpResult] = field(default_factory=list)
    paired: Paired = field(default_factory=dict)
    paired_claim: Paired = field(default_factory=dict)


def segment(h: Harness, workers: Sequence[Worker], per_worker: int, op: Op) -> Segment:
    """Every worker runs ``op`` ``per_worker`` times from one barrier; the figures."""
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
    server_before = apiserver_samples(h.admin)
    cpu_before = h.meter.snapshot()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = max(ends) - start
    cpu_after = h.meter.snapshot()
    server_after = apiserver_samples(h.admin)
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


def paired(
    workers: Sequence[Worker], per_worker: int, first: Op, second: Op
) -> tuple[list[float], list[float]]:
    """Each client alternates two operations: ``(first's latencies, second's)``.

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


def run(h: Harness) -> OpsResults:
    """Baseline CAS writes and lease operations at each concurrency level."""
    ns = h.namespace("ops")
    sizes = h.sizes
    out = OpsResults()
    for clients in LEVELS:
        per_worker = max(1, math.ceil(sizes.ops_per_segment / clients))
        log(f"ops: {clients} clients x {per_worker} ops x {sizes.rounds} rounds")
        workers = [new_worker(h.kubeconfig, i) for i in range(clients)]
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
        took = create_objects(h.kubeconfig, ns, PLURAL, bodies, threads=16)
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

            ops: dict[str, Op] = {
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
                results[op].segments.append(segment(h, workers, per_worker, ops[op]))
            put, patch = paired(workers, max(1, per_worker // 2), baseline, renew)
            out.paired.setdefault(clients, ([], []))
            out.paired[clients][0].extend(put)
            out.paired[clients][1].extend(patch)

            def paired_claim(
                w: Worker, k: int, rnd: int = rnd, known: dict[str, StoredLease] = known
            ) -> bool:
                name = pool_name("pk", rnd, w.index, k)
                result = w.store.claim(ns, name, f"c-{w.index}", observed=known[name])
                return isinstance(result, Accepted)

            put, claimed = paired(workers, per_worker, baseline, paired_claim)
            out.paired_claim.setdefault(clients, ([], []))
            out.paired_claim[clients][0].extend(put)
            out.paired_claim[clients][1].extend(claimed)
        out.ops.extend(results.values())
        for w in workers:
            w.api.close()
    return out
