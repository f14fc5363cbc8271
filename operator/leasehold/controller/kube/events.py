"""Kubernetes Events about the operator's objects: what happened and why, for people.

Why this module exists: every actor tells users what it did on the object it
did it to (``kubectl describe``, dashboards); an Event that cannot be recorded
is logged, never raised: it must not stop the work it reports.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from leasehold import names
from leasehold.controller.kube import REQUEST_TIMEOUT
from leasehold.lease.errors import api_message
from leasehold.lease.store import format_time

log = logging.getLogger(__name__)

MAX_MESSAGE: int = 1024
"""An Event's message is cut to this many characters."""


class EventRecorder:
    """Record core/v1 Events about objects (blocking calls).

    Args:
        api_client: a configured ``kubernetes.client.ApiClient``.
        component: the Events' ``source.component``.
        instance: their ``reportingInstance`` (this replica).
        clock: wall clock for the Events' timestamps.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        component: str,
        instance: str,
        clock: Callable[[], datetime],
    ) -> None:
        self._core = client.CoreV1Api(api_client)
        self._component = component
        self._instance = instance
        self._clock = clock

    def record(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """Record an Event about ``obj``; failures are logged, not raised.

        Args:
            obj: the involved object's body (needs apiVersion, kind, metadata).
            type_: ``Normal`` or ``Warning``.
            reason: CamelCase reason.
            message: what happened, for people.
        """
        meta = obj.get("metadata", {})
        stamp = format_time(self._clock()).split(".")[0] + "Z"
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "generateName": f"{meta.get('name', 'x')}.",
                "namespace": meta.get("namespace"),
            },
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "uid": meta.get("uid"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:MAX_MESSAGE],
            "source": {"component": self._component},
            "reportingComponent": f"{names.GROUP}/operator",
            "reportingInstance": self._instance[:128],
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            self._core.create_namespaced_event(
                str(meta.get("namespace")), cast(Any, event), _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as exc:
            log.warning(
                "could not record Event %s on %s: %s", reason, meta.get("name"), api_message(exc)
            )
