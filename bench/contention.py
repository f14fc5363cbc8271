"""Contention: many claimers race for one fresh lease at once, round after round.

Why this module exists: mutual exclusion is the lease's whole point; under a
race exactly one claimer may win each round and the token may move by
exactly one. It also shows what a race costs the API server (requests per
successful claim) and how long until every claimer has its answer.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from typing import Any, cast

from bench.harness import (
    PLURAL,
    CpuMeter,
    G,
    Harness,
    V,
    Worker,
    create_objects,
    lease_body,
    log,
    new_worker,
)
from bench.stats import summarize
from leasehold.lease.errors import StoreError
from leasehold.lease.store import Accepted, Rejected


def run(h: Harness) -> dict[str, Any]:
    """Race ``contention_claimers`` claimers for ``contention_rounds`` fresh leases.

    Returns:
        ``claimers``, ``rounds``, ``winners`` and ``tokens`` (per round),
        ``settle`` and ``win_latency`` (:class:`~bench.stats.Summary`),
        ``requests`` (by method), ``requests_per_success``, ``failures``,
        ``cpu`` (mean cores by process).

    Raises:
        AssertionError: a claim ended neither accepted nor rejected.
    """
    ns = h.namespace("contention")
    n, rounds = h.sizes.contention_claimers, h.sizes.contention_rounds
    log(f"contention: {n} claimers x {rounds} rounds")
    workers = [new_worker(h.kubeconfig, i) for i in range(n)]
    names = [f"race-{r}" for r in range(rounds)]
    create_objects(h.kubeconfig, ns, PLURAL, [lease_body(x) for x in names])
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

        def race(
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

        threads = [threading.Thread(target=race, args=(w,), daemon=True) for w in workers]
        for t in threads:
            t.start()
        before = h.meter.snapshot()
        barrier.wait()
        start = time.perf_counter()
        for t in threads:
            t.join()
        cpu.append(CpuMeter.cores(before, h.meter.snapshot()))
        settle.append(max(t for t, _ in outcomes) - start)
        wins = [t for t, ok in outcomes if ok]
        winners.append(len(wins))
        first_win.extend(t - start for t in wins)
        failures += sum(1 for t, ok in outcomes if t == 0.0)
        for w in workers:
            requests.update(w.counts)
        lease = h.custom.get_namespaced_custom_object(G, V, ns, PLURAL, name)
        tokens.append(int(cast("dict[str, Any]", lease)["spec"]["fencingToken"]))
    for w in workers:
        w.api.close()
    successes = sum(winners)
    return {
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
