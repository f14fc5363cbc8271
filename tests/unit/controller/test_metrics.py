"""The operator's metrics follow the lease changes it observes."""

from __future__ import annotations

from datetime import UTC, datetime

from leasehold.controller import metrics
from leasehold.controller.engines.changes import LeaseSignature


def value(name: str, labels: dict[str, str] | None = None) -> float:
    sample = metrics.REGISTRY.get_sample_value(name, labels or {})
    return 0.0 if sample is None else sample


def sig(holder: str | None, token: int) -> LeaseSignature:
    return LeaseSignature(holder, token, completed=False, max_fencing_token=None)


def test_claim_renew_release_and_delete_move_the_counters() -> None:
    held0, claims0, renewals0 = (
        value("leasehold_leases_held"),
        value("leasehold_claims_total"),
        value("leasehold_renewals_observed_total"),
    )
    lag_count0 = value("leasehold_watch_lag_seconds_count")
    unheld = sig(None, 0)
    held = sig("pod-1", 1)
    metrics.observe_lease_change(None, unheld, True, None)
    metrics.observe_lease_change(unheld, held, True, None)
    assert value("leasehold_leases_held") == held0 + 1
    assert value("leasehold_claims_total") == claims0 + 1
    now = datetime(2026, 1, 1, 0, 0, 1, tzinfo=UTC)
    metrics.observe_lease_change(held, held, True, "2026-01-01T00:00:00.750000Z", now=now)
    assert value("leasehold_renewals_observed_total") == renewals0 + 1
    assert value("leasehold_watch_lag_seconds_count") == lag_count0 + 1
    # A status-only write (no generation change) is not a renewal.
    metrics.observe_lease_change(held, held, False, "2026-01-01T00:00:00.750000Z", now=now)
    assert value("leasehold_renewals_observed_total") == renewals0 + 1
    released = sig(None, 1)
    metrics.observe_lease_change(held, released, True, None)
    assert value("leasehold_leases_held") == held0
    metrics.observe_lease_change(released, sig("pod-2", 2), True, None)
    metrics.lease_forgotten(sig("pod-2", 2))
    assert value("leasehold_leases_held") == held0
    assert value("leasehold_claims_total") == claims0 + 2


def test_first_sight_of_a_held_lease_is_not_a_claim() -> None:
    claims0 = value("leasehold_claims_total")
    held0 = value("leasehold_leases_held")
    metrics.observe_lease_change(None, sig("pod-9", 9), True, None)
    assert value("leasehold_claims_total") == claims0
    assert value("leasehold_leases_held") == held0 + 1
    metrics.lease_forgotten(sig("pod-9", 9))


def test_a_lease_created_held_is_a_claim() -> None:
    """A job's first lease is created held by its pod: its create's event counts the claim."""
    claims0 = value("leasehold_claims_total")
    metrics.observe_lease_change(None, sig("pod-1", 1), True, None, created=True)
    assert value("leasehold_claims_total") == claims0 + 1
    metrics.observe_lease_change(None, sig(None, 0), True, None, created=True)
    assert value("leasehold_claims_total") == claims0 + 1  # created unheld: no claim
    metrics.lease_forgotten(sig("pod-1", 1))


def test_job_phases_gauge_tracks_each_job_once() -> None:
    phases = metrics.JobPhases()
    phases.observe("ns/a", None)
    phases.observe("ns/b", "Running")
    assert value("leasehold_jobs", {"phase": "Pending"}) == 1
    phases.observe("ns/a", "Running")
    assert value("leasehold_jobs", {"phase": "Running"}) == 2
    assert value("leasehold_jobs", {"phase": "Pending"}) == 0
    phases.observe("ns/b", "Succeeded")
    phases.observe("ns/a", None, deleted=True)
    assert value("leasehold_jobs", {"phase": "Running"}) == 0
    assert value("leasehold_jobs", {"phase": "Succeeded"}) == 1
