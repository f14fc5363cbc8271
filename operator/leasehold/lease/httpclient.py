"""The lease writes over the standard library's ``http.client``: ``leasehold run``'s client.

Why this module exists: every ``leasehold run`` is a fresh Python process
started with its job, and importing the ``kubernetes`` client package (and
pydantic) was most of its start-up CPU, paid once per job. A holder sends only
a few JSON patches to one resource, so this client speaks them over
``http.client`` + ``ssl``: the same requests, ``test`` ops and retry logic as
:class:`~leasehold.lease.store.LeaseStore` (both are a
:class:`~leasehold.lease.leaseops.LeaseWriter`), the same error types. It finds
its cluster the way :func:`leasehold.lease.kubeclient.new_api_client` does:
``$KUBECONFIG`` (a ``:``-separated list, merged as kubectl does), else the
pod's service account. Connections are kept alive and reused.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import select
import ssl
import tempfile
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from leasehold import names
from leasehold.lease.errors import TransientStoreError, not_found_error, status_error
from leasehold.lease.leaseops import LeaseWriter, StoredLease, utcnow

KUBECONFIG_ENV: Final = "KUBECONFIG"
SERVICE_ACCOUNT_DIR: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount")
"""Where a pod finds its service account's token and the cluster's CA."""

_JSON_PATCH: Final = "application/json-patch+json"
_IDLE_CONNECTIONS: Final = 4
"""Keep-alive connections kept for reuse (a holder uses one, two at most)."""


class ClusterConfigError(Exception):
    """No usable cluster configuration.

    No kubeconfig and not in a pod, or one this client cannot use (an
    ``exec`` or ``auth-provider`` user).
    """


@dataclass(frozen=True)
class ClusterConfig:
    """Where the API server is and how to authenticate to it.

    Attributes:
        host: the API server's host name or address.
        port: its port.
        tls: the TLS context (``None``: plain HTTP).
        tls_server_name: the name to verify its certificate against (``None``: ``host``).
        headers: fixed headers (basic authentication), if any.
        token: a bearer token, if any.
        token_file: a file holding the bearer token, read at each request (a
            pod's projected token is rotated in place), if any.
        path_prefix: the server URL's path, put before every API path (an API
            server behind a proxy, e.g. ``https://host/k8s/clusters/c-x``), or ``""``.
    """

    host: str
    port: int
    tls: ssl.SSLContext | None
    tls_server_name: str | None = None
    headers: Mapping[str, str] | None = None
    token: str | None = None
    token_file: Path | None = None
    path_prefix: str = ""

    def auth_headers(self) -> dict[str, str]:
        """The headers that authenticate one request."""
        headers = dict(self.headers or {})
        token = self.token
        if self.token_file is not None:
            token = self.token_file.read_text().strip()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers


def load_cluster_config(kubeconfig: str | os.PathLike[str] | None = None) -> ClusterConfig:
    """Find the cluster: ``kubeconfig``, else ``$KUBECONFIG``, else the pod's service account.

    ``~/.kube/config`` is never used implicitly (as for
    :func:`~leasehold.lease.kubeclient.new_api_client`).

    Raises:
        ClusterConfigError: nothing found, or a configuration this client cannot use.
    """
    path = os.fspath(kubeconfig) if kubeconfig is not None else os.environ.get(KUBECONFIG_ENV)
    if path:
        return _from_kubeconfig([Path(p) for p in path.split(os.pathsep) if p])
    return _in_cluster()


def _in_cluster() -> ClusterConfig:
    host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "")
    token_file = SERVICE_ACCOUNT_DIR / "token"
    if not host or not port or not token_file.is_file():
        raise ClusterConfigError(
            "no KUBECONFIG and not in a pod (KUBERNETES_SERVICE_HOST/PORT or the"
            f" service account token at {token_file} missing)"
        )
    tls = ssl.create_default_context(cafile=str(SERVICE_ACCOUNT_DIR / "ca.crt"))
    return ClusterConfig(host=host, port=int(port), tls=tls, token_file=token_file)


def _load_document(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ClusterConfigError(f"cannot read kubeconfig {path}: {exc}") from exc
    try:
        document = json.loads(text)  # the common case in tests and tools: JSON, which is YAML
    except ValueError:
        import yaml  # only for a YAML kubeconfig

        document = yaml.safe_load(text)
    if not isinstance(document, dict):
        raise ClusterConfigError(f"kubeconfig {path} is not a mapping")
    return document


def _from_kubeconfig(paths: list[Path]) -> ClusterConfig:
    """Merge the kubeconfigs as kubectl does (the first file to name a thing wins)."""
    entries: dict[str, dict[str, tuple[Path, dict[str, Any]]]] = {
        "clusters": {},
        "users": {},
        "contexts": {},
    }
    current = ""
    for path in paths:
        if not path.is_file():
            continue
        document = _load_document(path)
        current = current or str(document.get("current-context") or "")
        for kind, found in entries.items():
            for item in document.get(kind) or []:
                key = kind[:-1]  # "clusters" -> "cluster"
                found.setdefault(str(item.get("name")), (path.parent, item.get(key) or {}))
    if not current or current not in entries["contexts"]:
        raise ClusterConfigError(f"kubeconfig {os.pathsep.join(map(str, paths))}: no context")
    _, context = entries["contexts"][current]
    if str(context.get("cluster")) not in entries["clusters"]:
        raise ClusterConfigError(f"kubeconfig context {current}: no cluster")
    cluster_dir, cluster = entries["clusters"][str(context["cluster"])]
    user_dir, user = entries["users"].get(str(context.get("user")), (cluster_dir, {}))
    return _config(cluster_dir, cluster, user_dir, user)


def _file_or_data(base: Path, entry: Mapping[str, Any], key: str) -> bytes | None:
    """The bytes of ``key-data`` (base64), else of the file ``key`` (relative to ``base``)."""
    data = entry.get(f"{key}-data")
    if data:
        return base64.b64decode(data)
    name = entry.get(key)
    if name:
        return (base / str(name)).read_bytes()
    return None


def _config(
    cluster_dir: Path, cluster: Mapping[str, Any], user_dir: Path, user: Mapping[str, Any]
) -> ClusterConfig:
    if user.get("exec") or user.get("auth-provider"):
        raise ClusterConfigError(
            "kubeconfig user uses exec/auth-provider credentials, which leasehold run's"
            " client does not run; give it a token or a client certificate"
        )
    url = urllib.parse.urlsplit(str(cluster.get("server") or ""))
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ClusterConfigError(f"kubeconfig cluster server {cluster.get('server')!r} is no URL")
    tls: ssl.SSLContext | None = None
    if url.scheme == "https":
        ca = _file_or_data(cluster_dir, cluster, "certificate-authority")
        tls = ssl.create_default_context(cadata=ca.decode("ascii") if ca else None)
        if cluster.get("insecure-skip-tls-verify"):
            tls.check_hostname = False
            tls.verify_mode = ssl.CERT_NONE
        cert = _file_or_data(user_dir, user, "client-certificate")
        key = _file_or_data(user_dir, user, "client-key")
        if cert and key:
            _load_cert_chain(tls, cert, key)
    headers: dict[str, str] = {}
    if user.get("username"):
        pair = f"{user['username']}:{user.get('password', '')}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
    token_file = user.get("tokenFile")
    return ClusterConfig(
        host=url.hostname,
        port=url.port or (443 if url.scheme == "https" else 80),
        tls=tls,
        tls_server_name=cluster.get("tls-server-name") or None,
        headers=headers or None,
        token=user.get("token") or None,
        token_file=(user_dir / str(token_file)) if token_file else None,
        path_prefix=url.path.rstrip("/"),
    )


def _load_cert_chain(tls: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """Load a client certificate given as bytes (``ssl`` reads only files)."""
    with tempfile.TemporaryDirectory(prefix="leasehold-") as tmp:
        cert_file, key_file = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
        for path, data in ((cert_file, cert), (key_file, key)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
        tls.load_cert_chain(str(cert_file), str(key_file))


class _Connection(http.client.HTTPSConnection):
    """An HTTPS connection that verifies the certificate against ``tls_server_name``."""

    def __init__(self, config: ClusterConfig, timeout: float | None) -> None:
        super().__init__(config.host, config.port, timeout=timeout, context=config.tls)
        self._server_name = config.tls_server_name or config.host
        self._tls = config.tls

    def connect(self) -> None:
        """Open the TCP connection, then TLS with the configured server name."""
        http.client.HTTPConnection.connect(self)
        assert self._tls is not None
        self.sock = self._tls.wrap_socket(self.sock, server_hostname=self._server_name)


def _dropped(connection: http.client.HTTPConnection) -> bool:
    """Whether an idle keep-alive connection was closed by the server (readable = EOF)."""
    sock = connection.sock
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class HttpLeaseClient(LeaseWriter):
    """A holder's lease operations on the standard library: claim, renew, complete, release.

    The requests, their ``test`` ops and their retries are
    :class:`~leasehold.lease.store.LeaseStore`'s (:class:`LeaseWriter`), and so
    are the errors: :class:`~leasehold.lease.errors.LeaseNotFoundError`,
    :class:`~leasehold.lease.errors.WriteRefusedError` (409/422, handled
    inside), :class:`~leasehold.lease.errors.TransientStoreError` (no answer,
    429, 5xx, timeouts) and :class:`~leasehold.lease.errors.StoreError`.
    Thread-safe: each request takes its own connection from a small pool.

    Args:
        config: the cluster (:func:`load_cluster_config`).
        clock: wall clock for the times recorded for people.
        field_manager: the ``fieldManager`` sent with every write.
        request_timeout_seconds: bound on each request without its own
            ``request_timeout`` (``None``: wait forever).
    """

    def __init__(
        self,
        config: ClusterConfig,
        *,
        clock: Callable[[], datetime] = utcnow,
        field_manager: str = "leasehold",
        request_timeout_seconds: float | None = None,
    ) -> None:
        super().__init__(clock=clock)
        self._config = config
        self._field_manager = field_manager
        self._default_timeout = request_timeout_seconds
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def from_environment(cls, kubeconfig: str | os.PathLike[str] | None = None) -> HttpLeaseClient:
        """A client for the cluster :func:`load_cluster_config` finds.

        Raises:
            ClusterConfigError: no usable cluster configuration.
        """
        return cls(load_cluster_config(kubeconfig))

    # -- connections --------------------------------------------------------

    def _new_connection(self, timeout: float | None) -> http.client.HTTPConnection:
        if self._config.tls is None:
            return http.client.HTTPConnection(self._config.host, self._config.port, timeout=timeout)
        return _Connection(self._config, timeout)

    @contextlib.contextmanager
    def _connection(self, timeout: float | None) -> Iterator[http.client.HTTPConnection]:
        """A connection for one request, back to the pool after a clean answer."""
        connection = None
        with self._lock:
            while self._idle and connection is None:
                candidate = self._idle.pop()
                if _dropped(candidate):
                    candidate.close()
                else:
                    connection = candidate
        if connection is None:
            connection = self._new_connection(timeout)
        connection.timeout = timeout
        if connection.sock is not None:
            connection.sock.settimeout(timeout)
        try:
            yield connection
        except BaseException:
            connection.close()
            raise
        with self._lock:
            if not self._closed and len(self._idle) < _IDLE_CONNECTIONS:
                self._idle.append(connection)
                return
        connection.close()

    def close(self) -> None:
        """Close the kept connections (idempotent); requests after it open new ones."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    # -- requests -----------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        *,
        action: str,
        namespace: str,
        name: str | None = None,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        request_timeout: float | None = None,
    ) -> dict[str, Any]:
        """Send one request; return the JSON answer or raise the store's error for it."""
        timeout = request_timeout if request_timeout is not None else self._default_timeout
        target = namespace if name is None else f"{namespace}/{name}"
        url = path + ("?" + urllib.parse.urlencode(query) if query else "")
        headers = {"Accept": "application/json", **self._config.auth_headers()}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = _JSON_PATCH
        try:
            with self._connection(timeout) as connection:
                connection.request(method, url, body=payload, headers=headers)
                response = connection.getresponse()
                data = response.read()
                status = response.status
                reason = response.reason
        except (OSError, http.client.HTTPException) as exc:  # socket.timeout is an OSError
            raise TransientStoreError(f"{action} {target}: {exc!r}") from exc
        if 200 <= status < 300:
            try:
                answer = json.loads(data)
            except ValueError as exc:
                raise TransientStoreError(f"{action} {target}: answer is no JSON") from exc
            if not isinstance(answer, dict):
                raise TransientStoreError(f"{action} {target}: answer is no object")
            return answer
        if status == 404 and name is not None:
            raise not_found_error(data, namespace, name, action)
        raise status_error(status, _status_message(data, reason), f"{action} {target}")

    def _path(self, namespace: str, name: str | None = None) -> str:
        quote = urllib.parse.quote
        path = (
            f"{self._config.path_prefix}/apis/{names.GROUP}/{names.VERSION}"
            f"/namespaces/{quote(namespace, safe='')}/{names.PLURAL_JOB_LEASES}"
        )
        return path if name is None else f"{path}/{quote(name, safe='')}"

    def _read(
        self, namespace: str, name: str, request_timeout: float | None = None
    ) -> dict[str, Any]:
        """GET the JobLease's body."""
        return self._request(
            "GET",
            self._path(namespace, name),
            action="get",
            namespace=namespace,
            name=name,
            request_timeout=request_timeout,
        )

    def _patch(
        self,
        action: str,
        namespace: str,
        name: str,
        ops: list[dict[str, Any]],
        request_timeout: float | None = None,
    ) -> dict[str, Any]:
        """Send one JSON patch; a refusal raises :class:`WriteRefusedError`."""
        return self._request(
            "PATCH",
            self._path(namespace, name),
            action=action,
            namespace=namespace,
            name=name,
            query={"fieldManager": self._field_manager},
            body=ops,
            request_timeout=request_timeout,
        )

    def list_leases(
        self, namespace: str, *, label_selector: str | None = None
    ) -> list[StoredLease]:
        """Read all leases of a namespace, optionally matching ``label_selector``."""
        answer = self._request(
            "GET",
            self._path(namespace),
            action="list",
            namespace=namespace,
            query={"labelSelector": label_selector} if label_selector else None,
        )
        return [self._parse(item) for item in answer.get("items") or []]


def _status_message(data: bytes, reason: str) -> str:
    """The ``message`` of a Kubernetes Status body, else the HTTP reason."""
    try:
        body = json.loads(data or b"{}")
    except ValueError:
        return reason
    return str(body.get("message") or reason) if isinstance(body, dict) else reason
