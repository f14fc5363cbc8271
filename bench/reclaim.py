"""Reclaim latency: leases claimed once and never renewed, taken back by the operator.

Why this module exists: a crashed holder costs the job the time until the
operator reclaims its lease. The operator runs as a real process
(``testing/operatorproc``, margin 1 s); latency runs from expiry (the claim's
answer + ``leaseDurationSeconds``) to the reclaim seen through a watch, so
the margin is part of the figure by design. *spread*: claims evenly over a
window; *burst*: all at once, so many leases expire together.
"""

from __future__ import annotations

import concurrent.futures
import math
import threading
import time
from typing import Any, cast

from kubernetes import client, watch

from bench.harness import (
    PLURAL,
    CpuMeter,
    G,
    Harness,
    V,
    all_requests,
    apiserver_samples,
    create_objects,
    log,
    new_client,
    operator_samples,
)
from bench.stats import sum_samples, summarize
from leasehold import names as contract
from leasehold.lease.store import Accepted, LeaseStore
from operatorproc import OperatorProcess

MARGIN_SECONDS = 1.0
"""The operator's expiry margin in this benchmark."""


def run(h: Harness) -> list[dict[str, Any]]:
    """Claim ``reclaim_leases`` leases once (spread, then burst) and time their reclaims.

    Returns:
        One row per mode: ``mode``, ``leases``, ``duration``, ``margin``,
        ``lag`` (:class:`~bench.stats.Summary`, seconds), ``missing``,
        ``claim_spread``, ``cpu``, ``operator_requests`` (API requests by
        verb and resource, the benchmark's own claims taken out),
        ``reclaims_per_s``.

    Raises:
        RuntimeError: the operator did not create the leases in 60 s.
        AssertionError: a claim was refused or got an unexpected token.
    """
    ns = h.namespace("reclaim")
    sizes = h.sizes
    n, duration, margin = sizes.reclaim_leases, sizes.reclaim_duration, MARGIN_SECONDS
    rows: list[dict[str, Any]] = []
    op = OperatorProcess(h.kubeconfig, ns, h.workdir / "operator-reclaim.log", margin)
    op.start()
    try:
        jobs = [
            {
                "apiVersion": contract.API_VERSION,
                "kind": "LeasedJob",
                "metadata": {"name": f"r{i}"},
                "spec": {"leaseDurationSeconds": duration, "maxAttempts": 10},
            }
            for i in range(n)
        ]
        create_objects(h.kubeconfig, ns, contract.PLURAL_LEASED_JOBS, jobs)
        deadline = time.monotonic() + 60
        while True:  # the operator creates one JobLease per LeasedJob
            listed = h.custom.list_namespaced_custom_object(G, V, ns, PLURAL)
            items = cast("dict[str, Any]", listed)["items"]
            if len(items) >= n:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the operator created {len(items)} of {n} leases")
            time.sleep(0.2)
        time.sleep(2.0)  # its status writes settle
        store = LeaseStore(new_client(h.kubeconfig))
        names = [f"r{i}" for i in range(n)]
        for mode, token in (("spread", 1), ("burst", 2)):
            h.note_load(f"reclaim {mode}")
            log(f"reclaim: {n} leases, {mode}")
            seen: dict[str, float] = {}
            claimed: dict[str, float] = {}
            stop = threading.Event()
            ready = threading.Event()
            watcher = threading.Thread(
                target=watch_reclaims,
                args=(h, ns, token, seen, n, stop, ready),
                daemon=True,
            )
            watcher.start()
            ready.wait(10)
            before = h.meter.snapshot()
            server_before = apiserver_samples(h.admin)

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
            cpu = CpuMeter.cores(before, h.meter.snapshot())
            time.sleep(1.0)  # the operator's follow-up reconciles
            every = all_requests(server_before, apiserver_samples(h.admin))
            # The claims are ours (GET + PATCH each); the rest is the operator's.
            every.subtract({"GET jobleases": n, "PATCH jobleases": n})
            lags = [seen[x] - (claimed[x] + duration) for x in names if x in seen]
            first_expiry = min(claimed.values()) + duration
            rows.append(
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
        h.notes.append(
            "reclaim: operator counted "
            f"{sum_samples(metrics, 'leasehold_reclaims_total'):.0f}"
            f" reclaims for {2 * n} expiries"
        )
    finally:
        op.stop()
    return rows


def watch_reclaims(
    h: Harness,
    ns: str,
    token: int,
    seen: dict[str, float],
    n: int,
    stop: threading.Event,
    ready: threading.Event,
) -> None:
    """Note in ``seen`` (name -> monotonic time) each lease seen unheld under ``token``.

    Sets ``ready`` once the watch's starting point is listed; returns when
    ``n`` leases were seen or ``stop`` is set (after the next event).
    """
    custom = client.CustomObjectsApi(new_client(h.kubeconfig))
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
