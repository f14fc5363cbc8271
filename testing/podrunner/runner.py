"""`PodRunner`: plays the kubelet of one node, running pods as local processes.

Threads:

- ``podrunner-watch``: lists and watches pods bound to the node
  (``spec.nodeName``), listing again after ``410 Gone`` and re-watching
  after any drop; starts a pod thread for each new pod and a stopper thread
  for each pod being deleted.
- ``podrunner-heartbeat``: posts the node status, renews the node Lease,
  refreshes pod tokens, every ``heartbeat_interval`` seconds.
- ``pod-<ns>/<name>``: prepares a pod (env, bound token, files), starts its
  process, waits for it, writes the pod status.
- ``stop-<ns>/<name>``: on a ``deletionTimestamp``, SIGTERM, SIGKILL after
  the grace period, then the final delete with grace period 0.

Every pod's main process starts its own session, and every process of the
pod carries ``PODRUNNER_POD_UID=<uid>`` in its environment. Signals go to the
whole pod: each process of its session or with its marker (found in
``/proc``), so processes in other process groups — a ``leasehold run`` child,
a ``setsid`` daemon — get them too. When the main process exits, what is left
of the pod is killed, as a container runtime tears down a container's
cgroup.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import math
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from podrunner.identity import (
    SERVICEACCOUNT_DIR_ENV,
    TOKEN_EXPIRATION_SECONDS,
    request_token,
    write_identity,
)
from podrunner.kube import STRATEGIC_MERGE_PATCH, Kube, KubeError, path_segment, rfc3339
from podrunner.node import NodeAgent
from podrunner.podspec import Launch, PodSetupError, plan_launch
from podrunner.status import (
    exit_details,
    running_status,
    setup_failed_status,
    terminated_status,
)

log = logging.getLogger("podrunner")

DEFAULT_NODE = "local-node"
DEFAULT_GRACE_SECONDS = 30
MAX_GRACE_SECONDS = 30.0
"""Grace periods longer than this are cut to it, to keep tests fast."""

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
_TOKEN_REFRESH_AT = 0.8
"""Refresh a pod's token after this fraction of its lifetime, as the kubelet does."""
_STATUS_ATTEMPTS = 5
_PR_SET_PDEATHSIG = 1
POD_UID_ENV = "PODRUNNER_POD_UID"
"""Set to the pod's uid in every pod process: how the runner finds all of them."""
_KILL_PASSES = 200
"""SIGKILL passes over a pod's processes before giving up on stragglers."""
STARTED_FILE = "started"
"""In a pod's folder: the wall-clock time (``time.time()``, seconds, 6 decimals) taken
right before its process was spawned; what benchmarks time a start-up from."""
EXITED_FILE = "exited"
"""In a pod's folder: the wall-clock time its main process was seen to exit."""
CPU_FILE = "cpu"
"""In a pod's folder: CPU seconds (user + system) of its main process and the
descendants it reaped, from ``wait4``: what the pod took from the machine."""


def pod_processes(uid: str, session: int) -> list[int]:
    """Every live process of a pod, read from ``/proc``.

    A process belongs to the pod when it is in the session its main process
    started, or carries ``PODRUNNER_POD_UID=<uid>`` in its environment (a
    process that left the session with ``setsid``). Zombies are left out.

    Args:
        uid: The pod's uid.
        session: The pod's session id (its main process's pid).

    Returns:
        The pids, without this process.
    """
    marker = f"{POD_UID_ENV}={uid}".encode()
    found: list[int] = []
    me = os.getpid()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            if fields[0] == b"Z":
                continue
            if int(fields[3]) == session:
                found.append(int(entry))
                continue
            with open(f"/proc/{entry}/environ", "rb") as environ:
                if marker in environ.read().split(b"\0"):
                    found.append(int(entry))
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile, or not ours to read
    return found


def signal_pod(uid: str, session: int, signum: int) -> None:
    """Send ``signum`` to every process of a pod.

    ``SIGKILL`` and ``SIGSTOP`` go out again until no process is left
    unsignalled, so one forked meanwhile gets it too.

    Args:
        uid: The pod's uid.
        session: The pod's session id.
        signum: The signal.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(session, signum)
    done: set[int] = set()
    for _ in range(_KILL_PASSES):
        targets = [pid for pid in pod_processes(uid, session) if pid not in done]
        if signum == signal.SIGKILL:
            done.clear()  # a killed process may take a moment to die: skip it once only
        for pid in targets:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)
            done.add(pid)
        if not targets or signum not in (signal.SIGKILL, signal.SIGSTOP):
            return
        time.sleep(0.001)


class PodNotRunningError(LookupError):
    """The pod is unknown to this runner, or its process is not running."""


@dataclass(eq=False)
class _Pod:
    """What the runner knows about one pod (one uid)."""

    uid: str
    namespace: str
    name: str
    directory: Path
    pod: dict[str, Any]
    lock: threading.Lock = field(default_factory=threading.Lock)
    popen: subprocess.Popen[bytes] | None = None
    started_at: str | None = None
    returncode: int | None = None
    cpu_seconds: float | None = None
    failure: str | None = None
    terminating: bool = False
    gone: bool = False
    kill_deadline: float = math.inf
    token_refresh_at: float | None = None
    exited: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    def running(self) -> bool:
        return self.popen is not None and not self.exited.is_set()

    def signal(self, signum: int) -> bool:
        """Signal every process of the pod; False when no process runs.

        The main process is not reaped before `exited` is set (under the
        lock), so its session id cannot belong to another process here.
        """
        with self.lock:
            if self.popen is None or self.exited.is_set():
                return False
            signal_pod(self.uid, self.popen.pid, signum)
            return True

    def finish(self) -> None:
        self.exited.set()
        self.done.set()


def pod_dir_name(namespace: str, name: str, uid: str) -> str:
    """Return the folder name of a pod under ``<workdir>/pods``.

    Args:
        namespace: The pod's namespace.
        name: The pod's name.
        uid: The pod's uid.

    Returns:
        ``<namespace>_<name>_<uid>``.
    """
    return f"{namespace}_{name}_{uid}"


def find_pod_dir(workdir: Path, namespace: str, name: str) -> Path | None:
    """Find the folder of the latest pod of that name, from any process.

    Args:
        workdir: The runner's work directory.
        namespace: The pod's namespace.
        name: The pod's name.

    Returns:
        The most recently created matching folder, or None.
    """
    found = sorted(
        (workdir / "pods").glob(f"{namespace}_{name}_*"),
        key=lambda path: path.stat().st_mtime,
    )
    return found[-1] if found else None


def read_pid(workdir: Path, namespace: str, name: str) -> int | None:
    """Read the pid a runner recorded for a pod (``<poddir>/pid``), from any process.

    The file stays after the process ends; check that the pid still runs.

    Args:
        workdir: The runner's work directory.
        namespace: The pod's namespace.
        name: The pod's name.

    Returns:
        The pid, or None if the pod never started here.
    """
    directory = find_pod_dir(workdir, namespace, name)
    if directory is None:
        return None
    try:
        return int((directory / "pid").read_text().strip())
    except (OSError, ValueError):
        return None


def _parent_death_hook() -> Callable[[], None] | None:
    """Return a preexec hook that has the kernel SIGKILL the child when its starter dies."""
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    libc = ctypes.CDLL(name, use_errno=True)
    parent = os.getpid()

    def hook() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


class PodRunner:
    """A stand-in kubelet: keeps a Node Ready and runs its pods as local processes.

    For each pod the scheduler binds to the node, the first container's
    ``command + args`` runs as a process (the image is ignored) with the
    pod's env, a service-account token bound to the pod, and its output in
    ``<workdir>/pods/<namespace>_<name>_<uid>/log`` (next to it ``pid``,
    :data:`STARTED_FILE` / :data:`EXITED_FILE`: the wall-clock moments the
    process was spawned and seen to exit, and :data:`CPU_FILE`: its CPU). The pod status follows
    the process: Running, then Succeeded (exit 0) or Failed. Every restart
    policy is treated as ``Never``. Deleting the pod sends SIGTERM to all its
    processes, SIGKILL after the grace period (at most 30 s), and then
    completes the deletion as a kubelet does.

    Use as a context manager or call `start` / `stop`::

        with PodRunner(kubeconfig, tmp_path) as runner:
            pid = runner.wait_for_pid("ns", "worker-0")
            runner.pause("ns", "worker-0")

    Attributes:
        kubeconfig: Credentials of the runner (they need rights on nodes,
            node leases, pods, pod status and service-account tokens; an
            admin kubeconfig is fine).
        workdir: Folder for the pods' folders.
        node_name: The Node this runner plays.
        extra_env: Variables added to every pod process. A process's env is,
            from weakest to strongest: the runner's own environment (without
            ``KUBECONFIG``, and with ``sys.prefix/bin`` first in ``PATH``),
            ``extra_env``, what the runner injects (``KUBECONFIG``,
            ``LEASEHOLD_SERVICEACCOUNT_DIR``, ``KUBERNETES_SERVICE_HOST``/``PORT``,
            ``HOSTNAME``), then the container's ``envFrom`` and ``env``.
        heartbeat_interval: Seconds between node status posts and lease renewals.
        max_grace_seconds: Cap on a pod's termination grace period.
        token_expiration_seconds: Lifetime requested for pod tokens.
    """

    def __init__(
        self,
        kubeconfig: Path,
        workdir: Path,
        node_name: str = DEFAULT_NODE,
        extra_env: dict[str, str] | None = None,
        *,
        heartbeat_interval: float = 10.0,
        max_grace_seconds: float = MAX_GRACE_SECONDS,
        token_expiration_seconds: int = TOKEN_EXPIRATION_SECONDS,
        stop_with_runner: bool = True,
    ) -> None:
        """Describe a runner; nothing happens until `start`.

        Args:
            kubeconfig: Kubeconfig of the cluster (its current context).
            workdir: Folder for pod folders; created if needed.
            node_name: Name of the Node to register.
            extra_env: Variables added to every pod process.
            heartbeat_interval: Seconds between heartbeats (the kubelet's is 10).
            max_grace_seconds: Cap on termination grace periods.
            token_expiration_seconds: Lifetime of pod tokens (at least 600).
            stop_with_runner: Have the kernel SIGKILL pod processes when the
                runner's process dies (Linux), so a killed test run leaks none.
        """
        self.kubeconfig = Path(kubeconfig)
        self.workdir = Path(workdir).absolute()
        self.node_name = node_name
        self.extra_env = dict(extra_env or {})
        self.heartbeat_interval = heartbeat_interval
        self.max_grace_seconds = max_grace_seconds
        self.token_expiration_seconds = token_expiration_seconds
        self._preexec = _parent_death_hook() if stop_with_runner else None
        self._lock = threading.Lock()
        self._pods: dict[str, _Pod] = {}
        self._latest: dict[tuple[str, str], str] = {}
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        self._stream: Any = None
        self._kube: Kube | None = None
        self._node: NodeAgent | None = None

    # -- lifecycle ------------------------------------------------------------

    @property
    def pods_dir(self) -> Path:
        """Folder holding one folder per pod."""
        return self.workdir / "pods"

    def start(self) -> PodRunner:
        """Register the node, list its pods, and start the background threads.

        Returns when the node is registered and Ready and the pods already
        bound to it are known; pods then start in the background.

        Returns:
            The runner itself.

        Raises:
            RuntimeError: If the runner was started before.
            KubeError: If the API server refuses the node or the pod list.
        """
        if self._kube is not None:
            raise RuntimeError("a PodRunner can be started once")
        self.pods_dir.mkdir(parents=True, exist_ok=True)
        self._kube = Kube(self.kubeconfig)
        self._node = NodeAgent(self._kube, self.node_name)
        try:
            self._node.register()
            resource_version = self._relist()
        except BaseException:
            self._kube.close()
            raise
        self._spawn_thread("podrunner-watch", self._watch_loop, resource_version)
        self._spawn_thread("podrunner-heartbeat", self._heartbeat_loop)
        log.info("pod runner for node %s started; pods in %s", self.node_name, self.pods_dir)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the threads and SIGKILL every pod process.

        Pods whose process was killed get a Failed status if the API server
        still answers. The Node stays registered (a stopped kubelet does not
        delete its node); it turns NotReady after the controller's grace period.

        Args:
            timeout: Seconds to wait for pod threads to write final statuses.
        """
        if self._kube is None or self._stopping.is_set():
            return
        self._stopping.set()
        with self._lock:
            stream = self._stream
            handles = list(self._pods.values())
        if stream is not None:
            stream.close()
        for handle in handles:
            with handle.lock:
                handle.terminating = True
            if handle.signal(signal.SIGKILL):
                log.info("killed pod %s (runner stopping)", handle.ref)
        deadline = time.monotonic() + timeout
        for handle in handles:
            handle.done.wait(max(0.0, deadline - time.monotonic()))
        for thread in self._threads:
            thread.join(max(0.1, deadline - time.monotonic()))
        self._kube.close()
        log.info("pod runner for node %s stopped", self.node_name)

    def __enter__(self) -> PodRunner:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    # -- control for tests ----------------------------------------------------

    def _handle(self, namespace: str, name: str) -> _Pod | None:
        with self._lock:
            uid = self._latest.get((namespace, name))
            return None if uid is None else self._pods.get(uid)

    def _running(self, namespace: str, name: str) -> _Pod:
        handle = self._handle(namespace, name)
        if handle is None:
            raise PodNotRunningError(f"no pod {namespace}/{name} on node {self.node_name}")
        if not handle.running():
            raise PodNotRunningError(f"pod {namespace}/{name} has no running process")
        return handle

    def pid(self, namespace: str, name: str) -> int | None:
        """Return the pid of a pod's process while it runs.

        For the latest pod of that name (a recreated pod has a new uid).

        Args:
            namespace: The pod's namespace.
            name: The pod's name.

        Returns:
            The pid (also the process group id), or None when the pod is
            unknown, not started yet, or its process has ended.
        """
        handle = self._handle(namespace, name)
        if handle is None or not handle.running() or handle.popen is None:
            return None
        return handle.popen.pid

    def pod_dir(self, namespace: str, name: str) -> Path | None:
        """Return the folder of the latest pod of that name, or None if unknown.

        Args:
            namespace: The pod's namespace.
            name: The pod's name.

        Returns:
            ``<workdir>/pods/<namespace>_<name>_<uid>`` (it may not exist yet).
        """
        handle = self._handle(namespace, name)
        return None if handle is None else handle.directory

    def wait_for_pid(self, namespace: str, name: str, timeout: float = 30.0) -> int:
        """Wait until a pod's process runs, and return its pid.

        Args:
            namespace: The pod's namespace.
            name: The pod's name.
            timeout: Seconds to wait.

        Returns:
            The pid.

        Raises:
            PodNotRunningError: If the pod ended or failed to start meanwhile.
            TimeoutError: If no process ran within ``timeout``.
        """
        deadline = time.monotonic() + timeout
        while True:
            handle = self._handle(namespace, name)
            if handle is not None:
                popen = handle.popen
                if popen is not None and handle.running():
                    return popen.pid
                if handle.done.is_set():
                    raise PodNotRunningError(
                        f"pod {namespace}/{name} ended without a running process to show: "
                        f"{self._describe_end(handle)}"
                    )
            if time.monotonic() >= deadline:
                seen = "never seen" if handle is None else "not started"
                raise TimeoutError(
                    f"pod {namespace}/{name} has no process on node {self.node_name} "
                    f"after {timeout:g}s ({seen}; is it scheduled to this node?)"
                )
            time.sleep(0.02)

    def wait_for_exit(self, namespace: str, name: str, timeout: float = 30.0) -> int:
        """Wait until a pod's process has ended and its status is written.

        Args:
            namespace: The pod's namespace.
            name: The pod's name.
            timeout: Seconds to wait.

        Returns:
            The container exit code (128 + N when killed by signal N).

        Raises:
            PodNotRunningError: If the pod ended without ever running.
            TimeoutError: If it did not end within ``timeout``.
        """
        deadline = time.monotonic() + timeout
        while True:
            handle = self._handle(namespace, name)
            if handle is not None and handle.done.wait(0.05):
                if handle.returncode is None:
                    raise PodNotRunningError(
                        f"pod {namespace}/{name} never ran: {self._describe_end(handle)}"
                    )
                return exit_details(handle.returncode)[0]
            if handle is None:
                time.sleep(0.05)
            if time.monotonic() >= deadline:
                raise TimeoutError(f"pod {namespace}/{name} still runs after {timeout:g}s")

    @staticmethod
    def _describe_end(handle: _Pod) -> str:
        if handle.failure:
            return handle.failure
        if handle.returncode is not None:
            return f"exited {exit_details(handle.returncode)[0]}"
        if handle.terminating:
            return "deleted before it started"
        return "it was already finished when the runner saw it"

    def pause(self, namespace: str, name: str) -> None:
        """Freeze a pod's processes (SIGSTOP to all of them).

        Args:
            namespace: The pod's namespace.
            name: The pod's name.

        Raises:
            PodNotRunningError: If no process of that pod runs.
        """
        self.kill(namespace, name, signal.SIGSTOP)

    def resume(self, namespace: str, name: str) -> None:
        """Let a paused pod go on (SIGCONT to all of them).

        Args:
            namespace: The pod's namespace.
            name: The pod's name.

        Raises:
            PodNotRunningError: If no process of that pod runs.
        """
        self.kill(namespace, name, signal.SIGCONT)

    def kill(self, namespace: str, name: str, sig: int = signal.SIGKILL) -> None:
        """Send a signal to every process of a pod (see `signal_pod`).

        Killing the process ends the pod (restart policy Never): it turns
        Failed with exit code 128 + the signal number.

        Args:
            namespace: The pod's namespace.
            name: The pod's name.
            sig: The signal; SIGKILL by default.

        Raises:
            PodNotRunningError: If no process of that pod runs.
        """
        handle = self._running(namespace, name)
        if not handle.signal(sig):
            raise PodNotRunningError(f"pod {namespace}/{name} has no running process")
        log.info("sent %s to pod %s", signal.Signals(sig).name, handle.ref)

    def log(self, namespace: str, name: str) -> str:
        """Return what a pod's process wrote so far (stdout and stderr).

        Args:
            namespace: The pod's namespace.
            name: The pod's name.

        Returns:
            The log text; empty when the process has not started.

        Raises:
            PodNotRunningError: If the runner never saw such a pod.
        """
        handle = self._handle(namespace, name)
        if handle is None:
            raise PodNotRunningError(f"no pod {namespace}/{name} on node {self.node_name}")
        try:
            return (handle.directory / "log").read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    # -- threads --------------------------------------------------------------

    def _spawn_thread(self, name: str, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        thread.start()
        if name.startswith("podrunner-"):
            self._threads.append(thread)

    @property
    def _api(self) -> Kube:
        if self._kube is None:
            raise RuntimeError("the PodRunner is not started")
        return self._kube

    def _heartbeat_loop(self) -> None:
        assert self._node is not None
        while not self._stopping.wait(self.heartbeat_interval):
            try:
                self._node.heartbeat()
            except Exception as exc:
                log.warning("heartbeat of node %s failed: %s", self.node_name, exc)
            try:
                self._refresh_tokens()
            except Exception:
                log.exception("token refresh failed")

    def _selector(self) -> str:
        return f"spec.nodeName={self.node_name}"

    def _relist(self) -> str:
        listed = self._api.get("/api/v1/pods", fieldSelector=self._selector())
        present: set[str] = set()
        for pod in listed.get("items") or []:
            present.add(pod["metadata"]["uid"])
            self._on_pod_safely(pod)
        with self._lock:
            vanished = [uid for uid, handle in self._pods.items() if not handle.gone]
        for uid in vanished:
            if uid not in present:
                self._on_gone(uid)
        return str(listed["metadata"]["resourceVersion"])

    def _watch_loop(self, resource_version: str | None) -> None:
        backoff = 0.2
        while not self._stopping.is_set():
            if resource_version is None:
                try:
                    resource_version = self._relist()
                except Exception as exc:
                    log.warning("listing pods of node %s failed: %s", self.node_name, exc)
                    self._stopping.wait(backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
            query: dict[str, str | int | bool] = {
                "fieldSelector": self._selector(),
                "resourceVersion": resource_version,
                "allowWatchBookmarks": True,
                "timeoutSeconds": 60,
            }
            try:
                stream = self._api.watch("/api/v1/pods", query, read_timeout=90.0)
            except KubeError as exc:
                if exc.status == 410:
                    log.info("pod watch expired; listing again")
                    resource_version = None
                    continue
                if not self._stopping.is_set():
                    log.warning("watching pods failed: %s", exc)
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            with self._lock:
                self._stream = stream
            if self._stopping.is_set():
                stream.close()
            try:
                for event in stream:
                    kind = event.get("type")
                    obj = event.get("object") or {}
                    if kind == "ERROR":
                        if obj.get("code") == 410:
                            log.info("pod watch expired; listing again")
                            resource_version = None
                        else:
                            log.warning("pod watch error: %s", obj.get("message", obj))
                        break
                    version = obj.get("metadata", {}).get("resourceVersion")
                    if version:
                        resource_version = version
                    if kind in ("ADDED", "MODIFIED"):
                        self._on_pod_safely(obj)
                    elif kind == "DELETED":
                        self._on_gone(obj["metadata"]["uid"])
                backoff = 0.2
            except Exception as exc:
                if not self._stopping.is_set():
                    log.warning("pod watch dropped (%s); watching again", exc)
                    self._stopping.wait(backoff)
                    backoff = min(backoff * 2, 5.0)
            finally:
                with self._lock:
                    self._stream = None

    # -- pod events -----------------------------------------------------------

    def _on_pod_safely(self, pod: dict[str, Any]) -> None:
        try:
            self._on_pod(pod)
        except Exception:
            log.exception(
                "handling pod %s/%s failed",
                pod.get("metadata", {}).get("namespace"),
                pod.get("metadata", {}).get("name"),
            )

    def _grace_seconds(self, pod: Mapping[str, Any]) -> float:
        grace = pod["metadata"].get("deletionGracePeriodSeconds")
        if grace is None:
            grace = pod.get("spec", {}).get("terminationGracePeriodSeconds")
        if grace is None:
            grace = DEFAULT_GRACE_SECONDS
        return float(min(max(grace, 0), self.max_grace_seconds))

    def _on_pod(self, pod: dict[str, Any]) -> None:
        metadata = pod["metadata"]
        uid = metadata["uid"]
        namespace, name = metadata["namespace"], metadata["name"]
        with self._lock:
            handle = self._pods.get(uid)
            new = handle is None
            if handle is None:
                if self._stopping.is_set():
                    return
                handle = _Pod(
                    uid=uid,
                    namespace=namespace,
                    name=name,
                    directory=self.pods_dir / pod_dir_name(namespace, name, uid),
                    pod=pod,
                )
                self._pods[uid] = handle
                self._latest[(namespace, name)] = uid
            handle.pod = pod
        deleting = metadata.get("deletionTimestamp") is not None
        if not new:
            if deleting:
                self._terminate(handle, self._grace_seconds(pod))
            return
        phase = pod.get("status", {}).get("phase")
        if deleting or phase in TERMINAL_PHASES:
            # Not ours to run: finished before, or deleted before we saw it.
            handle.failure = "it was already finished or deleted when the runner saw it"
            handle.finish()
            if deleting:
                self._terminate(handle, 0.0)
            return
        if phase == "Running":
            # Started by an earlier runner for this node, whose processes died with it.
            handle.failure = "its process was lost when an earlier pod runner stopped"
            handle.finish()
            self._spawn_thread(f"lost-{handle.ref}", self._mark_lost, handle)
            return
        self._spawn_thread(f"pod-{handle.ref}", self._run_pod, handle, pod)

    def _on_gone(self, uid: str) -> None:
        with self._lock:
            handle = self._pods.get(uid)
        if handle is None:
            return
        with handle.lock:
            already = handle.gone
            handle.gone = True
            handle.terminating = True
        if handle.signal(signal.SIGKILL):
            log.info("pod %s disappeared from the API; killed its processes", handle.ref)
        elif not already:
            log.debug("pod %s is gone", handle.ref)

    def _terminate(self, handle: _Pod, grace: float) -> None:
        deadline = time.monotonic() + grace
        with handle.lock:
            handle.kill_deadline = min(handle.kill_deadline, deadline)
            if handle.terminating:
                return
            handle.terminating = True
        self._spawn_thread(f"stop-{handle.ref}", self._stop_pod, handle, grace)

    def _stop_pod(self, handle: _Pod, grace: float) -> None:
        try:
            if handle.signal(signal.SIGTERM):
                log.info("pod %s is being deleted: sent SIGTERM, SIGKILL in %gs", handle.ref, grace)
                while not handle.exited.wait(0.05):
                    if time.monotonic() >= handle.kill_deadline:
                        if handle.signal(signal.SIGKILL):
                            log.info("pod %s outlived its grace period: sent SIGKILL", handle.ref)
                        break
            handle.done.wait(30.0)
            if handle.gone or self._stopping.is_set():
                return
            self._api.request(
                "DELETE",
                self._pod_path(handle),
                body={
                    "apiVersion": "v1",
                    "kind": "DeleteOptions",
                    "gracePeriodSeconds": 0,
                    "preconditions": {"uid": handle.uid},
                },
            )
            log.info("pod %s deleted", handle.ref)
        except KubeError as exc:
            if exc.status not in (404, 409):
                log.warning("finishing the deletion of pod %s failed: %s", handle.ref, exc)
        except Exception:
            log.exception("stopping pod %s failed", handle.ref)

    @staticmethod
    def _pod_path(handle: _Pod) -> str:
        return (
            f"/api/v1/namespaces/{path_segment(handle.namespace)}/pods/{path_segment(handle.name)}"
        )

    def _patch_status(self, handle: _Pod, body: dict[str, Any]) -> None:
        body = {**body, "metadata": {"uid": handle.uid}}
        for attempt in range(_STATUS_ATTEMPTS):
            if handle.gone:
                return
            try:
                self._api.request(
                    "PATCH",
                    f"{self._pod_path(handle)}/status",
                    body=body,
                    content_type=STRATEGIC_MERGE_PATCH,
                )
                return
            except KubeError as exc:
                if exc.status in (404, 409):
                    return  # deleted, or replaced by a pod of the same name
                retry = exc.status in (0, 429) or exc.status >= 500
                if not retry or attempt == _STATUS_ATTEMPTS - 1 or self._stopping.is_set():
                    log.warning("writing the status of pod %s failed: %s", handle.ref, exc)
                    return
                time.sleep(0.2 * 2**attempt)

    def _mark_lost(self, handle: _Pod) -> None:
        log.warning("pod %s was running under an earlier runner; marking it Failed", handle.ref)
        self._patch_status(
            handle,
            setup_failed_status(
                handle.pod,
                reason="PodRunnerLost",
                message=handle.failure or "lost",
                now=rfc3339(),
            ),
        )

    # -- running a pod --------------------------------------------------------

    def _service_env(self, handle: _Pod, identity: bool) -> dict[str, str]:
        server = urlsplit(self._api.server)
        host = server.hostname or "127.0.0.1"
        port = str(server.port or (443 if server.scheme == "https" else 80))
        env = {
            "KUBERNETES_SERVICE_HOST": host,
            "KUBERNETES_SERVICE_PORT": port,
            "KUBERNETES_SERVICE_PORT_HTTPS": port,
            "KUBERNETES_PORT": f"tcp://{host}:{port}",
            "HOSTNAME": handle.name,
            POD_UID_ENV: handle.uid,
        }
        if identity:
            env["KUBECONFIG"] = str(handle.directory / "kubeconfig")
            env[SERVICEACCOUNT_DIR_ENV] = str(handle.directory / "serviceaccount")
        return env

    def _lookup(self, resource: str) -> Callable[[str, str], dict[str, Any] | None]:
        def lookup(namespace: str, name: str) -> dict[str, Any] | None:
            return self._api.get_or_none(
                f"/api/v1/namespaces/{path_segment(namespace)}/{resource}/{path_segment(name)}"
            )

        return lookup

    def _process_env(self, service_env: Mapping[str, str], launch: Launch) -> dict[str, str]:
        env = dict(os.environ)
        # The runner's own credentials must never leak into a pod.
        env.pop("KUBECONFIG", None)
        venv_bin = str(Path(sys.prefix) / "bin")
        path = [venv_bin, *(p for p in env.get("PATH", os.defpath).split(os.pathsep) if p)]
        env["PATH"] = os.pathsep.join(dict.fromkeys(path))
        env.update(self.extra_env)
        env.update(service_env)
        env.update(launch.env)
        env[POD_UID_ENV] = service_env[POD_UID_ENV]
        return env

    def _prepare(self, handle: _Pod, pod: dict[str, Any]) -> tuple[Launch, dict[str, str], Path]:
        identity = pod.get("spec", {}).get("automountServiceAccountToken") is not False
        service_env = self._service_env(handle, identity)
        launch = plan_launch(
            pod,
            service_env,
            configmaps=self._lookup("configmaps"),
            secrets=self._lookup("secrets"),
        )
        cwd = Path(launch.working_dir) if launch.working_dir else handle.directory
        if not cwd.is_dir():
            raise PodSetupError(
                "CreateContainerError", f"workingDir {launch.working_dir} is not a folder"
            )
        if launch.ignored:
            log.warning(
                "pod %s: only container %s runs; ignoring %s",
                handle.ref,
                launch.container,
                ", ".join(launch.ignored),
            )
        if identity:
            token = request_token(self._api, pod, expiration_seconds=self.token_expiration_seconds)
            write_identity(self._api, pod, handle.directory, token)
            handle.token_refresh_at = time.monotonic() + _TOKEN_REFRESH_AT * token.lifetime
        return launch, self._process_env(service_env, launch), cwd

    def _fail_setup(self, handle: _Pod, pod: dict[str, Any], reason: str, message: str) -> None:
        handle.failure = f"{reason}: {message}"
        log.warning("pod %s cannot start: %s", handle.ref, handle.failure)
        self._patch_status(
            handle, setup_failed_status(pod, reason=reason, message=message, now=rfc3339())
        )

    def _run_pod(self, handle: _Pod, pod: dict[str, Any]) -> None:
        try:
            self._run_pod_inner(handle, pod)
        except Exception:
            log.exception("running pod %s failed", handle.ref)
        finally:
            handle.finish()

    def _run_pod_inner(self, handle: _Pod, pod: dict[str, Any]) -> None:
        handle.directory.mkdir(parents=True, exist_ok=True)
        try:
            launch, env, cwd = self._prepare(handle, pod)
        except PodSetupError as exc:
            self._fail_setup(handle, pod, exc.reason, exc.message)
            return
        except KubeError as exc:
            if handle.terminating:
                return
            self._fail_setup(handle, pod, "PodRunnerError", f"preparing the pod failed: {exc}")
            return
        with handle.lock:
            if handle.terminating:
                log.info("pod %s was deleted before it started", handle.ref)
                return
            try:
                with (handle.directory / "log").open("ab") as output:
                    spawned = time.time()
                    child = subprocess.Popen(
                        launch.argv,
                        stdin=subprocess.DEVNULL,
                        stdout=output,
                        stderr=subprocess.STDOUT,
                        cwd=cwd,
                        env=env,
                        start_new_session=True,
                        preexec_fn=self._preexec,
                    )
            except OSError as exc:
                popen = None
                error = f"cannot run {shlex.join(launch.argv)}: {exc.strerror or exc}"
            else:
                # The files first: whoever sees the pod running (wait_for_pid,
                # another process reading read_pid) finds its pid recorded.
                (handle.directory / "pid").write_text(f"{child.pid}\n")
                (handle.directory / STARTED_FILE).write_text(f"{spawned:.6f}\n")
                popen = handle.popen = child
                handle.started_at = rfc3339()
        if popen is None:
            self._fail_setup(handle, pod, "StartError", error)
            return
        started_at = handle.started_at or rfc3339()
        log.info("started pod %s pid %d: %s", handle.ref, popen.pid, shlex.join(launch.argv))
        self._patch_status(
            handle, running_status(pod, pid=popen.pid, started_at=started_at, now=rfc3339())
        )
        self._wait(handle, popen)
        returncode = popen.returncode
        (handle.directory / EXITED_FILE).write_text(f"{time.time():.6f}\n")
        if handle.cpu_seconds is not None:
            (handle.directory / CPU_FILE).write_text(f"{handle.cpu_seconds:.6f}\n")
        finished_at = rfc3339()
        exit_code, signum = exit_details(returncode)
        (handle.directory / "exit_code").write_text(f"{exit_code}\n")
        log.info(
            "pod %s exited %d%s",
            handle.ref,
            exit_code,
            f" (signal {signal.Signals(signum).name})" if signum else "",
        )
        self._patch_status(
            handle,
            terminated_status(
                handle.pod,
                pid=popen.pid,
                returncode=returncode,
                started_at=started_at,
                finished_at=finished_at,
            ),
        )

    @staticmethod
    def _wait(handle: _Pod, popen: subprocess.Popen[bytes]) -> None:
        """Wait for the main process, kill the rest of the pod, then reap it."""
        while True:
            try:
                # WNOWAIT leaves the leader a zombie, so its group id stays
                # reserved while the rest of the group is killed.
                os.waitid(os.P_PID, popen.pid, os.WEXITED | os.WNOWAIT)
                break
            except InterruptedError:
                continue
            except ChildProcessError:
                break
        with handle.lock:
            signal_pod(handle.uid, popen.pid, signal.SIGKILL)
            handle.exited.set()
        try:  # wait4: the process's CPU, and its reaped descendants' (a container's CPU)
            _, status, usage = os.wait4(popen.pid, 0)
        except ChildProcessError:  # reaped elsewhere: the code is Popen's
            handle.returncode = popen.wait()
            return
        popen.returncode = os.waitstatus_to_exitcode(status)
        handle.returncode = popen.returncode
        handle.cpu_seconds = usage.ru_utime + usage.ru_stime

    def _refresh_tokens(self) -> None:
        with self._lock:
            handles = list(self._pods.values())
        now = time.monotonic()
        for handle in handles:
            due = handle.token_refresh_at
            if due is None or now < due or not handle.running() or handle.terminating:
                continue
            try:
                token = request_token(
                    self._api, handle.pod, expiration_seconds=self.token_expiration_seconds
                )
            except KubeError as exc:
                log.warning("refreshing the token of pod %s failed: %s", handle.ref, exc)
                continue
            write_identity(self._api, handle.pod, handle.directory, token)
            handle.token_refresh_at = time.monotonic() + _TOKEN_REFRESH_AT * token.lifetime
            log.info("refreshed the token of pod %s", handle.ref)
