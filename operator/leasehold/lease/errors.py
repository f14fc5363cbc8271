"""API errors, by what the caller should do.

Why this module exists: callers of the store (the worker SDK, the operator)
decide on these types, never on the client's ``ApiException`` or urllib3's
transport errors. :func:`api_errors` is the one edge where those are
converted; the store wraps every API call in it, and the operator's own pod
and LeasedJob calls use :func:`api_error`. The cause is always chained
(``raise ... from``).

* :class:`TransientStoreError` — no answer, 429 or 5xx: retry later.
* :class:`LeaseNotFoundError` — the JobLease does not exist: create it or
  give up.
* :class:`WriteRefusedError` — 409 or 422: the write does not fit the
  object as it is now; re-read and judge again.
* :class:`InvalidLeaseError` — the stored object does not parse.
* :class:`StoreError` — the base; as itself, a bug or a permission problem.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kubernetes.client.exceptions import ApiException


class StoreError(Exception):
    """The API server refused or failed a request in a way retrying won't fix.

    Attributes:
        status: the HTTP status, or ``None`` if no response was received.
    """

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class TransientStoreError(StoreError):
    """The API server was unreachable, overloaded or timed out: retry later.

    After a write, the write may or may not have landed.
    """


class LeaseNotFoundError(StoreError):
    """The JobLease ``namespace``/``name`` does not exist (HTTP 404)."""

    def __init__(self, namespace: str, name: str) -> None:
        super().__init__(f"JobLease {namespace}/{name} not found", status=404)
        self.namespace = namespace
        self.name = name


class WriteRefusedError(StoreError):
    """A write that does not fit the stored object (HTTP 409 or 422).

    A ``resourceVersion`` precondition or a JSON-patch ``test`` op failed, a
    CEL rule or the schema refused, or the object already exists. The store
    re-reads and lets :mod:`leasehold.lease.protocol` say why; it escapes
    only when re-reading cannot help (e.g. a holder name the schema refuses).
    """


class InvalidLeaseError(StoreError):
    """The stored JobLease body does not parse as a lease (a bad object)."""


def api_message(exc: ApiException) -> str:
    """The ``message`` of a Kubernetes Status body, else the HTTP reason."""
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        return str(exc.reason)
    return str(body.get("message") or exc.reason)


def api_error(exc: ApiException, action: str) -> StoreError:
    """Map a client exception to the error type that says what to do.

    Args:
        exc: the client exception.
        action: what was attempted, for the message, e.g. ``"create pod ns/name"``.

    Returns:
        :class:`TransientStoreError` for no response, 429 and 5xx;
        :class:`WriteRefusedError` for 409 and 422; else :class:`StoreError`.
    """
    return status_error(exc.status, api_message(exc), action)


def status_error(status: int | None, message: str, action: str) -> StoreError:
    """Map an HTTP status (``0``/``None``: no response) to the error that says what to do.

    Args:
        status: the HTTP status of the refusal.
        message: the Status body's ``message`` (or the HTTP reason).
        action: what was attempted, for the message.

    Returns:
        :class:`TransientStoreError` for no response, 429 and 5xx;
        :class:`WriteRefusedError` for 409 and 422; else :class:`StoreError`.
    """
    if not status or status == 429 or status >= 500:  # 0/None: no response (e.g. TLS error)
        return TransientStoreError(f"{action}: {message}", status)
    text = f"{action}: HTTP {status}: {message}"
    if status in (409, 422):
        return WriteRefusedError(text, status)
    return StoreError(text, status)


def names_missing_object(body: bytes | str | None, name: str) -> bool:
    """Whether a 404's Status body says that the object ``name`` does not exist.

    A 404 whose Status names no object (``details.name`` absent or another
    name) is not the object's absence: an API server that is starting up, or
    whose CRD is not served yet, answers "the server could not find the
    requested resource" for every custom-resource path. Taking that for a
    deleted lease would kill every worker during an API server restart.

    Args:
        body: the 404 answer's body (a ``Status`` object as JSON), or ``None``.
        name: the object's name the request was for.

    Returns:
        ``True`` when the Status is ``NotFound`` with ``details.name == name``.
    """
    try:
        status = json.loads(body or b"{}")
    except ValueError:
        return False
    if not isinstance(status, dict):
        return False
    details = status.get("details")
    return (
        status.get("reason") == "NotFound"
        and isinstance(details, dict)
        and details.get("name") == name
    )


def not_found_error(body: bytes | str | None, namespace: str, name: str, action: str) -> StoreError:
    """The error for a 404 answer to a request for the JobLease ``namespace/name``.

    Args:
        body: the answer's body (a ``Status`` as JSON), or ``None``.
        namespace: the JobLease's namespace.
        name: the JobLease's name.
        action: what was attempted, for the message.

    Returns:
        :class:`LeaseNotFoundError` when the Status names the lease
        (:func:`names_missing_object`); else :class:`TransientStoreError`
        (the path is not served yet: retry).
    """
    if names_missing_object(body, name):
        return LeaseNotFoundError(namespace, name)
    return TransientStoreError(
        f"{action} {namespace}/{name}: HTTP 404 naming no JobLease (the API not served yet?)",
        404,
    )


@contextlib.contextmanager
def api_errors(action: str, namespace: str, name: str | None = None) -> Iterator[None]:
    """Convert the API and transport errors raised inside the block.

    Args:
        action: what was attempted (``"get"``, ``"claim"``, ...).
        namespace: the object's namespace.
        name: the JobLease's name; ``None`` for a list. With a name, a 404
            whose Status names the lease becomes :class:`LeaseNotFoundError`
            (:func:`not_found_error`).

    Raises:
        StoreError: a subclass as :func:`api_error` maps it; urllib3 errors and
            ``OSError`` (timeouts, dropped connections) as
            :class:`TransientStoreError`.
    """
    # Imported here, not above: ``leasehold run`` imports this module but
    # never the ``kubernetes`` package (its client is leasehold.lease.httpclient).
    import urllib3
    from kubernetes.client.exceptions import ApiException

    target = namespace if name is None else f"{namespace}/{name}"
    try:
        yield
    except ApiException as exc:
        if exc.status == 404 and name is not None:
            raise not_found_error(exc.body, namespace, name, action) from exc
        raise api_error(exc, f"{action} {target}") from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise TransientStoreError(f"{action} {target}: {exc}") from exc
