"""Attempt pods and namespaces: the core/v1 calls the operator makes.

Why this module exists: a pod create has four answers the operator acts on
differently (created; the name is taken; a ResourceQuota is used up, which
passes; the pod itself is refused, which does not), and they are told apart
here, once, from the client's exception. Pods come back as the API serves
them (JSON, camelCase), the form the planners read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from leasehold.controller.kube import REQUEST_TIMEOUT
from leasehold.lease.errors import api_error, api_message

Body = dict[str, Any]
"""An object as the API serves it (JSON, camelCase)."""


@dataclass(frozen=True)
class PodCreated:
    """The pod was created; ``pod`` is it as the API server stored it."""

    pod: Body


@dataclass(frozen=True)
class PodNameTaken:
    """A pod of that name exists (409); ``pod`` is it as read, ``None`` if gone since."""

    pod: Body | None


@dataclass(frozen=True)
class QuotaExceeded:
    """A ResourceQuota refused the pod (403 ``exceeded quota``): transient."""

    message: str


@dataclass(frozen=True)
class PodRefused:
    """The API server refused the pod itself (4xx: a bad template): not transient."""

    message: str


PodCreateResult = PodCreated | PodNameTaken | QuotaExceeded | PodRefused


def is_quota_refusal(exc: ApiException) -> bool:
    """Whether the API server refused a create because a ResourceQuota is used up.

    Such a ``403 Forbidden`` is transient (pods finish, quotas are raised),
    unlike a refusal of the pod itself.

    Args:
        exc: the client's exception.

    Returns:
        ``True`` for a 403 whose message says ``exceeded quota``.
    """
    return exc.status == 403 and "exceeded quota" in api_message(exc)


class Pods:
    """Pods and namespaces through core/v1 (blocking calls).

    Args:
        api_client: a configured ``kubernetes.client.ApiClient``.
        field_manager: the server-side field manager of pod creates.
    """

    def __init__(self, api_client: client.ApiClient, field_manager: str) -> None:
        self._core = client.CoreV1Api(api_client)
        self._to_json: Callable[[Any], Any] = api_client.sanitize_for_serialization
        self._field_manager = field_manager

    def create(self, namespace: str, pod: Body) -> PodCreateResult:
        """Create a pod; a taken name is answered with the pod that has it.

        Raises:
            StoreError: a refusal other than those :data:`PodCreateResult` names
                (5xx and 429 as TransientStoreError).
        """
        name = (pod.get("metadata") or {}).get("name")
        try:
            created: Any = self._core.create_namespaced_pod(
                namespace,
                cast(Any, pod),
                field_manager=self._field_manager,
                _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException as exc:
            if exc.status == 409:
                return PodNameTaken(self.read(namespace, str(name)))
            if is_quota_refusal(exc):
                return QuotaExceeded(api_message(exc))
            if exc.status is not None and 400 <= exc.status < 500 and exc.status != 429:
                return PodRefused(api_message(exc))
            raise api_error(exc, f"create pod {namespace}/{name}") from exc
        return PodCreated(cast("Body", self._to_json(created)))

    def read(self, namespace: str, name: str) -> Body | None:
        """GET a pod; ``None`` when it does not exist.

        Raises:
            StoreError: any other refusal.
        """
        try:
            pod: Any = self._core.read_namespaced_pod(
                name, namespace, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise api_error(exc, f"get pod {namespace}/{name}") from exc
        return cast("Body", self._to_json(pod))

    def list(self, namespace: str, label_selector: str) -> list[Body]:
        """LIST the pods of a namespace that match a label selector.

        Raises:
            StoreError: the API server refused or failed.
        """
        try:
            pods: Any = self._core.list_namespaced_pod(
                namespace, label_selector=label_selector, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as exc:
            raise api_error(exc, f"list pods in {namespace} ({label_selector})") from exc
        return [cast("Body", self._to_json(pod)) for pod in pods.items]

    def delete(self, namespace: str, name: str, *, uid: str | None = None) -> None:
        """Delete a pod with its own grace period; one already gone is fine.

        Args:
            namespace: the pod's namespace.
            name: the pod's name.
            uid: delete only the pod of this UID (a precondition): a pod of the
                same name made since is left alone.

        Raises:
            StoreError: any other refusal.
        """
        kwargs: dict[str, Any] = {}
        if uid is not None:
            kwargs["body"] = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid))
        try:
            self._core.delete_namespaced_pod(
                name, namespace, **kwargs, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as exc:
            # 404: gone already; 409 under a UID precondition: another pod has the name now.
            if exc.status != 404 and not (uid is not None and exc.status == 409):
                raise api_error(exc, f"delete pod {namespace}/{name}") from exc

    def namespace_terminating(self, namespace: str) -> bool:
        """Whether a namespace is being deleted (or is gone already).

        Raises:
            StoreError: it cannot be read (RBAC, the API server failing).
        """
        try:
            ns: Any = self._core.read_namespace(namespace, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise api_error(exc, f"get namespace {namespace}") from exc
        return ns.metadata is not None and ns.metadata.deletion_timestamp is not None


def owned_by(pod: Body, uid: str, *, controller: bool = True) -> bool:
    """Whether ``pod`` has an ownerReference to ``uid`` (its controller one, by default).

    Args:
        pod: the pod (JSON).
        uid: the owner's ``metadata.uid``.
        controller: only the controller reference counts.

    Returns:
        ``True`` if such a reference exists.
    """
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("uid") == uid and (ref.get("controller") or not controller) for ref in refs)
