"""The scale test's load: renew every lease once per period, slots spread evenly.

Why this module exists: the operator's cost is per renewal it watches, so
the scale test needs a steady, known renewal rate, and exact counts at
both ends of a window (pause, drain, count, resume).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

from bench.harness import new_client
from bench.stats import renewal_offsets
from leasehold.lease.errors import StoreError
from leasehold.lease.store import Accepted, LeaseStore


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
        """Start renewing lease ``name`` (held by ``g-<name>`` under token 1)."""
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
        """Stop the threads, waiting 30 s at most in all.

        A renewal stuck on a saturated API server is left to end with the
        process (the threads are daemons).
        """
        self._stop.set()
        deadline = time.monotonic() + 30
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))

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
        """Renewals ``sent``, ``answered``, ``accepted``, ``rejected`` and ``errors`` so far."""
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
                    counts["answered"] += 1  # as the API server counts it: once served
                    self._busy[t] = False
            if not paused:
                # Slots are absolute: a thread that fell behind catches up (as
                # fast as it can) rather than dropping renewals.
                cycle += self.period
        api.close()
