"""LeasedJobs, LeasedCronJobs and JobLease status notes: the custom objects the operator edits.

Why this module exists: the lease store (:mod:`leasehold.lease.store`) owns
every write that decides who holds a lease; everything else the operator
reads or writes in its own API group goes through :class:`CustomObjects`,
which converts the client's errors once: the answers a caller acts on
(gone, changed since read, name taken) come back as values
(:class:`Refused`, ``None``), everything else is raised as
:mod:`leasehold.lease.errors` says (transient or not).
"""

from __future__ import annotations

import enum
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from leasehold import names
from leasehold.controller.kube import REQUEST_TIMEOUT
from leasehold.lease.errors import api_error

Body = dict[str, Any]
"""An object as the API serves it (JSON, camelCase)."""


class Refused(enum.Enum):
    """Why a conditional write did not land: the caller decides what that means."""

    GONE = 404
    """The object does not exist (any more)."""
    CONFLICT = 409
    """It changed since the version the write was conditioned on."""


def server_time(headers: Any) -> datetime | None:
    """The API server's clock from a response's ``Date`` header (1 s resolution).

    Args:
        headers: the response headers (a mapping), or ``None``.

    Returns:
        The time, or ``None`` when the header is missing or unreadable.
    """
    raw = headers.get("Date") if headers is not None else None
    if not raw:
        return None
    try:
        return parsedate_to_datetime(str(raw))
    except (TypeError, ValueError):
        return None


class CustomObjects:
    """One namespaced custom resource of ``leasehold.dev`` (blocking calls).

    Args:
        api_client: a configured ``kubernetes.client.ApiClient``.
        plural: the resource, e.g. :data:`leasehold.names.PLURAL_LEASED_JOBS`.
        kind: its kind, for error messages (``LeasedJob``).
        field_manager: the server-side field manager of its writes.
    """

    def __init__(
        self, api_client: client.ApiClient, plural: str, kind: str, field_manager: str
    ) -> None:
        self._api = client.CustomObjectsApi(api_client)
        self._plural = plural
        self._kind = kind
        self._field_manager = field_manager

    def read(self, namespace: str, name: str) -> tuple[Body | None, datetime | None]:
        """GET one object, with the API server's time of the answer.

        Args:
            namespace: the object's namespace.
            name: its name.

        Returns:
            ``(body, server time)``; ``(None, None)`` when it does not exist.

        Raises:
            StoreError: any other refusal (transient ones as TransientStoreError).
        """
        try:
            body, _, headers = self._api.get_namespaced_custom_object_with_http_info(
                names.GROUP,
                names.VERSION,
                namespace,
                self._plural,
                name,
                _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException as exc:
            if exc.status == 404:
                return None, None
            raise api_error(exc, f"get {self._kind} {namespace}/{name}") from exc
        return cast("Body", body), server_time(headers)

    def list(self, namespace: str, label_selector: str) -> list[Body]:
        """LIST the objects of one namespace that match a label selector.

        Raises:
            StoreError: the API server refused or failed.
        """
        try:
            body: Any = self._api.list_namespaced_custom_object(
                names.GROUP,
                names.VERSION,
                namespace,
                self._plural,
                label_selector=label_selector,
                _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException as exc:
            raise api_error(exc, f"list {self._kind} in {namespace} ({label_selector})") from exc
        return list(cast("Body", body).get("items", []))

    def create(self, namespace: str, body: Body) -> Body | None:
        """Create an object.

        Returns:
            The object as created; ``None`` when its name is taken (409).

        Raises:
            StoreError: any other refusal.
        """
        name = (body.get("metadata") or {}).get("name")
        try:
            created: Any = self._api.create_namespaced_custom_object(
                names.GROUP,
                names.VERSION,
                namespace,
                self._plural,
                body,
                _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException as exc:
            if exc.status == 409:
                return None
            raise api_error(exc, f"create {self._kind} {namespace}/{name}") from exc
        return cast("Body", created)

    def delete(self, namespace: str, name: str, *, uid: str | None = None) -> bool:
        """Delete an object (its dependents in the background); with ``uid``, only that one.

        Returns:
            ``False`` when it was gone already or (``uid``) is another incarnation now.

        Raises:
            StoreError: any other refusal.
        """
        options = client.V1DeleteOptions(
            preconditions=client.V1Preconditions(uid=uid) if uid is not None else None,
            propagation_policy="Background",
        )
        try:
            self._api.delete_namespaced_custom_object(
                names.GROUP,
                names.VERSION,
                namespace,
                self._plural,
                name,
                body=options,
                _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException as exc:
            if exc.status in (404, 409):
                return False
            raise api_error(exc, f"delete {self._kind} {namespace}/{name}") from exc
        return True

    def patch_status(self, namespace: str, name: str, patch: Body) -> Body | Refused:
        """Merge-patch the status subresource (conditioned if ``patch`` names a resourceVersion).

        Returns:
            The object as written, or why it was refused (gone; changed since read).

        Raises:
            StoreError: any other refusal.
        """
        try:
            written: Any = self._api.patch_namespaced_custom_object_status(
                names.GROUP,
                names.VERSION,
                namespace,
                self._plural,
                name,
                patch,
                field_manager=self._field_manager,
                _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException as exc:
            if exc.status == 404:
                return Refused.GONE
            if exc.status == 409:
                return Refused.CONFLICT
            raise api_error(exc, f"patch status of {self._kind} {namespace}/{name}") from exc
        return cast("Body", written)
