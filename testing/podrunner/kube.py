"""A small JSON client for the Kubernetes API.

The pod runner talks to a handful of endpoints (nodes, leases, pods, pod
status, service-account tokens) and wants plain dicts back, not the generated
models of the ``kubernetes`` package. So this module uses that package only
for what it does well, reading a kubeconfig (certificates, tokens, exec
plugins) and holding a connection pool, and sends JSON itself.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from kubernetes import client, config

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"

QueryValue = str | int | bool


def rfc3339(moment: datetime | None = None) -> str:
    """Format a time as a Kubernetes ``Time`` (RFC 3339, seconds, UTC).

    Args:
        moment: The time; default now.

    Returns:
        E.g. ``2025-01-31T12:00:00Z``.
    """
    return (moment or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(moment: datetime | None = None) -> str:
    """Format a time as a Kubernetes ``MicroTime`` (microseconds, UTC).

    Args:
        moment: The time; default now.

    Returns:
        E.g. ``2025-01-31T12:00:00.123456Z``.
    """
    return (moment or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def path_segment(value: str) -> str:
    """Quote one path segment (a name or namespace) for a URL.

    Args:
        value: The raw segment.

    Returns:
        The segment with everything but unreserved characters escaped.
    """
    return quote(value, safe="")


class KubeError(Exception):
    """The API server answered with an error status, or could not be reached.

    Attributes:
        method: HTTP method of the request.
        path: Path of the request.
        status: HTTP status; 0 when no answer came.
        body: Decoded ``Status`` object of the answer, or an empty dict.
    """

    def __init__(self, method: str, path: str, status: int, body: Mapping[str, Any]) -> None:
        """Describe a failed request.

        Args:
            method: HTTP method.
            path: Request path.
            status: HTTP status, or 0 for a transport error.
            body: The ``Status`` object the server sent, if any.
        """
        self.method = method
        self.path = path
        self.status = status
        self.body = dict(body)
        message = self.body.get("message") or self.body.get("reason") or "no details"
        super().__init__(f"{method} {path}: {status} {message}")

    @property
    def reason(self) -> str:
        """The ``reason`` of the server's ``Status`` object (e.g. ``NotFound``), or ''."""
        return str(self.body.get("reason", ""))


class WatchStream:
    """One open watch request; iterate it for events, close it from any thread.

    Each event is the decoded JSON line: ``{"type": ..., "object": {...}}``.
    """

    def __init__(self, response: Any, method: str, path: str) -> None:
        """Wrap an open, unread urllib3 response.

        Args:
            response: The urllib3 response, opened with ``preload_content=False``.
            method: HTTP method, for error messages.
            path: Request path, for error messages.
        """
        self._response = response
        self._method = method
        self._path = path
        self._closed = threading.Event()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Yield events until the server ends the watch or `close` is called.

        Yields:
            Decoded watch events.
        """
        buffer = b""
        try:
            for chunk in self._response.stream(64 * 1024, decode_content=True):
                if self._closed.is_set():
                    return
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        except Exception:
            if self._closed.is_set():
                return
            raise
        finally:
            self._release()
        if buffer.strip() and not self._closed.is_set():
            yield json.loads(buffer)

    def close(self) -> None:
        """End the watch; a thread blocked reading it returns soon after."""
        self._closed.set()
        # Shut the socket down rather than close it: a close() would wait for
        # the SSL lock that the blocked reader holds.
        connection = getattr(self._response, "connection", None) or getattr(
            self._response, "_connection", None
        )
        sock = getattr(connection, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _release(self) -> None:
        with contextlib.suppress(Exception):
            self._response.release_conn()


class Kube:
    """JSON requests to one API server, with the credentials of a kubeconfig.

    Thread-safe: requests share one connection pool.

    Attributes:
        kubeconfig: The kubeconfig file the credentials come from.
        timeout: Default seconds a request may take.
    """

    def __init__(self, kubeconfig: Path, *, timeout: float = 15.0, pool_size: int = 32) -> None:
        """Load a kubeconfig.

        Args:
            kubeconfig: Path of the kubeconfig (its current context is used).
            timeout: Default seconds a request may take.
            pool_size: Connections kept open to the API server.
        """
        self.kubeconfig = kubeconfig
        self.timeout = timeout
        configuration = client.Configuration()
        configuration.connection_pool_maxsize = pool_size
        config.load_kube_config(
            config_file=str(kubeconfig),
            client_configuration=configuration,
            persist_config=False,
        )
        self._configuration = configuration
        self._client: Any = client.ApiClient(configuration=configuration)

    @property
    def server(self) -> str:
        """The API server URL, e.g. ``https://127.0.0.1:41234``."""
        return str(self._configuration.host).rstrip("/")

    @property
    def verify_tls(self) -> bool:
        """False when the kubeconfig says ``insecure-skip-tls-verify``."""
        return bool(self._configuration.verify_ssl)

    @property
    def tls_server_name(self) -> str | None:
        """The ``tls-server-name`` of the kubeconfig's cluster, if any."""
        name = getattr(self._configuration, "tls_server_name", None)
        return str(name) if name else None

    def ca_pem(self) -> bytes | None:
        """Return the CA bundle that verifies the API server, if the kubeconfig has one.

        Returns:
            PEM bytes, or None when the system's trust store is used.
        """
        path = self._configuration.ssl_ca_cert
        if not path:
            return None
        return Path(path).read_bytes()

    def close(self) -> None:
        """Close the connection pool."""
        with contextlib.suppress(Exception):
            self._client.close()

    def _open(
        self,
        method: str,
        path: str,
        query: Mapping[str, QueryValue] | None,
        body: Any,
        content_type: str,
        timeout: float | tuple[float, float] | None,
    ) -> Any:
        resource = path
        if query:
            resource += "?" + urlencode(
                {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in query.items()}
            )
        headers = {"Accept": JSON}
        if body is not None:
            headers["Content-Type"] = content_type
        _, url, headers, _, _ = self._client.param_serialize(
            method, resource, header_params=headers, auth_settings=["BearerToken"]
        )
        try:
            # The REST layer serialises the body as JSON (patch types too).
            response = self._client.call_api(
                method,
                url,
                header_params=headers,
                body=body,
                _request_timeout=self.timeout if timeout is None else timeout,
            )
        except client.ApiException as exc:
            raise KubeError(method, path, int(exc.status or 0), {"message": str(exc)}) from exc
        except Exception as exc:  # urllib3 transport errors
            raise KubeError(method, path, 0, {"message": f"{type(exc).__name__}: {exc}"}) from exc
        return response.response

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, QueryValue] | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Send one request and decode the JSON answer.

        Args:
            method: HTTP method.
            path: Path from the server root, e.g. ``/api/v1/nodes``.
            query: Query parameters.
            body: JSON-ready body.
            content_type: Content type of the body (e.g. `STRATEGIC_MERGE_PATCH`).
            timeout: Seconds the request may take; default `timeout`.

        Returns:
            The decoded answer (an empty dict for an empty one).

        Raises:
            KubeError: On a status other than 2xx, or when no answer came.
        """
        response = self._open(method, path, query, body, content_type, timeout)
        try:
            data = response.data
            status = int(response.status)
        except Exception as exc:
            raise KubeError(method, path, 0, {"message": f"{type(exc).__name__}: {exc}"}) from exc
        finally:
            with contextlib.suppress(Exception):
                response.release_conn()
        try:
            decoded = json.loads(data) if data else {}
        except ValueError:
            decoded = {"message": data[:500].decode("utf-8", "replace")}
        if not 200 <= status < 300:
            raise KubeError(method, path, status, decoded if isinstance(decoded, dict) else {})
        return decoded if isinstance(decoded, dict) else {"items": decoded}

    def get(self, path: str, **query: QueryValue) -> dict[str, Any]:
        """GET an object or a list.

        Args:
            path: Path from the server root.
            **query: Query parameters.

        Returns:
            The decoded object.
        """
        return self.request("GET", path, query=query)

    def get_or_none(self, path: str) -> dict[str, Any] | None:
        """GET an object, or None when it does not exist.

        Args:
            path: Path from the server root.

        Returns:
            The decoded object, or None on 404.

        Raises:
            KubeError: On any other error.
        """
        try:
            return self.get(path)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    def watch(
        self, path: str, query: Mapping[str, QueryValue], *, read_timeout: float
    ) -> WatchStream:
        """Open a watch (``watch=true`` is added).

        Args:
            path: Collection path, e.g. ``/api/v1/pods``.
            query: Query parameters (``resourceVersion``, ``fieldSelector``, ...).
            read_timeout: Seconds a read may block before the watch counts as dead.

        Returns:
            The open stream.

        Raises:
            KubeError: When the server refuses the watch (410 when the
                resource version is too old).
        """
        full = {**query, "watch": True}
        response = self._open("GET", path, full, None, JSON, (10.0, read_timeout))
        status = int(response.status)
        if status != 200:
            try:
                decoded = json.loads(response.data or b"{}")
            except ValueError:
                decoded = {}
            finally:
                with contextlib.suppress(Exception):
                    response.release_conn()
            raise KubeError("WATCH", path, status, decoded if isinstance(decoded, dict) else {})
        return WatchStream(response, "WATCH", path)
