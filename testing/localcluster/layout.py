"""Where a local cluster keeps its files, and which loopback ports it uses.

One place names every path in the work directory, so the cluster, the CLI
and the flag builders cannot disagree about where a certificate or a log is.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from ports import free_port

ETCD = "etcd"
APISERVER = "kube-apiserver"
CONTROLLER_MANAGER = "kube-controller-manager"
SCHEDULER = "kube-scheduler"

COMPONENTS = (ETCD, APISERVER, CONTROLLER_MANAGER, SCHEDULER)
"""Every component, in start order."""

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, both PEM files.

    Attributes:
        cert: Path of the certificate.
        key: Path of the private key.
    """

    cert: Path
    key: Path


@dataclass(frozen=True)
class Layout:
    """The files of one local cluster, all under its work directory.

    Attributes:
        workdir: Root folder of the cluster; created on start, never deleted.
    """

    workdir: Path

    @property
    def pki_dir(self) -> Path:
        """Folder of the CA, the certificates and the service-account keys."""
        return self.workdir / "pki"

    @property
    def etcd_data(self) -> Path:
        """The etcd data directory, emptied on every start."""
        return self.workdir / "etcd-data"

    @property
    def logs_dir(self) -> Path:
        """Folder of the component logs, one file per component."""
        return self.workdir / "logs"

    @property
    def flexvolume_dir(self) -> Path:
        """Flex volume plugin folder of the controller manager.

        The default is under ``/usr/libexec``, which the controller manager
        creates when it runs as root; this keeps it in the work directory.
        """
        return self.workdir / "flexvolume"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (``system:masters``) for people and tests."""
        return self.workdir / "kubeconfig"

    @property
    def state_file(self) -> Path:
        """JSON record of the running processes, removed on a clean stop."""
        return self.workdir / "state.json"

    def log(self, component: str) -> Path:
        """Return the log file of a component.

        Args:
            component: Component name, e.g. ``kube-apiserver``.

        Returns:
            The path ``<workdir>/logs/<component>.log``.
        """
        return self.logs_dir / f"{component}.log"

    def component_kubeconfig(self, component: str) -> Path:
        """Return the kubeconfig a component uses to reach the API server.

        Args:
            component: ``kube-controller-manager`` or ``kube-scheduler``.

        Returns:
            The path ``<workdir>/pki/<component>.kubeconfig``.
        """
        return self.pki_dir / f"{component}.kubeconfig"

    @property
    def ca(self) -> KeyPair:
        """The cluster CA; it signs every certificate and the kubelet CSRs."""
        return self._pair("ca")

    @property
    def front_proxy_ca(self) -> KeyPair:
        """CA of the front proxy, which the aggregation layer uses to call extension servers."""
        return self._pair("front-proxy-ca")

    @property
    def front_proxy_client(self) -> KeyPair:
        """Client certificate the API server presents to extension API servers."""
        return self._pair("front-proxy-client")

    @property
    def apiserver_serving(self) -> KeyPair:
        """Serving certificate of the API server."""
        return self._pair("kube-apiserver")

    @property
    def admin(self) -> KeyPair:
        """Client certificate of the admin user (``CN=admin,O=system:masters``)."""
        return self._pair("admin")

    def client(self, component: str) -> KeyPair:
        """Return the client certificate a component authenticates with.

        Args:
            component: ``kube-controller-manager`` or ``kube-scheduler``.

        Returns:
            The key pair ``<workdir>/pki/<component>-client.{crt,key}``.
        """
        return self._pair(f"{component}-client")

    def serving(self, component: str) -> KeyPair:
        """Return the serving certificate of a component's secure port.

        Args:
            component: ``kube-controller-manager`` or ``kube-scheduler``.

        Returns:
            The key pair ``<workdir>/pki/<component>-serving.{crt,key}``.
        """
        return self._pair(f"{component}-serving")

    @property
    def service_account(self) -> KeyPair:
        """The service-account token signing key; ``cert`` is the public key."""
        return KeyPair(cert=self.pki_dir / "sa.pub", key=self.pki_dir / "sa.key")

    def _pair(self, name: str) -> KeyPair:
        return KeyPair(cert=self.pki_dir / f"{name}.crt", key=self.pki_dir / f"{name}.key")


@dataclass(frozen=True)
class Ports:
    """The loopback ports of one cluster.

    Attributes:
        etcd_client: etcd client URL port (plain HTTP, loopback only).
        etcd_peer: etcd peer URL port; unused by a single member but bound.
        apiserver: kube-apiserver secure port.
        controller_manager: kube-controller-manager secure port (health, metrics).
        scheduler: kube-scheduler secure port (health, metrics).
    """

    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int

    @classmethod
    def pick(cls) -> Ports:
        """Find five free loopback ports.

        They come from `ports.free_port`: below the kernel's ephemeral range
        and handed out in turn across processes, so neither another test's
        server nor an outgoing connection takes one before the component binds
        it. Something outside the tests may still take one; the component then
        fails fast with "address already in use".

        Returns:
            Five distinct ports that were free a moment ago.
        """
        numbers = [free_port() for _ in range(5)]
        return cls(*numbers)

    def to_dict(self) -> dict[str, int]:
        """Return the ports as a JSON-ready mapping.

        Returns:
            Field name to port number.
        """
        return asdict(self)
