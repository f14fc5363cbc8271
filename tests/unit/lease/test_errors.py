"""The store's one error edge: no client or transport error escapes unconverted."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from leasehold import names
from leasehold.lease.errors import (
    LeaseNotFoundError,
    StoreError,
    TransientStoreError,
    WriteRefusedError,
    api_error,
    api_errors,
    names_missing_object,
)
from leasehold.lease.protocol import Outcome
from leasehold.lease.store import LeaseStore, StoredLease, to_stored


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def store() -> Iterator[LeaseStore]:
    """A store whose API server refuses connections."""
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{_closed_port()}"
    configuration.retries = 0
    with client.ApiClient(configuration) as api_client:
        yield LeaseStore(api_client)


def _held_lease() -> StoredLease:
    return to_stored(
        {
            "apiVersion": names.API_VERSION,
            "kind": "JobLease",
            "metadata": {"namespace": "ns", "name": "job", "resourceVersion": "7"},
            "spec": {
                "jobName": "job",
                "leaseDurationSeconds": 30,
                "holderIdentity": "worker-a",
                "fencingToken": 1,
            },
        }
    )


CALLS: dict[str, Callable[[LeaseStore], Any]] = {
    "get": lambda s: s.get("ns", "job"),
    "list": lambda s: s.list_leases("ns"),
    "create": lambda s: s.create("ns", "job", job_name="job", lease_duration_seconds=30),
    "claim": lambda s: s.claim("ns", "job", "worker-a"),
    "claim observed": lambda s: s.claim("ns", "job", "worker-b", observed=_unheld()),
    "renew": lambda s: s.renew("ns", "job", "worker-a", 1),
    "complete": lambda s: s.complete("ns", "job", "worker-a", 1, Outcome.SUCCEEDED),
    "release": lambda s: s.release("ns", "job", "worker-a", 1),
    "reclaim": lambda s: s.reclaim(_held_lease()),
    "stop": lambda s: s.stop(_held_lease()),
}


def _unheld() -> StoredLease:
    body = _held_lease().body
    spec = {k: v for k, v in body["spec"].items() if k != "holderIdentity"}
    return to_stored({**body, "spec": spec})


@pytest.mark.parametrize("call", CALLS.values(), ids=CALLS.keys())
def test_an_unreachable_api_server_is_a_transient_error(
    store: LeaseStore, call: Callable[[LeaseStore], Any]
) -> None:
    """Every store method turns a transport error into TransientStoreError."""
    with pytest.raises(TransientStoreError) as raised:
        call(store)
    assert isinstance(raised.value.__cause__, urllib3.exceptions.HTTPError), raised.value
    assert raised.value.status is None


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (0, TransientStoreError),
        (429, TransientStoreError),
        (503, TransientStoreError),
        (409, WriteRefusedError),
        (422, WriteRefusedError),
        (403, StoreError),
        (404, StoreError),
    ],
)
def test_api_error_maps_status_to_what_the_caller_should_do(
    status: int, expected: type[StoreError]
) -> None:
    """Retry later, re-read, or give up: the type says which."""
    exc = ApiException(status=status, reason="Reason")
    exc.body = '{"kind": "Status", "message": "the server says why"}'
    error = api_error(exc, "patch ns/job")
    assert type(error) is expected
    assert error.status == status
    assert "the server says why" in str(error)


NOT_FOUND_JOB = (
    '{"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404,'
    ' "message": "jobleases.leasehold.dev \\"job\\" not found",'
    ' "details": {"name": "job", "group": "leasehold.dev", "kind": "jobleases"}}'
)
NOT_SERVED = (
    '{"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404,'
    ' "message": "the server could not find the requested resource", "details": {}}'
)


def _api_404(body: str | None) -> ApiException:
    exc = ApiException(status=404, reason="Not Found")
    exc.body = body
    return exc


def test_a_404_naming_the_lease_is_lease_not_found() -> None:
    """Only a named lease whose Status names it is 'not found'; a list's 404 is a StoreError."""
    with pytest.raises(LeaseNotFoundError) as named, api_errors("get", "ns", "job"):
        raise _api_404(NOT_FOUND_JOB)
    assert (named.value.namespace, named.value.name) == ("ns", "job")
    assert isinstance(named.value.__cause__, ApiException)
    with pytest.raises(StoreError) as listed, api_errors("list", "ns"):
        raise _api_404(NOT_FOUND_JOB)
    assert not isinstance(listed.value, LeaseNotFoundError)


@pytest.mark.parametrize(
    "body", [NOT_SERVED, None, "not json", NOT_FOUND_JOB.replace('"job"', '"x"')]
)
def test_a_404_that_names_no_lease_is_transient(body: str | None) -> None:
    """An API server starting up answers 404 for every custom-resource path: retry, not loss."""
    with pytest.raises(TransientStoreError) as caught, api_errors("renew", "ns", "job"):
        raise _api_404(body)
    assert caught.value.status == 404
    assert not names_missing_object(body, "job")
