"""What the operator reads: a new job's lease is created without a read; a miss is confirmed.

The operator's service runs in this process on the real API server, with an
empty lease cache (no watch): every lease it knows of, it learnt from its own
writes or a GET. The GETs are counted on its own LeaseStore.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from leasehold.controller.runtime import Actors
from leasehold.lease.protocol import Outcome
from leasehold.lease.store import Accepted, LeaseStore
from tests.integration.jobs import create_job, patch_spec, status

pytestmark = pytest.mark.cluster


def _count_gets(service: Actors, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Note the name of every lease ``service``'s store GETs; returns the list it fills."""
    read: list[str] = []
    get: Callable[..., Any] = service.ctx.store.get

    def counted(namespace: str, name: str, **kwargs: Any) -> Any:
        read.append(name)
        return get(namespace, name, **kwargs)

    monkeypatch.setattr(service.ctx.store, "get", counted)
    return read


def test_a_new_jobs_lease_is_created_without_reading_it_first(
    api_client: client.ApiClient, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = Actors.connect(api_client)
    read = _count_gets(service, monkeypatch)
    create_job(api_client, namespace, "fresh", None, lease_seconds=30)
    service.jobs.reconcile(namespace, "fresh")
    lease = LeaseStore(api_client).get(namespace, "fresh")
    assert lease.record.fencing_token == 0 and lease.record.holder_identity is None
    assert read == [], "the create is its own check: no GET before it"
    assert status(api_client, namespace, "fresh")["leaseName"] == "fresh"


def test_a_lease_missing_from_the_cache_is_read_before_the_job_is_judged(
    api_client: client.ApiClient, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job cancelled while its lease exists is not 'cancelled before any attempt'."""
    create_job(api_client, namespace, "known", None, lease_seconds=30)
    Actors.connect(api_client).jobs.reconcile(namespace, "known")  # another operator made its lease
    store = LeaseStore(api_client)
    claimed = store.claim(namespace, "known", "pool-1")
    assert isinstance(claimed, Accepted)
    done = store.complete(namespace, "known", "pool-1", claimed.token, Outcome.SUCCEEDED)
    assert isinstance(done, Accepted)
    patch_spec(api_client, namespace, "known", {"cancel": True})

    service = Actors.connect(api_client)  # its lease cache has never seen the lease
    read = _count_gets(service, monkeypatch)
    service.jobs.reconcile(namespace, "known")
    assert read == ["known"], "the cache's miss was confirmed with one GET"
    st = status(api_client, namespace, "known")
    assert st["phase"] == "Succeeded", st  # the completion stands; not cancelled
    assert "before any attempt" not in str(st)
