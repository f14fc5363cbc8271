"""`LocalCluster`: etcd, kube-apiserver, kube-controller-manager and kube-scheduler.

The start sequence is the one envtest and kwokctl's binary runtime use: etcd,
then the API server, then the two clients. Each step waits until the
component is healthy before the next starts, so a failure names the
component that caused it, not the first one that noticed. There is no
kubelet: pods get created and stay Pending until something plays one.

Each start is fresh: a new PKI and an empty etcd data directory. Logs stay in
``<workdir>/logs`` after a stop, until the next start in the same work
directory overwrites them.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from localcluster.binaries import check_binaries, control_plane_bin_dir
from localcluster.components import (
    apiserver_args,
    controller_manager_args,
    etcd_args,
    scheduler_args,
)
from localcluster.errors import ComponentError, StateError
from localcluster.kubeconfig import write_kubeconfig
from localcluster.layout import (
    APISERVER,
    CONTROLLER_MANAGER,
    ETCD,
    LOOPBACK,
    SCHEDULER,
    Layout,
    Ports,
)
from localcluster.pki import create_pki
from localcluster.probes import (
    Probe,
    ProbeResult,
    all_of,
    api_object_probe,
    client_context,
    component_probes,
)
from localcluster.process import Process, spawn, stop_all, tail
from localcluster.state import ClusterState, clear_state, load_state, save_state
from ports import free_port

_POLL_INTERVAL = 0.1

ArgsBuilder = Callable[[Layout, Ports], list[str]]


class LocalCluster:
    """A real Kubernetes control plane on loopback ports, without a kubelet.

    Use it as a context manager, or call `start` and `stop`::

        with LocalCluster(tmp_path) as cluster:
            subprocess.run(["kubectl", "--kubeconfig", str(cluster.kubeconfig), ...])

    Attributes:
        layout: Paths of the work directory.
        timeout: Seconds each component gets to become healthy.
        stop_with_parent: Have the kernel stop the components when the thread
            that started them dies (Linux only). Leave it off for a cluster
            that must outlive its starter, as ``localcluster up`` does.
        timings: Seconds from the call to `start` until each component was
            healthy, plus ``"total"``; filled in by `start`.
    """

    def __init__(
        self,
        workdir: Path,
        bin_dir: Path | None = None,
        *,
        timeout: float = 60.0,
        stop_with_parent: bool = False,
    ) -> None:
        """Describe a cluster; nothing starts until `start`.

        Args:
            workdir: Folder for PKI, etcd data, kubeconfigs and logs; created if needed.
            bin_dir: Folder with etcd, kube-apiserver, kube-controller-manager and
                kube-scheduler. None runs ``hack/controlplane/build.sh`` to get it.
            timeout: Seconds each component gets to become healthy.
            stop_with_parent: See the class attribute.
        """
        self.layout = Layout(Path(workdir).absolute())
        self.timeout = timeout
        self.stop_with_parent = stop_with_parent
        self.timings: dict[str, float] = {}
        self._bin_dir = bin_dir
        self._used_bin_dir: Path = Path()
        self._ports: Ports | None = None
        self._processes: dict[str, Process] = {}

    @property
    def kubeconfig(self) -> Path:
        """Path of the admin kubeconfig (written by `start`)."""
        return self.layout.kubeconfig

    @property
    def ports(self) -> Ports:
        """The loopback ports in use.

        Raises:
            StateError: If the cluster was never started.
        """
        if self._ports is None:
            raise StateError("the cluster has not been started")
        return self._ports

    @property
    def server(self) -> str:
        """URL of the API server, e.g. ``https://127.0.0.1:41234``.

        Raises:
            StateError: If the cluster was never started.
        """
        return f"https://{LOOPBACK}:{self.ports.apiserver}"

    @property
    def processes(self) -> dict[str, Process]:
        """The started components by name (empty when stopped)."""
        return dict(self._processes)

    def start(self) -> Path:
        """Start the control plane and wait until every component is healthy.

        Returns:
            Path of the admin kubeconfig.

        Raises:
            StateError: If this object already started, or another cluster
                still runs in the same work directory.
            BuildError: If the binaries cannot be found or built.
            ComponentError: If a component exits or is not healthy within
                `timeout`; the message has the tail of its log. Components
                already started are stopped again before this is raised.
        """
        if self._processes:
            raise StateError(f"the cluster in {self.layout.workdir} is already started")
        self._refuse_if_running()
        bin_dir = self._bin_dir if self._bin_dir is not None else control_plane_bin_dir()
        # Absolute, because the processes run in the work directory and the
        # state file must name the binaries the way /proc shows them.
        bin_dir = bin_dir.absolute()
        check_binaries(bin_dir)
        self._used_bin_dir = bin_dir

        began = time.monotonic()
        self.timings = {}
        ports = self._ports = Ports.pick()
        self._prepare_workdir(ports)
        probes = component_probes(self.layout, ports)
        admin = client_context(self.layout, admin=True)
        try:
            self._run(bin_dir, ETCD, etcd_args, probes[ETCD], began)
            self._run(bin_dir, APISERVER, apiserver_args, probes[APISERVER], began)
            # The two clients start together; neither waits for the other.
            scheduler = self._spawn(bin_dir, SCHEDULER, scheduler_args)
            manager = self._spawn(bin_dir, CONTROLLER_MANAGER, controller_manager_args)
            self._wait(scheduler, probes[SCHEDULER], began)
            self._wait(
                manager,
                all_of(
                    probes[CONTROLLER_MANAGER],
                    # Controllers running under their own service-account
                    # credentials is the real sign of a working manager.
                    api_object_probe(
                        ports.apiserver,
                        admin,
                        "/api/v1/namespaces/default/serviceaccounts/default",
                        "the serviceaccount controller has not run yet",
                    ),
                    api_object_probe(
                        ports.apiserver,
                        admin,
                        "/api/v1/namespaces/default/configmaps/kube-root-ca.crt",
                        "the root CA publisher has not run yet",
                    ),
                ),
                began,
            )
        except BaseException:
            self.stop()
            raise
        self.timings["total"] = time.monotonic() - began
        return self.kubeconfig

    def restart(self, component: str, *, down_seconds: float = 0.0, grace: float = 10.0) -> None:
        """Stop one component, keep it down a while, start it again and wait until healthy.

        For fault-injection runs: restarting ``etcd`` or ``kube-apiserver``
        makes every client see its connections drop and its watches end.

        Args:
            component: ``etcd``, ``kube-apiserver``, ``kube-controller-manager``
                or ``kube-scheduler``.
            down_seconds: how long it stays stopped.
            grace: seconds between SIGTERM and SIGKILL.

        Raises:
            StateError: the cluster is not started or has no such component.
            ComponentError: it does not come back healthy within ``timeout``.
        """
        process = self._processes.get(component)
        if process is None:
            raise StateError(f"no running component {component!r} to restart")
        stop_all([[process]], grace)
        time.sleep(down_seconds)
        builders = {
            ETCD: etcd_args,
            APISERVER: apiserver_args,
            SCHEDULER: scheduler_args,
            CONTROLLER_MANAGER: controller_manager_args,
        }
        probes = component_probes(self.layout, self.ports)
        self._run(
            self._used_bin_dir, component, builders[component], probes[component], time.monotonic()
        )

    def add_apiserver(self, name: str = f"{APISERVER}-2") -> int:
        """Start one more kube-apiserver on the same etcd and PKI, as in an HA control plane.

        Clients that reach the API servers through one address (a TCP proxy
        standing in for a load balancer) can then live through a rolling
        restart. The new server stops with the cluster, or with
        :meth:`stop_component`.

        Args:
            name: the process name; must start with ``kube-apiserver-``.

        Returns:
            The new server's loopback port (same CA, same certificate names).

        Raises:
            StateError: the cluster is not started, or ``name`` is taken or malformed.
            ComponentError: it is not healthy within ``timeout``.
        """
        if not self._processes:
            raise StateError("the cluster has not been started")
        if not name.startswith(f"{APISERVER}-") or name in self._processes:
            raise StateError(f"cannot add an API server named {name!r}")
        port = free_port()
        ports = dataclasses.replace(self.ports, apiserver=port)
        process = spawn(
            name,
            self._used_bin_dir / APISERVER,
            apiserver_args(self.layout, ports),
            self.layout.log(name),
            cwd=self.layout.workdir,
            stop_with_parent=self.stop_with_parent,
        )
        self._processes[name] = process
        save_state(self.layout, self._state())
        self._wait(process, component_probes(self.layout, ports)[APISERVER], time.monotonic())
        return port

    def stop_component(self, name: str, grace: float = 10.0) -> None:
        """Stop one component for good (e.g. an API server from :meth:`add_apiserver`).

        Raises:
            StateError: no such running component.
        """
        process = self._processes.pop(name, None)
        if process is None:
            raise StateError(f"no running component {name!r}")
        stop_all([[process]], grace)
        save_state(self.layout, self._state())

    def stop(self, grace: float = 10.0) -> None:
        """Stop every started component: SIGTERM, then SIGKILL after ``grace`` s.

        Clients stop before the API server, the API server before etcd. Logs,
        PKI and etcd data stay; only the state file is removed. Calling it
        again, or on a cluster that never started, does nothing.

        Args:
            grace: Seconds each stop wave waits before SIGKILL.
        """
        if not self._processes:
            return
        state = self._state()
        stop_all(state.stop_waves(), grace)
        self._processes.clear()
        clear_state(self.layout)

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _refuse_if_running(self) -> None:
        previous = load_state(self.layout)
        if previous is None:
            return
        alive = previous.running()
        if alive:
            pids = ", ".join(f"{p.name} {p.pid}" for p in alive)
            raise StateError(
                f"a cluster still runs in {self.layout.workdir} ({pids}); "
                f"stop it first: python -m localcluster down --workdir {self.layout.workdir}"
            )
        clear_state(self.layout)

    def _prepare_workdir(self, ports: Ports) -> None:
        layout = self.layout
        layout.workdir.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(layout.etcd_data, ignore_errors=True)
        layout.etcd_data.mkdir(mode=0o700)
        layout.logs_dir.mkdir(exist_ok=True)
        create_pki(layout)
        server = f"https://{LOOPBACK}:{ports.apiserver}"
        for component in (CONTROLLER_MANAGER, SCHEDULER):
            write_kubeconfig(
                layout.component_kubeconfig(component),
                server,
                layout.ca.cert,
                layout.client(component),
                user=component,
            )
        write_kubeconfig(layout.kubeconfig, server, layout.ca.cert, layout.admin, user="admin")

    def _spawn(self, bin_dir: Path, name: str, args: ArgsBuilder) -> Process:
        process = spawn(
            name,
            bin_dir / name,
            args(self.layout, self.ports),
            self.layout.log(name),
            cwd=self.layout.workdir,
            stop_with_parent=self.stop_with_parent,
        )
        self._processes[name] = process
        save_state(self.layout, self._state())
        return process

    def _run(self, bin_dir: Path, name: str, args: ArgsBuilder, probe: Probe, began: float) -> None:
        self._wait(self._spawn(bin_dir, name, args), probe, began)

    def _wait(self, process: Process, probe: Probe, began: float) -> None:
        deadline = time.monotonic() + self.timeout
        last = ProbeResult(False, "not probed yet")
        while True:
            if not process.running():
                code = process.exit_code()
                raise ComponentError(
                    process.name,
                    f"exited with code {code} before it was healthy (last probe: {last.detail})",
                    process.log,
                    tail(process.log),
                )
            last = probe()
            if last.ok:
                self.timings[process.name] = time.monotonic() - began
                return
            if time.monotonic() >= deadline:
                raise ComponentError(
                    process.name,
                    f"not healthy within {self.timeout:g}s (last probe: {last.detail})",
                    process.log,
                    tail(process.log),
                )
            time.sleep(_POLL_INTERVAL)

    def _state(self) -> ClusterState:
        return ClusterState(
            workdir=self.layout.workdir,
            kubeconfig=self.layout.kubeconfig,
            server=self.server,
            ports=self.ports,
            processes=tuple(self._processes.values()),
        )
