"""Lease steps shared by the integration tests: claim, judge expiry, count requests."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest
from kubernetes import client

from leasehold import names
from leasehold.controller.engines.expiry import ExpiryClock
from leasehold.lease.store import Accepted, LeaseStore, StoredLease


def claim_ok(store: LeaseStore, namespace: str, name: str, who: str) -> int:
    """Claim a lease that must be free; return the new fencing token."""
    result = store.claim(namespace, name, who)
    assert isinstance(result, Accepted), result
    return result.token


def wait_expired(
    store: LeaseStore, expiry: ExpiryClock, namespace: str, name: str, timeout: float
) -> StoredLease:
    """Poll a lease until ``expiry`` judges it expired, as the operator does; return it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lease = store.get(namespace, name)
        key = f"{namespace}/{name}"
        if expiry.is_expired(key, lease.resource_version, lease.record.lease_duration_seconds):
            return lease
        time.sleep(0.1)
    raise AssertionError("lease never expired")


def count_requests(api_client: client.ApiClient, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Count every HTTP request ``api_client`` sends, by method (as bench.py does)."""
    counts: Counter[str] = Counter()
    rest: Any = api_client.rest_client
    original = rest.request

    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        counts[method.upper()] += 1
        return original(method, url, *args, **kwargs)

    monkeypatch.setattr(rest, "request", request)
    return counts


def refused_lease_patch(
    api_client: client.ApiClient, namespace: str, name: str, spec: dict[str, Any]
) -> str:
    """Merge-patch a JobLease's spec that the API server must refuse (422); return its message."""
    with pytest.raises(client.ApiException) as caught:
        client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, names.PLURAL_JOB_LEASES, name, {"spec": spec}
        )
    assert caught.value.status == 422
    return str(caught.value.body)
