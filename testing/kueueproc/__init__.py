"""Test tooling: a real Kueue manager as a local process, beside the local control plane.

Why this exists: the operator's Kueue integration (issue 30) is tested on the
local tier against the real thing, not a stand-in. ``hack/kueue/build.sh``
builds Kueue's manager (``sigs.k8s.io/kueue/cmd/kueue``) from the Go module
proxy into the project cache; this module applies Kueue's CRDs from the same
module (``config/components/crd/bases``) and runs that binary against the
local kube-apiserver with a configuration written for it:

- the external framework ``LeasedJob.v1alpha1.leasehold.dev``
  (``integrations.externalFrameworks``, parsed by ``schema.ParseKindArg`` in
  Kueue's ``pkg/controller/jobframework/integrationmanager.go``): Workloads
  owned by a LeasedJob are the operator's to create and run; Kueue admits,
  preempts and evicts them;
- leader election off (one manager);
- ``internalCertManagement.enable: false``: Kueue then neither makes its own
  CA nor injects CA bundles into webhook configurations and CRDs (that
  bootstrap blocks until those objects exist). Without it Kueue still reads
  certificates from files: the webhook server's from ``webhook.certDir`` (a
  self-signed pair written here, per process) and the metrics server's from
  the fixed path ``/etc/kueue/metrics/certs`` (``cmd/kueue/main.go``), which
  is read at start even when metrics are off (``metrics.bindAddress: "0"``,
  as here); :func:`ensure_metrics_certs` writes a pair there once, so this
  needs a process that may write ``/etc/kueue`` (root, as the test machines
  run);
- the webhook server listens on a loopback port but is NOT registered with
  the API server (no Mutating/ValidatingWebhookConfiguration): Kueue's
  defaulting and validating webhooks for its own objects (Workload,
  ClusterQueue, LocalQueue, ResourceFlavor, ...) and for jobs do not run
  here. Objects must be created complete (nothing is defaulted by a webhook;
  the CRDs' own OpenAPI defaults and CEL rules still apply) and invalid
  objects that Kueue's webhook would refuse are accepted by the API server.
  The kind tier installs Kueue with its chart, webhooks included;
- the visibility API server (feature gate ``VisibilityOnDemand``) off: it
  would bind a fixed port and needs an APIService.

From pytest: the ``kueue`` fixture in :mod:`kueueproc.pytest_plugin`.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from localcluster.kubectl import Kubectl
from localcluster.pki import cert_pem, key_pem
from ports import free_port

__all__ = [
    "API_VERSION",
    "EXTERNAL_FRAMEWORK",
    "KUEUE_VERSION",
    "KueueError",
    "KueueProcess",
    "Queue",
    "create_queue",
    "create_workload_priority_class",
    "ensure_metrics_certs",
    "install_crds",
    "kueue_binary",
    "kueue_source",
]

KUEUE_VERSION: Final = "v0.17.0"
"""The Kueue release built and run (``hack/kueue/build.sh``'s default)."""
API_VERSION: Final = "kueue.x-k8s.io/v1beta2"
"""The storage version Kueue v0.17 serves for its objects (v1beta1 is served too)."""
EXTERNAL_FRAMEWORK: Final = "LeasedJob.v1alpha1.leasehold.dev"
"""``Kind.version.group`` of the job type whose Workloads an external controller (ours) runs."""
METRICS_CERT_DIR: Final = Path("/etc/kueue/metrics/certs")
"""Where Kueue's manager reads its metrics certificate when internal cert management is off."""
DEFAULT_FLAVOR: Final = "default-flavor"
"""The ResourceFlavor (no node labels) every queue made by :func:`create_queue` uses."""

BUILD_SCRIPT: Final = Path(__file__).resolve().parents[2] / "hack" / "kueue" / "build.sh"
_CRD_NAMES: Final = (
    "workloads",
    "clusterqueues",
    "localqueues",
    "resourceflavors",
    "workloadpriorityclasses",
    "admissionchecks",
    "cohorts",
    "topologies",
)
_CERT_LIFETIME: Final = datetime.timedelta(days=365)


class KueueError(Exception):
    """Kueue could not be built, installed or started; the message says why."""


def _build(mode: str) -> Path:
    try:
        result = subprocess.run(
            [str(BUILD_SCRIPT), mode],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            check=False,
            text=True,
        )
    except OSError as exc:
        raise KueueError(f"cannot run {BUILD_SCRIPT}: {exc}") from exc
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        raise KueueError(f"{BUILD_SCRIPT} {mode} failed (exit {result.returncode}; stderr above)")
    return Path(lines[-1])


def kueue_binary() -> Path:
    """Return Kueue's manager binary, building it first if the cache lacks it.

    Returns:
        The executable's path (in ``$LEASEHOLD_CACHE_DIR/kueue/``).

    Raises:
        KueueError: If the build fails (cold: about 9 minutes).
    """
    return _build("bin")


def kueue_source() -> Path:
    """Return the Kueue module's folder (chart, CRDs, config) in the Go module cache.

    Returns:
        ``.../go-mod/sigs.k8s.io/kueue@v0.17.0``.

    Raises:
        KueueError: If the module cannot be downloaded.
    """
    return _build("src")


def install_crds(kubectl: Kubectl) -> None:
    """Apply Kueue's CRDs (``config/components/crd/bases``) and wait until they are Established.

    Args:
        kubectl: A runner bound to the cluster.

    Raises:
        KueueError: If the module is missing; KubectlError if applying fails.
    """
    bases = kueue_source() / "config" / "components" / "crd" / "bases"
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(bases))
    names = [f"crd/{name}.kueue.x-k8s.io" for name in _CRD_NAMES]
    for _ in range(20):
        # A CRD created a moment ago may have no conditions yet: kubectl wait then fails at once.
        done = kubectl("wait", "--for=condition=Established", "--timeout=60s", *names, check=False)
        if done.returncode == 0:
            return
        time.sleep(0.5)
    raise KueueError(f"Kueue's CRDs did not become Established:\n{done.stderr}")


def _self_signed(common_name: str) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=2))
        .not_valid_after(now + _CERT_LIFETIME)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    return cert_pem(cert), key_pem(key)


def _write_pair(folder: Path, common_name: str) -> None:
    """Write ``tls.crt`` and ``tls.key`` into ``folder`` atomically (a sibling folder renamed)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = folder.parent / f".{folder.name}.{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    crt, key = _self_signed(common_name)
    (staging / "tls.crt").write_bytes(crt)
    (staging / "tls.key").write_bytes(key)
    (staging / "tls.key").chmod(0o600)
    try:
        staging.rename(folder)
    except OSError:
        # Another test worker wrote it first: theirs serves as well.
        shutil.rmtree(staging, ignore_errors=True)


def ensure_metrics_certs() -> Path:
    """Make sure ``/etc/kueue/metrics/certs`` holds a certificate pair Kueue can read.

    Kueue's manager reads it at start when internal cert management is off,
    even with metrics served nowhere; any self-signed pair does. Written once,
    shared by every Kueue process on the machine.

    Returns:
        The folder.

    Raises:
        KueueError: If this process may not write there.
    """
    if (METRICS_CERT_DIR / "tls.crt").is_file() and (METRICS_CERT_DIR / "tls.key").is_file():
        return METRICS_CERT_DIR
    try:
        _write_pair(METRICS_CERT_DIR, "kueue-metrics")
    except OSError as exc:
        raise KueueError(
            f"Kueue {KUEUE_VERSION} reads its metrics certificate from {METRICS_CERT_DIR} "
            f"(fixed in cmd/kueue/main.go) and this process cannot write it: {exc}"
        ) from exc
    return METRICS_CERT_DIR


def manager_config(*, health_port: int, webhook_port: int, cert_dir: Path) -> dict[str, Any]:
    """Build the Kueue manager's ``Configuration`` for a local process.

    Args:
        health_port: Loopback port of ``/healthz`` and ``/readyz``.
        webhook_port: Loopback port of the (unregistered) webhook server.
        cert_dir: Folder with the webhook server's ``tls.crt`` and ``tls.key``.

    Returns:
        A ``config.kueue.x-k8s.io/v1beta2`` Configuration as a dict (JSON is YAML).
    """
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "featureGates": {"VisibilityOnDemand": False},
        "clientConnection": {"qps": 50, "burst": 100},
        "integrations": {
            "frameworks": ["batch/job"],
            "externalFrameworks": [EXTERNAL_FRAMEWORK],
        },
    }


class KueueProcess:
    """Kueue's manager as a local process against one API server.

    Args:
        kubeconfig: An admin kubeconfig of the cluster (Kueue's CRDs applied).
        workdir: A folder of its own: configuration, webhook certificate.
        log_path: Where its output goes.
        start_timeout_seconds: How long :meth:`start` waits for ``/readyz``.
    """

    def __init__(
        self,
        kubeconfig: Path,
        workdir: Path,
        log_path: Path,
        *,
        start_timeout_seconds: float = 90.0,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.log_path = log_path
        self.start_timeout_seconds = start_timeout_seconds
        self.health_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Write its configuration and certificates, start it, wait until ``/readyz`` answers 200.

        Raises:
            KueueError: If it cannot be built, exits, or is not ready in time (then stopped).
        """
        binary = kueue_binary()
        ensure_metrics_certs()
        cert_dir = self.workdir / "webhook-certs"
        if not (cert_dir / "tls.crt").is_file():
            _write_pair(cert_dir, "kueue-webhook")
        config = manager_config(
            health_port=self.health_port, webhook_port=free_port(), cert_dir=cert_dir
        )
        config_path = self.workdir / "kueue-config.yaml"
        config_path.write_text(json.dumps(config, indent=2))
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [str(binary), f"--config={config_path}", "--zap-log-level=2"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        self._wait_ready()

    def _wait_ready(self) -> None:
        assert self.proc is not None
        url = f"http://127.0.0.1:{self.health_port}/readyz"
        deadline = time.monotonic() + self.start_timeout_seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise KueueError(
                    f"Kueue exited with {self.proc.returncode}:\n{self.logs()[-4000:]}"
                )
            try:
                with urllib.request.urlopen(url, timeout=1):
                    return
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise KueueError(
            f"Kueue was not ready in {self.start_timeout_seconds:g} s:\n{self.logs()[-4000:]}"
        )

    def stop(self) -> None:
        """Stop it (SIGTERM, then SIGKILL after 15 s)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def logs(self) -> str:
        """Return everything it printed so far (its log file)."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@dataclass(frozen=True)
class Queue:
    """The queue objects :func:`create_queue` made.

    Attributes:
        namespace: The LocalQueue's namespace (the only one the ClusterQueue admits from).
        local_queue: The LocalQueue's name: the value of a job's ``kueue.x-k8s.io/queue-name``.
        cluster_queue: The ClusterQueue's name (cluster-scoped).
        flavor: The ResourceFlavor's name (cluster-scoped, shared).
    """

    namespace: str
    local_queue: str
    cluster_queue: str
    flavor: str


def create_queue(
    kubectl: Kubectl,
    namespace: str,
    quota: Mapping[str, str],
    *,
    name: str = "queue",
    preemption: Mapping[str, str] | None = None,
) -> Queue:
    """Create a ResourceFlavor (if missing), a ClusterQueue with a quota and a LocalQueue.

    The ClusterQueue is named after the namespace and admits Workloads from
    that namespace only, so tests in parallel namespaces never share quota.

    Args:
        kubectl: A runner bound to the cluster.
        namespace: The test's namespace.
        quota: ``nominalQuota`` per resource, e.g. ``{"cpu": "1"}``.
        name: The LocalQueue's name.
        preemption: The ClusterQueue's ``spec.preemption``; default
            ``withinClusterQueue: LowerPriority`` (a higher-priority Workload
            evicts a lower one when the quota is used up).

    Returns:
        The names made.

    Raises:
        KubectlError: If the API server refuses one of them.
    """
    cluster_queue = f"{namespace}-{name}"[:63].rstrip("-")
    flavor = {
        "apiVersion": API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": {"name": DEFAULT_FLAVOR},
    }
    resources = [{"name": res, "nominalQuota": amount} for res, amount in quota.items()]
    cq = {
        "apiVersion": API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {"name": cluster_queue},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "preemption": dict(preemption or {"withinClusterQueue": "LowerPriority"}),
            "resourceGroups": [
                {
                    "coveredResources": list(quota),
                    "flavors": [{"name": DEFAULT_FLAVOR, "resources": resources}],
                }
            ],
        },
    }
    lq = {
        "apiVersion": API_VERSION,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue},
    }
    for obj in (flavor, cq, lq):
        kubectl("apply", "--server-side", "-f", "-", input=json.dumps(obj))
    return Queue(
        namespace=namespace, local_queue=name, cluster_queue=cluster_queue, flavor=DEFAULT_FLAVOR
    )


def create_workload_priority_class(kubectl: Kubectl, name: str, value: int) -> None:
    """Create (or update) a cluster-scoped WorkloadPriorityClass.

    Args:
        kubectl: A runner bound to the cluster.
        name: Its name (a job's ``kueue.x-k8s.io/priority-class`` label value).
        value: Its priority; higher preempts lower.

    Raises:
        KubectlError: If the API server refuses it.
    """
    obj = {
        "apiVersion": API_VERSION,
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": name},
        "value": value,
    }
    kubectl("apply", "--server-side", "-f", "-", input=json.dumps(obj))
