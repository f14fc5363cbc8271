"""``make chaos-kind``: the chaos run on the multi-node kind cluster, faults of real nodes.

The same run as :mod:`chaos.run` (workload, history, both judges, table), on
the kind cluster of ``make kind-up`` with the chart-installed operator from
the built image (``make image kind-load``). What differs:

* workers are pods on real nodes, running :mod:`chaos.kind_worker` on the
  leasehold image; ``psycopg`` and ``testing/chaos`` are copied onto every node
  (``docker cp``) and mounted read-only (hostPath), so no second image is
  loaded. Each worker appends its history records to a file on its node (a
  hostPath); the run gathers every node's file at the end. The records'
  times are the machine's raw monotonic clock: nodes are containers on one
  kernel, so ``t`` and ``call`` compare across them as across processes;
* PostgreSQL (the fenced target) runs on the host; pods reach it through a
  proxy listening on the kind network's gateway address;
* the workload is :mod:`chaos.run`'s: plain jobs (retried by reclaims,
  ``maxAttempts`` 8), jobs suspended and resumed once while they run
  (``spec.suspend``), Indexed jobs (3 completions, 2 at a time; each index
  its own lease), and a LeasedCronJob per concurrency policy (Forbid,
  Replace, Allow; ``* * * * *``) whose runs outlast their minute now and
  then; some Indexed jobs and cron runs are suspended and resumed too;
* the faults, on a seeded, logged schedule:

  - ``node-freeze``: ``docker pause`` of a worker node (kubelet, containerd
    and its pods stop) past the lease, then ``docker unpause``;
  - ``node-partition``: the node drops everything to and from the
    control-plane node (iptables in the node: its kubelet and its pods) past
    the lease, then heals (as ``tests/kind/test_real_node_faults.py``);
  - ``kubelet-stop``: ``systemctl stop kubelet`` on a node, later ``start``;
  - ``operator-kill``: the operator's pod deleted at once (``--force``);
  - ``evict``: a running worker's pod evicted (``POST pods/eviction``, as
    ``kubectl drain`` does);
  - ``apiserver-restart``, ``etcd-restart``: the static pod's manifest moved
    out of the control-plane node's manifest folder (the kubelet stops the
    pod), back a few seconds later (a new pod: no crash-loop back-off); node
    faults go on meanwhile; the next control-plane restart or operator kill
    waits until the API server answers again.

Usage: ``PYTHONPATH=testing .venv/bin/python -m chaos.kind --seed 7`` (the
cluster, image and chart as ``make chaos-kind`` leaves them).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from kubernetes import client, config

from chaos import judge
from chaos.run import REPO, Run, add_cron_arguments, log
from faultproxy import TcpProxy
from leasehold.fencing.postgres import install
from leasehold.lease.store import LeaseStore
from pgserver import PostgresServer

IMAGE = "leasehold:0.1.0"
"""What ``make image`` builds and ``make kind-load`` loads: the operator's and the workers'."""
OPERATOR_NAMESPACE = "leasehold-system"
OPERATOR_SELECTOR = "app.kubernetes.io/instance=leasehold"
NODE_DIR = "/var/lib/leasehold-chaos"
"""On every node: ``lib/`` (psycopg and ``chaos``) and one history folder per run."""
LEASE_SECONDS = 15
"""The jobs' leaseDurationSeconds: a pod on a loaded 2-core kind node may take 5-10 s to start
its worker after the claim (a 5 s lease expired before the worker first renewed)."""
STARTUP_SECONDS = 90
MAX_ATTEMPTS = 8
PREFIX = "chaos-"
"""Every run's LeasedJobs are ``chaos-<run>-job-NNN``, its cron jobs
``chaos-<run>-cron-<policy>`` (their runs ``...-<unix minutes>``): a name never
reused (a job recreated under an earlier run's name would adopt its lease, a
lifecycle the checkers do not model); leftovers of an earlier run are deleted first."""


def kind_env(cluster: str, kubeconfig: Path) -> dict[str, str]:
    """The environment of every kubectl/helm/kind/docker call: tools on PATH, DOCKER_HOST.

    Args:
        cluster: the kind cluster's name.
        kubeconfig: where to write the cluster's kubeconfig (``kind export``).

    Returns:
        The environment.

    Raises:
        subprocess.CalledProcessError: a tool could not be built or the cluster is missing.
    """

    def last_line(*argv: str) -> str:
        out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
        return out.strip().splitlines()[-1]

    tools = last_line(str(REPO / "hack" / "tools.sh"))
    kind = str(Path(last_line(str(REPO / "hack" / "kind" / "kind.sh"))).parent)
    env = {
        **os.environ,
        "DOCKER_HOST": last_line(str(REPO / "hack" / "docker" / "ensure.sh")),
        "PATH": f"{tools}:{kind}:{os.environ['PATH']}",
        "KUBECONFIG": str(kubeconfig),
    }
    subprocess.run(
        ["kind", "export", "kubeconfig", "--name", cluster, "--kubeconfig", str(kubeconfig)],
        env=env,
        check=True,
        capture_output=True,
    )
    return env


class KindRun(Run):
    """One chaos run on the kind cluster: real nodes, the chart's operator, node faults."""

    def __init__(self, args: argparse.Namespace, work_dir: Path) -> None:
        super().__init__(args, work_dir)
        self.ns = args.namespace
        self.kubeconfig = work_dir / "kubeconfig"
        self.env = kind_env(args.cluster, self.kubeconfig)
        self.run_dir = f"{NODE_DIR}/{work_dir.name}"
        self.prefix = f"{PREFIX}{work_dir.name[-5:].lower().replace('_', 'x')}-"
        self.lock = threading.Lock()
        self.busy: set[str] = set()
        self.healers: list[threading.Thread] = []

    # -- helpers -----------------------------------------------------------------

    def sh(self, *argv: str, check: bool = True, timeout: float = 120) -> str:
        """Run a command in the run's environment; return its stdout.

        Raises:
            RuntimeError: it failed and ``check`` is set (the message has its stderr).
        """
        done = subprocess.run(
            argv, env=self.env, capture_output=True, text=True, cwd=REPO, timeout=timeout
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr}")
        return done.stdout

    def api_ready(self) -> bool:
        """Whether the API server answers ``/readyz``."""
        try:
            self.sh("kubectl", "get", "--raw=/readyz", timeout=10)
        except (RuntimeError, subprocess.TimeoutExpired):
            return False
        return True

    def wait_api(self, seconds: float = 360) -> None:
        """Wait until the API server answers (after a control-plane restart)."""
        deadline = time.monotonic() + seconds
        while not self.api_ready():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the API server did not come back in {seconds:g}s")
            time.sleep(1)

    # -- set-up ------------------------------------------------------------------

    def setup(self) -> None:
        """Chart, namespace, the worker's libraries on every node, PostgreSQL and its proxy."""
        nodes = self.sh("kind", "get", "nodes", "--name", self.args.cluster).split()
        self.control_plane = next(n for n in nodes if n.endswith("-control-plane"))
        self.workers = sorted(n for n in nodes if n != self.control_plane)
        self.nodes = nodes
        self.sh("kubectl", "create", "namespace", self.ns, check=False)
        status = subprocess.run(
            ["helm", "status", "leasehold", "-n", OPERATOR_NAMESPACE],
            env=self.env,
            capture_output=True,
            text=True,
        )
        if status.returncode or "STATUS: deployed" not in status.stdout:
            self.sh(
                "helm",
                "upgrade",
                "--install",
                "leasehold",
                "deploy/helm/leasehold",
                "-n",
                OPERATOR_NAMESPACE,
                "--create-namespace",
                "--set",
                f"watchNamespaces={{{self.ns}}}",
                "--set",
                f"image.repository={self.args.image.rsplit(':', 1)[0]}",
                "--set",
                f"image.tag={self.args.image.rsplit(':', 1)[1]}",
            )
        self.sh(
            "kubectl",
            "-n",
            OPERATOR_NAMESPACE,
            "wait",
            "--for=condition=Available",
            "deployment",
            "-l",
            OPERATOR_SELECTOR,
            "--timeout=300s",
            timeout=320,
        )
        self.api = config.new_client_from_config(config_file=str(self.kubeconfig))
        self.custom = client.CustomObjectsApi(self.api)
        self.store = LeaseStore(self.api)
        self.delete_jobs(leftovers=True)
        self.install_worker_lib()
        self.pg = PostgresServer(Path(tempfile.mkdtemp(prefix="chaos-pg-", dir="/tmp")))
        dsn = self.pg.start()
        with psycopg.connect(dsn, autocommit=True) as conn:
            install(conn)
            conn.execute(
                "CREATE TABLE IF NOT EXISTS chaos_effect (seq bigserial PRIMARY KEY,"
                " key text NOT NULL, token bigint NOT NULL, holder text NOT NULL,"
                " step text NOT NULL)"
            )
        self.dsn = dsn
        gateway = self.gateway()
        host_port = dsn.split("@", 1)[1].split("/", 1)[0]
        self.db_proxy = TcpProxy(
            "127.0.0.1", int(host_port.rsplit(":", 1)[1]), listen_host=gateway
        ).start()
        self.proxied_dsn = dsn.replace(host_port, f"{gateway}:{self.db_proxy.port}")
        self.worker_kubeconfig = self.kubeconfig  # the pull claimers run on the host
        log(
            f"kind cluster {self.args.cluster}: nodes {', '.join(nodes)};"
            f" PostgreSQL for pods at {gateway}:{self.db_proxy.port}"
        )

    def gateway(self) -> str:
        """The host's IPv4 address on the kind network (what pods reach the host by)."""
        out = self.sh("docker", "network", "inspect", "kind", "-f", "{{json .IPAM.Config}}")
        for entry in json.loads(out):
            address = str(entry.get("Gateway", ""))
            if address and ":" not in address:
                return address
        raise RuntimeError(f"the kind network has no IPv4 gateway: {out}")

    def install_worker_lib(self) -> None:
        """Put psycopg (wheels for the image's Python) and ``testing/chaos`` on every node."""
        lib = self.dir / "lib"
        wheels = self.dir / "wheels"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--only-binary=:all:",
                "--dest",
                str(wheels),
                "--python-version",
                self.args.python_version,
                "--implementation",
                "cp",
                "--platform",
                "manylinux2014_x86_64",
                "--platform",
                "manylinux_2_17_x86_64",
                "--platform",
                "manylinux_2_28_x86_64",
                "psycopg[binary]>=3.1",
            ],
            check=True,
            capture_output=True,
        )
        for wheel in wheels.glob("*.whl"):
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(lib)
        shutil.copytree(
            REPO / "testing" / "chaos", lib / "chaos", ignore=shutil.ignore_patterns("__pycache__")
        )
        for node in self.nodes:
            self.sh("docker", "exec", node, "rm", "-rf", f"{NODE_DIR}/lib")
            self.sh("docker", "exec", node, "mkdir", "-p", NODE_DIR, self.run_dir)
            self.sh("docker", "exec", node, "chmod", "0777", self.run_dir)
            self.sh("docker", "cp", f"{lib}/.", f"{node}:{NODE_DIR}/lib")
            self.sh("docker", "exec", node, "chmod", "-R", "a+rX", f"{NODE_DIR}/lib")

    def delete_jobs(self, leftovers: bool = False) -> None:
        """Delete the run's cron jobs and LeasedJobs (or, before the run, any ``chaos-*`` left)."""
        prefix = PREFIX if leftovers else self.prefix
        doomed: list[str] = []
        for plural in ("leasedcronjobs", "leasedjobs"):  # cron jobs first: no new runs
            try:
                items: Any = self.custom.list_namespaced_custom_object(
                    "leasehold.dev", "v1alpha1", self.ns, plural
                )
            except Exception as exc:
                log(f"listing {plural} to delete: {exc}")
                continue
            for name in (i["metadata"]["name"] for i in items["items"]):
                if not name.startswith(prefix):
                    continue
                with contextlib.suppress(Exception):
                    self.custom.delete_namespaced_custom_object(
                        "leasehold.dev", "v1alpha1", self.ns, plural, name
                    )
                if plural == "leasedjobs":
                    doomed.append(name)
        if leftovers and doomed:
            log(f"deleted {len(doomed)} LeasedJobs left by an earlier run")
            self.sh(
                "kubectl",
                "-n",
                self.ns,
                "wait",
                "--for=delete",
                *(f"ljob/{n}" for n in doomed),
                "--timeout=120s",
                check=False,
                timeout=130,
            )

    def teardown(self) -> None:
        """Heal every node, delete the run's jobs, stop PostgreSQL; the cluster stays."""
        self.stop.set()
        self.heal_all()
        with contextlib.suppress(Exception):
            self.wait_api()
        self.delete_jobs()
        for node in getattr(self, "nodes", []):
            self.sh("docker", "exec", node, "rm", "-rf", self.run_dir, check=False)
        for part in ("db_proxy", "pg"):
            thing = getattr(self, part, None)
            if thing is not None:
                try:
                    thing.stop()
                except Exception as exc:
                    log(f"stopping {part}: {exc}")

    # -- workload -----------------------------------------------------------------

    def worker_env(self) -> list[dict[str, str]]:
        """The environment of a worker container on a node (no clock skew: the node's clock)."""
        return [
            {"name": "CHAOS_DSN", "value": self.proxied_dsn},
            {"name": "CHAOS_HISTORY", "value": "/chaos/history.jsonl"},
            {"name": "CHAOS_WRITES", "value": str(self.args.writes)},
            {"name": "PYTHONPATH", "value": "/chaos-lib"},
        ]

    def worker_template(self, env: list[dict[str, str]]) -> dict[str, Any]:
        """The pod template of a worker running :mod:`chaos.kind_worker` on a node."""
        return {
            "spec": {
                "serviceAccountName": "leasehold-worker",
                "terminationGracePeriodSeconds": 2,
                "containers": [
                    {
                        "name": "w",
                        "image": self.args.image,
                        "command": ["python", "-m", "chaos.kind_worker"],
                        "env": env,
                        # root: the history folder on the node is root's
                        "securityContext": {"runAsUser": 0},
                        "volumeMounts": [
                            {"name": "history", "mountPath": "/chaos"},
                            {"name": "lib", "mountPath": "/chaos-lib", "readOnly": True},
                        ],
                    }
                ],
                "volumes": [
                    {
                        "name": "history",
                        "hostPath": {"path": self.run_dir, "type": "Directory"},
                    },
                    {
                        "name": "lib",
                        "hostPath": {"path": f"{NODE_DIR}/lib", "type": "Directory"},
                    },
                ],
            }
        }

    def lease_seconds(self) -> int:
        """The jobs' ``leaseDurationSeconds`` on the nodes."""
        return LEASE_SECONDS

    def startup_seconds(self) -> int:
        """The jobs' ``startupDeadlineSeconds`` on the nodes."""
        return STARTUP_SECONDS

    def create_object(self, plural: str, body: dict[str, Any]) -> None:
        """Create one object, retried while the API server is away (a lost answer: 409)."""
        deadline = time.monotonic() + 180
        while True:
            try:
                self.custom.create_namespaced_custom_object(
                    "leasehold.dev", "v1alpha1", self.ns, plural, body
                )
                return
            except client.ApiException as exc:
                if exc.status == 409:
                    return  # created by a call whose answer was lost
                if time.monotonic() > deadline:
                    raise
            except Exception:
                if time.monotonic() > deadline:
                    raise
            time.sleep(1)

    def phases(self) -> dict[str, dict[str, Any]]:
        """Status of every job of this run, cron runs too (the last known while the API is away)."""
        try:
            items: Any = self.custom.list_namespaced_custom_object(
                "leasehold.dev", "v1alpha1", self.ns, "leasedjobs", _request_timeout=15
            )
        except Exception:
            return self.last_phases
        self.last_phases = {
            i["metadata"]["name"]: i.get("status") or {}
            for i in items["items"]
            if i["metadata"]["name"].startswith(self.prefix)
        }
        return self.last_phases

    # -- faults ---------------------------------------------------------------------

    def owns(self, lease: str) -> bool:
        """Whether a lease is one of this run's (the namespace may hold others')."""
        return lease.startswith(self.prefix)

    def running_pods(self) -> list[str]:
        """Not used on kind: faults hit nodes, not processes."""
        return []

    def later(self, seconds: float, node: str, heal: Callable[[], None]) -> None:
        """Heal a node's fault after ``seconds`` (in a thread); the node is busy till then."""

        def run() -> None:
            time.sleep(seconds)
            try:
                heal()
            finally:
                self.release(node)

        thread = threading.Thread(target=run, daemon=True)
        self.healers.append(thread)
        thread.start()

    def free_worker(self) -> str | None:
        """A worker node under no fault now (marked busy), or None."""
        with self.lock:
            free = [n for n in self.workers if n not in self.busy]
            if not free:
                return None
            node = self.rng.choice(free)
            self.busy.add(node)
            return node

    def release(self, node: str) -> None:
        """The node is under no fault any more."""
        with self.lock:
            self.busy.discard(node)

    def partition_rules(self) -> list[list[str]]:
        """Iptables rules cutting a node off the control-plane node (its kubelet and its pods)."""
        address = self.sh(
            "docker",
            "inspect",
            "-f",
            "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
            self.control_plane,
        ).strip()
        return [[chain, "-d", address, "-j", "DROP"] for chain in ("OUTPUT", "FORWARD")]

    def inject(self) -> None:
        """Inject one fault, chosen by the seeded generator, then wait a few seconds."""
        kinds: list[Callable[[], None]] = [
            self.f_freeze,
            self.f_freeze,
            self.f_partition,
            self.f_partition,
            self.f_kubelet,
            self.f_kubelet,
            self.f_operator,
            self.f_evict,
            self.f_evict,
            lambda: self.f_static("kube-apiserver"),
            lambda: self.f_static("etcd"),
        ]
        try:
            self.rng.choice(kinds)()
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            # e.g. "docker pause": "unable to freeze" on a loaded machine; nothing recorded
            log(f"fault not injected: {exc}")
        time.sleep(self.rng.uniform(2.0, 5.0))

    def f_freeze(self) -> None:
        """``docker pause`` a worker node past the lease, ``docker unpause`` it later."""
        node = self.free_worker()
        if node is None:
            return
        seconds = LEASE_SECONDS + self.rng.uniform(2.0, 6.0)
        try:
            self.sh("docker", "pause", node)
        except (RuntimeError, subprocess.TimeoutExpired):
            self.unfreeze(node)
            self.release(node)
            raise
        self.fault("node-freeze", node=node, seconds=round(seconds, 1))
        self.later(seconds, node, lambda: self.unfreeze(node))

    def unfreeze(self, node: str) -> None:
        """``docker unpause`` a node (nothing if it runs)."""
        self.sh("docker", "unpause", node, check=False)

    def f_partition(self) -> None:
        """Cut a worker node off the control-plane node past the lease, then heal."""
        node = self.free_worker()
        if node is None:
            return
        seconds = LEASE_SECONDS + self.rng.uniform(2.0, 6.0)
        try:
            for rule in self.partition_rules():
                self.sh("docker", "exec", node, "iptables", "-I", *rule)
        except (RuntimeError, subprocess.TimeoutExpired):
            self.unpartition(node)
            self.release(node)
            raise
        self.fault("node-partition", node=node, seconds=round(seconds, 1))
        self.later(seconds, node, lambda: self.unpartition(node))

    def unpartition(self, node: str) -> None:
        """Remove the partition's rules from a node (nothing if none)."""
        for rule in self.partition_rules():
            while not subprocess.run(
                ["docker", "exec", node, "iptables", "-D", *rule],
                env=self.env,
                capture_output=True,
            ).returncode:
                pass

    def f_kubelet(self) -> None:
        """Stop a worker node's kubelet, start it again a few seconds later."""
        node = self.free_worker()
        if node is None:
            return
        seconds = self.rng.uniform(3.0, LEASE_SECONDS + 5.0)
        try:
            self.sh("docker", "exec", node, "systemctl", "stop", "kubelet")
        except (RuntimeError, subprocess.TimeoutExpired):
            self.start_kubelet(node)
            self.release(node)
            raise
        self.fault("kubelet-stop", node=node, seconds=round(seconds, 1))
        self.later(seconds, node, lambda: self.start_kubelet(node))

    def start_kubelet(self, node: str) -> None:
        """Start a node's kubelet (nothing if it runs)."""
        self.sh("docker", "exec", node, "systemctl", "start", "kubelet", check=False)

    def f_operator(self) -> None:
        """Delete the operator's pod at once; its Deployment starts another."""
        if self.control_plane in self.busy:
            return  # the API server is away
        self.sh(
            "kubectl",
            "-n",
            OPERATOR_NAMESPACE,
            "delete",
            "pod",
            "-l",
            OPERATOR_SELECTOR,
            "--grace-period=0",
            "--force",
            "--wait=false",
            check=False,
        )
        self.fault("operator-kill")

    def f_static(self, component: str) -> None:
        """Restart a control-plane static pod: manifest out, pod gone, manifest back.

        In a thread, so node faults go on while the control plane is away (on a
        loaded machine the kubelet takes 1 to 3 minutes to bring it back); one
        control-plane restart at a time.
        """
        with self.lock:
            if self.control_plane in self.busy:
                return
            self.busy.add(self.control_plane)
        manifest = f"/etc/kubernetes/manifests/{component}.yaml"
        aside = f"/etc/kubernetes/{component}.yaml.chaos"
        down = self.rng.uniform(1.0, 4.0)
        self.fault(f"{component}-restart", down_seconds=round(down, 1))

        def restart() -> None:
            try:
                self.sh("docker", "exec", self.control_plane, "mv", manifest, aside)
                deadline = time.monotonic() + 60
                while (
                    time.monotonic() < deadline
                    and self.sh(
                        "docker",
                        "exec",
                        self.control_plane,
                        "crictl",
                        "ps",
                        "-q",
                        "--name",
                        f"^{component}$",
                        check=False,
                    ).strip()
                ):
                    time.sleep(0.5)
                time.sleep(down)
            finally:
                self.sh("docker", "exec", self.control_plane, "mv", aside, manifest, check=False)
                try:
                    self.wait_api()
                finally:
                    with self.lock:
                        self.busy.discard(self.control_plane)

        thread = threading.Thread(target=restart, daemon=True)
        self.healers.append(thread)
        thread.start()

    def heal_all(self) -> None:
        """Undo every fault that may be in force (after the run, or when it is cut short)."""
        for thread in self.healers:
            thread.join(timeout=30)
        for node in getattr(self, "workers", []):
            self.unfreeze(node)
            self.unpartition(node)
            self.start_kubelet(node)
        control_plane = getattr(self, "control_plane", None)
        if control_plane is not None:
            for component in ("kube-apiserver", "etcd"):
                self.sh(
                    "docker",
                    "exec",
                    control_plane,
                    "sh",
                    "-c",
                    f"[ ! -e /etc/kubernetes/{component}.yaml.chaos ] || mv"
                    f" /etc/kubernetes/{component}.yaml.chaos /etc/kubernetes/manifests/",
                    check=False,
                )

    def clock_step(self) -> None:
        """No wall-clock step here: the operator runs in a pod with the node's clock."""

    # -- the run ------------------------------------------------------------------------

    def collect(self) -> None:
        """Append every node's history file to the run's history (nodes healed first)."""
        self.heal_all()
        gathered = 0
        with open(self.history, "a") as out:
            for node in self.nodes:
                text = self.sh(
                    "docker",
                    "exec",
                    node,
                    "sh",
                    "-c",
                    f"cat {self.run_dir}/history.jsonl",
                    check=False,
                )
                lines = [line for line in text.splitlines() if line.strip()]
                gathered += len(lines)
                out.writelines(f"{line}\n" for line in lines)
        log(f"gathered {gathered} worker records from {len(self.nodes)} nodes")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run on kind, print the table; exit 1 on a violation."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    parser.add_argument("--jobs", type=int, default=20, help="LeasedJobs to run (default 20)")
    parser.add_argument("--concurrency", type=int, default=8, help="jobs at once (default 8)")
    parser.add_argument("--writes", type=int, default=3, help="fenced writes per attempt")
    parser.add_argument("--pull-claimers", type=int, default=1, help="pull-mode claimers (host)")
    parser.add_argument(
        "--minutes", type=float, default=3, help="time budget for the faulty phase (default 3)"
    )
    parser.add_argument(
        "--drain-minutes",
        type=float,
        default=8,
        help="then time to finish, without faults (default 8: a control-plane restart on a"
        " loaded 2-core machine stalls the cluster for 1 to 3 minutes)",
    )
    parser.add_argument(
        "--cluster", default=os.environ.get("KIND_CLUSTER", "kind"), help="the kind cluster"
    )
    parser.add_argument(
        "--namespace", default="demo", help="the jobs' namespace, watched by the chart's operator"
    )
    parser.add_argument(
        "--python-version", default="3.11", help="the image's Python (for psycopg's wheel)"
    )
    parser.add_argument(
        "--image",
        default=os.environ.get("IMAGE", IMAGE),
        help=f"the operator's and workers' image, loaded into the cluster (default {IMAGE})",
    )
    add_cron_arguments(parser, hold_seconds=70)
    parser.add_argument("--keep", type=Path, help="copy the history and logs here")
    args = parser.parse_args(argv)
    args.scenario = None
    log(
        f"kind seed {args.seed}: {args.jobs} jobs, {args.concurrency} at a time,"
        f" {args.pull_claimers} pull claimers, {args.minutes:g} min of faults"
    )
    signal.signal(signal.SIGTERM, _interrupt)
    work_dir = Path(tempfile.mkdtemp(prefix="chaos-kind-", dir="/tmp"))
    judge.porcupine_binary()
    run = KindRun(args, work_dir)
    began = time.monotonic()
    try:
        run.setup()
        report = run.execute()
    finally:
        run.teardown()
        if args.keep:
            shutil.copytree(
                work_dir,
                args.keep,
                dirs_exist_ok=True,
                ignore=shutil.ignore_patterns("lib", "wheels", "chaos-pg-*"),
            )
    print(report.table())
    verdict = "0 violations" if report.ok else "VIOLATIONS FOUND"
    if not report.agree:
        verdict += " (the checkers DISAGREE)"
    log(
        f"kind seed {args.seed}: {verdict} in {time.monotonic() - began:.0f}s"
        f" (history: {run.history})"
    )
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
