"""Health probes of the control plane components.

Probes use ``http.client`` directly: it never consults proxy settings, and
every component listens on loopback. TLS is verified against the cluster CA;
the admin client certificate is presented to the API server only, since the
controller manager and the scheduler always allow ``/healthz``.
"""

from __future__ import annotations

import http.client
import json
import ssl
from collections.abc import Callable
from dataclasses import dataclass

from localcluster.layout import (
    APISERVER,
    CONTROLLER_MANAGER,
    ETCD,
    LOOPBACK,
    SCHEDULER,
    Layout,
    Ports,
)

_TIMEOUT = 2.0


@dataclass(frozen=True)
class ProbeResult:
    """Outcome of one probe.

    Attributes:
        ok: The component is healthy.
        detail: What was seen, for error messages (e.g. the failing checks).
    """

    ok: bool
    detail: str


Probe = Callable[[], ProbeResult]


def _get(port: int, path: str, context: ssl.SSLContext | None = None) -> tuple[int, str]:
    connection: http.client.HTTPConnection
    if context is None:
        connection = http.client.HTTPConnection(LOOPBACK, port, timeout=_TIMEOUT)
    else:
        connection = http.client.HTTPSConnection(LOOPBACK, port, timeout=_TIMEOUT, context=context)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read().decode("utf-8", "replace")
    finally:
        connection.close()


def _attempt(port: int, path: str, context: ssl.SSLContext | None) -> tuple[int, str] | str:
    try:
        return _get(port, path, context)
    except ConnectionRefusedError:
        return f"nothing listens on port {port} yet"
    except (OSError, http.client.HTTPException) as exc:
        return f"GET {path} on port {port}: {exc!r}"


def client_context(layout: Layout, *, admin: bool) -> ssl.SSLContext:
    """Build a TLS context that trusts the cluster CA.

    Args:
        layout: The cluster's paths.
        admin: Also present the admin client certificate.

    Returns:
        The context.
    """
    context = ssl.create_default_context(cafile=str(layout.ca.cert))
    if admin:
        context.load_cert_chain(str(layout.admin.cert), str(layout.admin.key))
    return context


def etcd_probe(port: int) -> Probe:
    """Probe etcd's ``/health`` endpoint.

    Args:
        port: etcd client port.

    Returns:
        The probe.
    """

    def probe() -> ProbeResult:
        answer = _attempt(port, "/health", None)
        if isinstance(answer, str):
            return ProbeResult(False, answer)
        status, body = answer
        try:
            healthy = json.loads(body).get("health") == "true"
        except ValueError:
            healthy = False
        return ProbeResult(status == 200 and healthy, f"/health: HTTP {status} {body.strip()}")

    return probe


def apiserver_probe(port: int, context: ssl.SSLContext) -> Probe:
    """Probe ``/readyz?verbose`` of the API server: every check must pass.

    Args:
        port: API server secure port.
        context: TLS context with the admin client certificate.

    Returns:
        The probe; its detail lists the checks that do not pass yet.
    """

    def probe() -> ProbeResult:
        answer = _attempt(port, "/readyz?verbose", context)
        if isinstance(answer, str):
            return ProbeResult(False, answer)
        status, body = answer
        failing = [line.strip() for line in body.splitlines() if line.startswith("[-]")]
        if status == 200 and not failing:
            return ProbeResult(True, "readyz check passed")
        shown = "; ".join(failing) or body.strip()[:500]
        return ProbeResult(False, f"/readyz: HTTP {status}: {shown}")

    return probe


def healthz_probe(port: int, context: ssl.SSLContext) -> Probe:
    """Probe ``/healthz`` on the secure port of the controller manager or scheduler.

    Args:
        port: The component's secure port.
        context: TLS context trusting the cluster CA.

    Returns:
        The probe.
    """

    def probe() -> ProbeResult:
        answer = _attempt(port, "/healthz", context)
        if isinstance(answer, str):
            return ProbeResult(False, answer)
        status, body = answer
        return ProbeResult(status == 200, f"/healthz: HTTP {status} {body.strip()[:500]}")

    return probe


def api_object_probe(port: int, context: ssl.SSLContext, path: str, why: str) -> Probe:
    """Probe that an API object exists, proof that some controller has run.

    Args:
        port: API server secure port.
        context: TLS context with the admin client certificate.
        path: API path of the object.
        why: What the object's absence means, for the error message.

    Returns:
        The probe.
    """

    def probe() -> ProbeResult:
        answer = _attempt(port, path, context)
        if isinstance(answer, str):
            return ProbeResult(False, answer)
        status, _ = answer
        return ProbeResult(status == 200, f"GET {path}: HTTP {status} ({why})")

    return probe


def all_of(*probes: Probe) -> Probe:
    """Combine probes: healthy when each is, in order, stopping at the first failure.

    Args:
        *probes: The probes.

    Returns:
        The combined probe.
    """

    def probe() -> ProbeResult:
        result = ProbeResult(True, "no probes")
        for each in probes:
            result = each()
            if not result.ok:
                return result
        return result

    return probe


def component_probes(layout: Layout, ports: Ports) -> dict[str, Probe]:
    """Return the basic health probe of each component, by component name.

    Args:
        layout: The cluster's paths (for the CA and the admin certificate).
        ports: The cluster's ports.

    Returns:
        Probes for etcd, kube-apiserver, kube-controller-manager and kube-scheduler.
    """
    admin = client_context(layout, admin=True)
    anonymous = client_context(layout, admin=False)
    return {
        ETCD: etcd_probe(ports.etcd_client),
        APISERVER: apiserver_probe(ports.apiserver, admin),
        CONTROLLER_MANAGER: healthz_probe(ports.controller_manager, anonymous),
        SCHEDULER: healthz_probe(ports.scheduler, anonymous),
    }
