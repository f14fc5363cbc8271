"""Kueue's objects the operator reads and writes: Workloads, ResourceFlavors, priority classes.

Why this module exists: a LeasedJob queued by Kueue is admitted through a
``Workload`` (``kueue.x-k8s.io/v1beta2``) the operator creates and owns
(:mod:`leasehold.controller.act.queue`); this is the one place that calls the
API for it, and it converts the client's errors once, as
:mod:`leasehold.controller.kube.objects` does for the operator's own kinds.
Whether the cluster serves Kueue at all is asked here too (discovery): the
operator runs without Kueue, and only a queued job ever asks.
"""

from __future__ import annotations

from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from leasehold.controller.kube import REQUEST_TIMEOUT
from leasehold.controller.kube.objects import Body, Refused
from leasehold.controller.plan.queueing import (
    GROUP,
    PLURAL_PRIORITY_CLASSES,
    PLURAL_RESOURCE_FLAVORS,
    PLURAL_WORKLOADS,
    VERSION,
)
from leasehold.lease.errors import api_error


class Workloads:
    """Kueue's Workloads (namespaced) and the cluster-scoped objects an admission names.

    Args:
        api_client: a configured ``kubernetes.client.ApiClient``.
        field_manager: the field manager of the operator's writes.
    """

    def __init__(self, api_client: client.ApiClient, field_manager: str) -> None:
        self._api = client.CustomObjectsApi(api_client)
        self._scheduling = client.SchedulingV1Api(api_client)
        self._field_manager = field_manager

    def served(self) -> bool:
        """Whether the API server serves ``workloads.kueue.x-k8s.io/v1beta2`` (Kueue installed).

        Returns:
            ``True`` when discovery lists the resource; ``False`` when the
            group version is not served (404).

        Raises:
            StoreError: discovery failed otherwise (transient ones as TransientStoreError).
        """
        try:
            found: Any = self._api.get_api_resources(
                GROUP, VERSION, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise api_error(exc, f"discover {GROUP}/{VERSION}") from exc
        return any(r.name == PLURAL_WORKLOADS for r in (found.resources or []))

    def get(self, namespace: str, name: str) -> Body | None:
        """GET a Workload.

        Returns:
            The Workload, or ``None`` when it does not exist.

        Raises:
            StoreError: any other refusal.
        """
        try:
            body: Any = self._api.get_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                PLURAL_WORKLOADS,
                name,
                _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise api_error(exc, f"get Workload {namespace}/{name}") from exc
        return cast("Body", body)

    def create(self, namespace: str, body: Body) -> Body | None:
        """Create a Workload.

        Returns:
            The Workload as created; ``None`` when its name is taken (409).

        Raises:
            StoreError: any other refusal (e.g. 422 from Kueue's webhook).
        """
        name = (body.get("metadata") or {}).get("name")
        try:
            created: Any = self._api.create_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                PLURAL_WORKLOADS,
                body,
                field_manager=self._field_manager,
                _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException as exc:
            if exc.status == 409:
                return None
            raise api_error(exc, f"create Workload {namespace}/{name}") from exc
        return cast("Body", created)

    def update_spec(
        self, namespace: str, name: str, resource_version: str, spec: Body
    ) -> Body | Refused:
        """Merge ``spec`` into a Workload's spec, conditioned on the version it was computed from.

        Returns:
            The Workload as written, or why not (gone; changed since read).

        Raises:
            StoreError: any other refusal (e.g. 422: Kueue's rules refuse a
                change while the quota is reserved).
        """
        patch = {"metadata": {"resourceVersion": resource_version}, "spec": spec}
        try:
            written: Any = self._api.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL_WORKLOADS, name, patch,
                field_manager=self._field_manager,
                _request_timeout=REQUEST_TIMEOUT,
            )  # fmt: skip
        except ApiException as exc:
            if exc.status == 404:
                return Refused.GONE
            if exc.status == 409:
                return Refused.CONFLICT
            raise api_error(exc, f"update Workload {namespace}/{name}") from exc
        return cast("Body", written)

    def delete(self, namespace: str, name: str, uid: str) -> bool:
        """Delete one Workload (a UID precondition: only that incarnation).

        Returns:
            ``False`` when it was gone already or is another incarnation now.

        Raises:
            StoreError: any other refusal.
        """
        options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid))
        try:
            self._api.delete_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                PLURAL_WORKLOADS,
                name,
                body=options,
                _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException as exc:
            if exc.status in (404, 409):
                return False
            raise api_error(exc, f"delete Workload {namespace}/{name}") from exc
        return True

    def write_status(
        self, namespace: str, name: str, resource_version: str, status: Body
    ) -> Body | Refused:
        """Write a Workload's whole ``status``, conditioned on the version it was computed from.

        A JSON merge patch of ``status`` with ``metadata.resourceVersion``:
        lists are replaced whole, ``admission: null`` removes it, and a
        Workload Kueue wrote meanwhile answers 409 (plan again on it).

        Returns:
            The Workload as written, or why not (gone; changed since read).

        Raises:
            StoreError: any other refusal.
        """
        patch = {
            "metadata": {"resourceVersion": resource_version},
            "status": {**status, "admission": status.get("admission")},
        }
        try:
            written: Any = self._api.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                PLURAL_WORKLOADS,
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
            raise api_error(exc, f"write status of Workload {namespace}/{name}") from exc
        return cast("Body", written)

    def flavor(self, name: str) -> Body | None:
        """GET a ResourceFlavor (cluster-scoped).

        Returns:
            It, or ``None`` when it does not exist.

        Raises:
            StoreError: any other refusal.
        """
        try:
            body: Any = self._api.get_cluster_custom_object(
                GROUP,
                VERSION,
                PLURAL_RESOURCE_FLAVORS,
                name,
                _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise api_error(exc, f"get ResourceFlavor {name}") from exc
        return cast("Body", body)

    def priority(self, kind: str, name: str) -> int | None:
        """The value of a WorkloadPriorityClass or a (pod) PriorityClass.

        Args:
            kind: ``WorkloadPriorityClass`` or ``PriorityClass``.
            name: its name.

        Returns:
            Its ``value``, or ``None`` when it does not exist.

        Raises:
            StoreError: any other refusal.
        """
        try:
            if kind == "WorkloadPriorityClass":
                body: Any = self._api.get_cluster_custom_object(
                    GROUP,
                    VERSION,
                    PLURAL_PRIORITY_CLASSES,
                    name,
                    _request_timeout=REQUEST_TIMEOUT,
                )
                return int(body["value"])
            pod_class: Any = self._scheduling.read_priority_class(name)
            return int(pod_class.value)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise api_error(exc, f"get {kind} {name}") from exc
