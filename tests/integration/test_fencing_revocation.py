"""Revoked tokens on a real API server: what a target that reads the JobLease learns.

A fence alone accepts a late write under the last token of a finished job (no
newer token ever reaches it); reading the lease refuses it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from leasehold import names
from leasehold.controller.engines.expiry import ExpiryClock
from leasehold.fencing import MemoryFence
from leasehold.fencing.revocation import (
    Revocation,
    RevocationReason,
    RevokedTokens,
    TokenRevoked,
    check_not_revoked,
    lease_api_path,
    revocation,
)
from leasehold.lease.protocol import Outcome
from leasehold.lease.store import Accepted, LeaseStore
from tests.integration.leases import claim_ok, wait_expired


class Reader:
    """Reads JobLeases as JSON, as a target would, and counts the reads."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.api = client.CustomObjectsApi(api_client)
        self.reads = 0

    def __call__(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        self.reads += 1
        try:
            body: Any = self.api.get_namespaced_custom_object(
                names.GROUP, names.VERSION, namespace, names.PLURAL_JOB_LEASES, name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return cast("Mapping[str, Any]", body)


@pytest.fixture
def reader(api_client: client.ApiClient) -> Reader:
    return Reader(api_client)


def _reason(reader: Reader, namespace: str, name: str, token: int) -> RevocationReason | None:
    revoked = revocation(reader(namespace, name), token)
    return None if revoked is None else revoked.reason


def test_a_late_write_after_the_last_attempt_passes_the_fence_but_not_the_lease(
    store: LeaseStore, reader: Reader, namespace: str, api_client: client.ApiClient
) -> None:
    """Held, reclaimed, superseded, completed: each read of the lease says so."""
    store.create(namespace, "report", job_name="report", lease_duration_seconds=1)
    token_a = claim_ok(store, namespace, "report", "worker-a")
    assert _reason(reader, namespace, "report", token_a) is None  # held: live
    judged = wait_expired(
        store, ExpiryClock(margin_seconds=0.2, monotonic=time.monotonic), namespace, "report", 10
    )
    assert isinstance(store.reclaim(judged), Accepted)
    assert _reason(reader, namespace, "report", token_a) is RevocationReason.UNHELD
    token_b = claim_ok(store, namespace, "report", "worker-b")
    assert token_b == token_a + 1
    assert _reason(reader, namespace, "report", token_a) is RevocationReason.SUPERSEDED
    assert _reason(reader, namespace, "report", token_b) is None
    assert _reason(reader, namespace, "report", token_b + 1) is RevocationReason.UNKNOWN

    fence = MemoryFence()
    fence.admit("report", token_b)  # B's write
    done = store.complete(namespace, "report", "worker-b", token_b, Outcome.SUCCEEDED)
    assert isinstance(done, Accepted)
    # B's duplicate write held on the wire arrives after the job ended: the
    # fence alone lets it through, since no newer token ever came ...
    assert fence.check("report", token_b) == token_b
    # ... the lease says the token is revoked.
    lease = reader(namespace, "report")
    assert revocation(lease, token_b) == Revocation(token_b, RevocationReason.COMPLETED, token_b)
    with pytest.raises(TokenRevoked) as raised:
        check_not_revoked(lease, token_b)
    assert raised.value.revocation.reason is RevocationReason.COMPLETED
    assert (
        str(raised.value)
        == f"fencing token {token_b} is revoked (Completed; lease token {token_b})"
    )

    revoked = RevokedTokens(reader)
    reads = reader.reads
    with pytest.raises(TokenRevoked):
        revoked.check(namespace, "report", token_b)
    assert reader.reads == reads + 1
    # Known revoked: no more reads, for that token and every lower one.
    for token in (token_b, token_a):
        with pytest.raises(TokenRevoked) as raised:
            revoked.check(namespace, "report", token)
        assert raised.value.revocation.reason is RevocationReason.COMPLETED
    assert reader.reads == reads + 1

    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, names.PLURAL_JOB_LEASES, "report"
    )
    assert _reason(reader, namespace, "report", token_b) is RevocationReason.DELETED


def test_a_stopped_job_revokes_its_last_token(
    store: LeaseStore, reader: Reader, namespace: str
) -> None:
    """The operator stops a job (deadline, attempts): its holder's token is revoked."""
    store.create(namespace, "late", job_name="late", lease_duration_seconds=30)
    token = claim_ok(store, namespace, "late", "worker-a")
    revoked = RevokedTokens(reader)
    revoked.check(namespace, "late", token)  # live: no error
    assert isinstance(store.stop(store.get(namespace, "late")), Accepted)
    with pytest.raises(TokenRevoked) as raised:
        revoked.check(namespace, "late", token)
    assert raised.value.revocation == Revocation(token, RevocationReason.STOPPED, token)


def test_released_token_is_revoked_and_lease_api_path_reads_the_lease(
    store: LeaseStore, namespace: str, api_client: client.ApiClient
) -> None:
    store.create(namespace, "given-back", job_name="given-back", lease_duration_seconds=30)
    token = claim_ok(store, namespace, "given-back", "worker-a")
    assert isinstance(store.release(namespace, "given-back", "worker-a", token), Accepted)
    rest: Any = api_client.rest_client
    answer = rest.request(
        "GET", api_client.configuration.host + lease_api_path(namespace, "given-back")
    )
    assert answer.status == 200
    body = json.loads(answer.read())
    assert revocation(body, token) == Revocation(token, RevocationReason.UNHELD, token)
