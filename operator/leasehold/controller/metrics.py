"""Prometheus metrics of the operator.

Why this module exists: platform teams watch lease health in Grafana. The
operator already sees every lease change through its watch; this module
turns those observations into metrics (prometheus-client) and serves them
on ``/metrics``. Nothing here writes to the cluster.

Metric names and meanings are documented in the chart's dashboard and in
``docs/metrics.md``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from leasehold.controller.engines.changes import LeaseSignature

REGISTRY: Final = CollectorRegistry(auto_describe=True)
"""The operator's own registry (no process/platform collectors mixed in)."""

LEASES_HELD: Final = Gauge(
    "leasehold_leases_held", "JobLeases currently held by a worker.", registry=REGISTRY
)
CLAIMS: Final = Counter(
    "leasehold_claims",
    "Claims observed (fencing token bumps), by the operator or pull workers.",
    registry=REGISTRY,
)
RENEWALS: Final = Counter(
    "leasehold_renewals_observed",
    "Renewals observed: spec changes of a held lease with the same holder and token.",
    registry=REGISTRY,
)
EXPIRATIONS: Final = Counter(
    "leasehold_expirations",
    "Leases judged expired (no change seen for duration + margin).",
    registry=REGISTRY,
)
RECLAIMS: Final = Counter(
    "leasehold_reclaims", "Expired leases taken back by the operator.", registry=REGISTRY
)
WATCH_LAG: Final = Histogram(
    "leasehold_watch_lag_seconds",
    "Time from a renewal's renewTime (the holder's clock) to the operator seeing it."
    " Clock skew between holder and operator shows up here; expiry never uses it.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    registry=REGISTRY,
)
EVENTS_DROPPED: Final = Counter(
    "leasehold_events_dropped",
    "Kubernetes Events not posted because too many waited to be (logged each).",
    registry=REGISTRY,
)
JOBS: Final = Gauge("leasehold_jobs", "LeasedJobs by phase.", ["phase"], registry=REGISTRY)

PHASES: Final = ("Pending", "Running", "Suspended", "Succeeded", "Failed")


def serve(port: int, address: str = "0.0.0.0") -> None:
    """Serve ``/metrics`` on ``address:port`` in a background thread.

    Args:
        port: TCP port; ``0`` disables the endpoint.
        address: the address to bind.
    """
    if port:
        start_http_server(port, addr=address, registry=REGISTRY)


class JobPhases:
    """Keeps the ``leasehold_jobs{phase}`` gauge equal to the jobs seen."""

    def __init__(self) -> None:
        self._phase: dict[str, str] = {}
        for phase in PHASES:
            JOBS.labels(phase=phase).set(0)

    def observe(self, key: str, phase: str | None, deleted: bool = False) -> None:
        """Note a job's phase (``None``: not yet reported, counted as Pending).

        Args:
            key: the job's ``namespace/name``.
            phase: its ``status.phase``.
            deleted: the job is gone.
        """
        old = self._phase.pop(key, None)
        if old is not None:
            JOBS.labels(phase=old).dec()
        if deleted:
            return
        new = phase or "Pending"
        self._phase[key] = new
        JOBS.labels(phase=new).inc()


def observe_lease_change(
    before: LeaseSignature | None,
    after: LeaseSignature,
    generation_changed: bool,
    renew_time: str | None,
    now: datetime | None = None,
    *,
    created: bool = False,
) -> None:
    """Update the lease metrics for one watch event.

    Args:
        before: the lease as seen last time, or ``None`` at first sight.
        after: the lease now.
        generation_changed: whether the spec changed since the last event.
        renew_time: ``spec.renewTime`` now (RFC 3339), if any.
        now: the current time (injected for tests).
        created: the event is the lease's creation (a watch's ``ADDED``, not
            its first LIST): a lease created held was claimed in its create.
    """
    held_before = before is not None and before.held
    if after.held and not held_before:
        LEASES_HELD.inc()
    elif held_before and not after.held:
        LEASES_HELD.dec()
    # At first sight (no `before`) a held lease is not a claim we saw, unless
    # we saw its create: a job's first lease is created held by its pod.
    if before is not None and after.fencing_token > before.fencing_token:
        CLAIMS.inc(after.fencing_token - before.fencing_token)
    elif before is None and created and after.held:
        CLAIMS.inc()
    if (
        before is not None
        and generation_changed
        and after.held
        and before.holder_identity == after.holder_identity
        and before.fencing_token == after.fencing_token
    ):
        RENEWALS.inc()
        if renew_time:
            seen = now or datetime.now(UTC)
            written = datetime.fromisoformat(renew_time.replace("Z", "+00:00"))
            WATCH_LAG.observe(max(0.0, (seen - written).total_seconds()))


def lease_forgotten(last: LeaseSignature | None) -> None:
    """A lease was deleted: drop it from the held gauge (``last``: as last seen)."""
    if last is not None and last.held:
        LEASES_HELD.dec()
