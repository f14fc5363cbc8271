"""LeasedJob against batch/v1 Job on kind: real kubelets, real containers, the chart's operator.

Why this module exists: issue 18 asks for the LeasedJob-vs-Job comparison
"also on kind with real pods". ``bench/jobs.py`` measures it on a local
control plane with the pod runner playing the kubelet; here the same
:func:`bench.jobs.measure` runs against a kind cluster (``make kind-up``):
the Job's pods are made by kind's real job controller, the LeasedJob's by
the operator the Helm chart installed, and both run the same command in the
same built image (``leasehold:0.1.0``) under the chart's worker
ServiceAccount, on the same kubelets. The processes measured (the API
server, etcd, the controller manager and the operator) run in the node
containers and are read from this host's ``/proc``.

``python -m bench.kind [--cluster NAME] [--jobs 20,200] [--rounds 2]`` (or
``make bench-kind``) prints the section and writes it to ``--output``.

``python -m bench.kind --indexed [--completions 1000] [--parallelism 100]``
(or ``make bench-kind-indexed``) runs issue 29's Indexed side by side here
instead: :func:`bench.indexed.side`'s measurement (create -> done, the API
server's requests by verb and resource, CPU per process), an Indexed
batch/v1 Job and then the same Indexed LeasedJob, in the same image's pods
on the same kubelets, the kubelets' CPU read as the control plane's is.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from kubernetes import client

from bench.harness import QUICK, REPO, Harness, log
from bench.indexed import POD_COMMAND, pods_section, side
from bench.jobs import KINDS, PodShape, measure, schedule, section
from chaos.kind import kind_env

NAMESPACE: Final = "bench-kind"
OPERATOR_NAMESPACE: Final = "leasehold-system"
OPERATOR_SELECTOR: Final = "app.kubernetes.io/component=operator"
SHAPE: Final = PodShape(image="leasehold:0.1.0", service_account="leasehold-worker")
"""Both kinds' pods: the built image and the chart's worker ServiceAccount."""
CONTROL_PLANE: Final = ("kube-apiserver", "etcd", "kube-controller-manager")


@dataclass(frozen=True)
class NodeProcess:
    """A process running in a kind node container, as this host sees it."""

    pid: int


@dataclass
class KindCluster:
    """A kind cluster as :class:`bench.harness.Harness` sees it (a ``bench.harness.Cluster``).

    Attributes:
        kubeconfig: its admin kubeconfig (``kind export kubeconfig``).
        processes: component name -> its process on this host: the control
            plane's (:data:`CONTROL_PLANE`) and ``operator``.
    """

    kubeconfig: Path
    processes: Mapping[str, NodeProcess] = field(default_factory=dict)


def _sh(env: Mapping[str, str], *argv: str, timeout: float = 600) -> str:
    """Run ``argv`` in ``env`` from the repository; return stdout.

    Raises:
        RuntimeError: it failed (the message carries its stderr).
    """
    done = subprocess.run(
        argv, env=dict(env), cwd=REPO, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout


def install_chart(env: Mapping[str, str]) -> None:
    """Install the chart (or add :data:`NAMESPACE` to its watched namespaces); wait for it.

    Raises:
        RuntimeError: helm or kubectl failed.
    """
    subprocess.run(  # AlreadyExists is fine
        ["kubectl", "create", "namespace", NAMESPACE], env=dict(env), capture_output=True
    )
    watched: list[str] = []
    status = subprocess.run(
        ["helm", "get", "values", "leasehold", "-n", OPERATOR_NAMESPACE, "-o", "json"],
        env=dict(env),
        capture_output=True,
        text=True,
    )
    if status.returncode == 0:
        watched = list((json.loads(status.stdout or "{}") or {}).get("watchNamespaces") or [])
    if status.returncode == 0 and (not watched or NAMESPACE in watched):
        log(f"the chart's operator already watches {NAMESPACE}")
    else:
        spaces = ",".join([*watched, NAMESPACE])
        log(f"helm upgrade --install leasehold, watching {spaces}")
        _sh(
            env,
            *("helm", "upgrade", "--install", "leasehold", "deploy/helm/leasehold"),
            *("-n", OPERATOR_NAMESPACE, "--create-namespace", "--reuse-values"),
            *("--set", f"watchNamespaces={{{spaces}}}", "--wait", "--timeout=5m"),
        )
    _sh(
        env,
        *("kubectl", "-n", OPERATOR_NAMESPACE, "rollout", "status", "deployment"),
        *("-l", OPERATOR_SELECTOR, "--timeout=300s"),
    )


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:  # gone, or not ours to read
        return []


def _in_container(pid: int, container_ids: Mapping[str, str]) -> str | None:
    """The node (of ``container_ids``: node -> container ID) whose cgroup holds ``pid``."""
    try:
        cgroup = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    return next((node for node, cid in container_ids.items() if cid in cgroup), None)


def find_processes(env: Mapping[str, str], cluster: str) -> dict[str, NodeProcess]:
    """Find the kind cluster's control plane, operator and kubelets among this host's processes.

    A process is the cluster's when its cgroup names one of the cluster's node
    containers, so a local control plane (or another kind cluster) running
    beside it is never mistaken for it.

    Returns:
        :data:`CONTROL_PLANE` names and ``operator`` -> their processes, and
        ``kubelet <node>`` -> each node's kubelet.

    Raises:
        RuntimeError: a component was not found, or found twice (two operator
            replicas: the comparison wants one).
    """
    nodes = _sh(env, "kind", "get", "nodes", "--name", cluster).split()
    ids = {node: _sh(env, "docker", "inspect", "-f", "{{.Id}}", node).strip() for node in nodes}
    found: dict[str, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        argv = _cmdline(int(entry))
        if not argv or not argv[0]:
            continue
        name = Path(argv[0]).name
        if name not in (*CONTROL_PLANE, "kubelet") and not (
            "operator" in argv[1:3] and any(Path(a).name == "leasehold" for a in argv[:2])
        ):
            continue
        node = _in_container(int(entry), ids)
        if node is None:
            continue
        if name == "kubelet":
            name = f"kubelet {node}"
        elif name not in CONTROL_PLANE:
            name = "operator"
        found.setdefault(name, []).append(int(entry))
    for name in (*CONTROL_PLANE, "operator", *(f"kubelet {node}" for node in sorted(ids))):
        pids = found.get(name, [])
        if len(pids) != 1:
            raise RuntimeError(
                f"{name}: want one process in the kind cluster's nodes, found {pids}"
            )
    return {name: NodeProcess(pids[0]) for name, pids in sorted(found.items())}


def node_cpu_files(processes: Mapping[str, NodeProcess]) -> dict[str, Path]:
    """Each kind node container's CPU usage file, found from its kubelet's cgroup.

    cgroup v1: the ``cpuacct`` hierarchy's ``cpuacct.usage`` (ns); v2: the
    unified hierarchy's ``cpu.stat`` (``usage_usec``). The container's cgroup
    is the kubelet's cgroup path cut after the segment naming the container.

    Args:
        processes: :func:`find_processes`'s answer (its ``kubelet <node>`` entries).

    Returns:
        ``node <node>`` -> the file (nodes whose file was not found are left out).
    """
    out: dict[str, Path] = {}
    for name, proc in processes.items():
        if not name.startswith("kubelet "):
            continue
        node = name.removeprefix("kubelet ")
        try:
            lines = Path(f"/proc/{proc.pid}/cgroup").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            _, controllers, path = line.split(":", 2)
            parts = path.split("/")
            cut = next((i for i, part in enumerate(parts) if len(part) >= 64), None)
            if cut is None:
                continue
            root = "/".join(parts[: cut + 1])
            if "cpuacct" in controllers.split(","):
                found = Path(f"/sys/fs/cgroup/{controllers}{root}/cpuacct.usage")
            elif controllers == "":
                found = Path(f"/sys/fs/cgroup{root}/cpu.stat")
            else:
                continue
            if found.exists():
                out[f"node {node}"] = found
                break
    return out


def read_node_cpu(files: Mapping[str, Path]) -> dict[str, float]:
    """CPU seconds used so far by each node container (:func:`node_cpu_files`'s files)."""
    out: dict[str, float] = {}
    for name, path in files.items():
        try:
            text = path.read_text()
        except OSError:
            continue
        if path.name == "cpuacct.usage":
            out[name] = int(text) / 1e9
        else:
            usec = next(ln.split()[1] for ln in text.splitlines() if ln.startswith("usage_usec"))
            out[name] = int(usec) / 1e6
    return out


def _clean(env: Mapping[str, str]) -> None:
    """Delete both kinds' jobs in :data:`NAMESPACE`; wait until their pods are gone."""
    for resource in ("jobs.batch", "leasedjobs.leasehold.dev"):
        _sh(env, "kubectl", "-n", NAMESPACE, "delete", resource, "--all", "--wait=true")
    deadline = time.monotonic() + 300
    while _sh(env, "kubectl", "-n", NAMESPACE, "get", "pods", "-o", "name").strip():
        if time.monotonic() > deadline:
            raise RuntimeError(f"pods of {NAMESPACE} still there after 300 s")
        time.sleep(1)


def run(cluster: str, counts: tuple[int, ...], rounds: int, workdir: Path) -> list[dict[str, Any]]:
    """Measure both kinds ``rounds`` times at each size in ``counts`` on the kind ``cluster``.

    Returns:
        :func:`bench.jobs.run`'s rows.

    Raises:
        RuntimeError: the cluster, chart or a component is missing.
    """
    env, kind = _connect(cluster, workdir)
    h = Harness(kind, workdir, QUICK)
    client.CoreV1Api(h.admin).read_namespace(NAMESPACE)
    _clean(env)
    rows: list[dict[str, Any]] = []
    # Job names new to the namespace: a JobLease outlives its job (the name's
    # fencing domain), and a LeasedJob named as an earlier one takes its lease
    # over instead of creating one, a different path with other requests.
    run_id = secrets.token_hex(2)
    for n, r, which in schedule(counts, rounds):
        h.note_load(f"kind jobs {which} x{n} round {r + 1}")
        log(f"kind: {n} x {which}, round {r + 1}")
        row = measure(h, NAMESPACE, which, n, f"{run_id}r{r}n{n}", SHAPE)
        row["outcomes"] = outcomes(env, which)
        log(f"kind: {which} x{n} round {r + 1}: {row['outcomes']}")
        rows.append(row)
        _clean(env)
    return rows


_CODE_HASH: Final = (
    "import hashlib, pathlib, leasehold\n"
    "root = pathlib.Path(leasehold.__file__).parent\n"
    "h = hashlib.sha256()\n"
    "for p in sorted(root.rglob('*.py')):\n"
    "    h.update(p.relative_to(root).as_posix().encode() + p.read_bytes())\n"
    "print(h.hexdigest()[:12])\n"
)
"""Prints a hash of the ``leasehold`` package's sources (paths and contents)."""


def _connect(cluster: str, workdir: Path) -> tuple[dict[str, str], KindCluster]:
    """Install the chart, make its operator run this checkout, find the processes to meter.

    An operator pod running other code than this checkout (an image loaded
    under the same tag after it started) is restarted first.

    Args:
        cluster: the kind cluster's name.
        workdir: where its kubeconfig is written.

    Returns:
        The environment for ``kubectl``/``helm`` against it, and the cluster.

    Raises:
        RuntimeError: the cluster, chart or a component is missing.
    """
    env = kind_env(cluster, workdir / "kubeconfig")
    install_chart(env)
    operator = operator_state(env)
    if operator["code"] != operator["checkout"]:
        # `make kind-load` replaced the image under the same tag; the pod still runs the old one.
        log(f"operator runs other code than this checkout ({operator}): restarting it")
        _sh(env, "kubectl", "-n", OPERATOR_NAMESPACE, "rollout", "restart", "deployment")
        _sh(
            env,
            *("kubectl", "-n", OPERATOR_NAMESPACE, "rollout", "status", "deployment"),
            *("-l", OPERATOR_SELECTOR, "--timeout=300s"),
        )
        time.sleep(5.0)  # the old pod's termination; the new one's start-up settles
    log(f"operator: {operator_state(env)}")
    kind = KindCluster(workdir / "kubeconfig", find_processes(env, cluster))
    found = ", ".join(f"{name} pid {p.pid}" for name, p in kind.processes.items())
    log(f"kind cluster {cluster}: {found}")
    return env, kind


def operator_state(env: Mapping[str, str]) -> dict[str, str]:
    """The chart's operator as it runs: its pod, restarts, and which code it runs.

    Returns:
        ``pod`` (name), ``restarts`` (its container's restart count), ``code``
        (the hash :data:`_CODE_HASH` prints in the pod) and ``checkout``
        (the same hash of this checkout's ``operator/leasehold``): equal
        when the image loaded into kind was built from this checkout and the
        pod was started from it.
    """
    pods = json.loads(
        _sh(
            env,
            *("kubectl", "-n", OPERATOR_NAMESPACE, "get", "pods", "-l", OPERATOR_SELECTOR),
            *("-o", "json"),
        )
    )
    running = [p for p in pods["items"] if (p.get("status") or {}).get("phase") == "Running"]
    if not running:
        return {"pod": "none running", "restarts": "-", "code": "-", "checkout": "-"}
    pod = running[0]
    restarts = sum(c.get("restartCount", 0) for c in pod["status"].get("containerStatuses", []))
    name = pod["metadata"]["name"]
    code = _sh(
        env, "kubectl", "-n", OPERATOR_NAMESPACE, "exec", name, "--", "python", "-c", _CODE_HASH
    ).strip()
    here = subprocess.run(
        [sys.executable, "-c", _CODE_HASH],
        cwd=REPO / "operator",
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return {"pod": name, "restarts": str(restarts), "code": code, "checkout": here}


def run_indexed(
    cluster: str,
    completions: int,
    parallelism: int,
    timeout: float,
    workdir: Path,
    leased_first: bool = False,
) -> dict[str, Any]:
    """The Indexed side by side on the kind ``cluster``: a batch/v1 Job, then the same LeasedJob.

    :func:`bench.indexed.side` for each kind in :data:`SHAPE`'s pods, the
    namespace emptied before each (so the LeasedJob's pods start on nodes as
    empty as the Job's did) and after; the operator runs this checkout
    (:func:`_connect`).

    Args:
        cluster: the kind cluster's name.
        completions: indexes of each job.
        parallelism: indexes running at once.
        timeout: seconds to wait for each job.
        workdir: scratch folder (the kubeconfig).
        leased_first: run the LeasedJob first (default: the Job first).

    Returns:
        :func:`bench.indexed.run_pods`'s figures plus ``first`` (the kind run
        first), ``operator`` (:func:`operator_state` before and after),
        ``processes`` (name -> pid of what the CPU meter read), and
        in each side's ``cpu``: ``node <node>`` (all of a node container's
        processes, from its cgroup) and ``outside the kind nodes``.

    Raises:
        RuntimeError: the cluster, chart or a component is missing.
    """
    env, kind = _connect(cluster, workdir)
    operator_before = operator_state(env)
    h = Harness(kind, workdir, QUICK)
    client.CoreV1Api(h.admin).read_namespace(NAMESPACE)
    _clean(env)
    run_id = secrets.token_hex(2)  # names new to the namespace, as in run()
    files = node_cpu_files(kind.processes)
    log(f"kind nodes' CPU from {', '.join(str(f) for f in files.values()) or 'nowhere'}")
    sides: dict[bool, dict[str, Any]] = {}
    for batch in (False, True) if leased_first else (True, False):
        which = KINDS[0] if batch else KINDS[1]
        log(f"kind: Indexed {which}, {completions} indexes, parallelism {parallelism}")
        sides[batch] = side(
            h,
            NAMESPACE,
            batch,
            completions,
            parallelism,
            timeout,
            SHAPE,
            f"{'b' if batch else 'l'}{run_id}-indexed",
            lambda: read_node_cpu(files),
        )
        got = sides[batch]
        nodes = [k for k in got["cpu"] if k.startswith("node ")]
        if nodes:  # the rest of the machine: other sessions' work
            for figures in (got["cpu"], got["cpu_seconds"]):
                figures["outside the kind nodes"] = max(
                    0.0,
                    figures.get("machine", got["cpu"]["machine"] * got["seconds"])
                    - sum(figures[k] for k in nodes),
                )
        log(f"kind: {which}: {got['seconds']:.1f} s, done={got['done']} ({got['progress']})")
        _clean(env)
    batch_side, leased = sides[True], sides[False]
    return {
        "completions": completions,
        "parallelism": parallelism,
        "command": POD_COMMAND,
        "batch": batch_side,
        "leased": leased,
        "time_ratio": leased["seconds"] / batch_side["seconds"],
        "writes_ratio": leased["writes_per_index"] / batch_side["writes_per_index"],
        "first": KINDS[1] if leased_first else KINDS[0],
        "operator": (operator_before, operator_state(env)),
        "processes": {name: p.pid for name, p in kind.processes.items()},
    }


def outcomes(env: Mapping[str, str], which: str) -> dict[str, int]:
    """How the round's jobs of ``which`` (one of :data:`KINDS`) ended: outcome -> count.

    A LeasedJob's ``phase`` and, when it failed, its last attempt's reason
    and its pod's exit code (if seen); a
    Job's ``Complete`` or ``Failed`` condition (``Running`` if neither).
    """
    batch = which == KINDS[0]
    resource = "jobs.batch" if batch else "leasedjobs.leasehold.dev"
    items = json.loads(_sh(env, "kubectl", "-n", NAMESPACE, "get", resource, "-o", "json"))
    counted: dict[str, int] = {}
    for item in items.get("items", []):
        status = item.get("status") or {}
        if batch:
            done = [
                c["type"]
                for c in status.get("conditions") or []
                if c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
            ]
            outcome = done[0] if done else "Running"
        else:
            outcome = str(status.get("phase") or "Pending")
            if outcome == "Failed":
                # Its last attempt's pod exit code, when the pod watch saw one:
                # a wrapper that exited before its first renewal (75: lease
                # lost, 2: bad environment) is told apart from a stall.
                last = (status.get("attemptHistory") or [{}])[-1]
                code = last.get("exitCode")
                exited = "" if code is None else f", exit code {code}"
                outcome += f" ({status.get('lastAttemptReason')}{exited})"
        counted[outcome] = counted.get(outcome, 0) + 1
    return counted


def main(argv: list[str] | None = None) -> int:
    """Parse the options, run, print and write the section; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m bench.kind", description=__doc__)
    parser.add_argument("--cluster", default=os.environ.get("KIND_CLUSTER", "kind"))
    parser.add_argument("--jobs", default="20", help="jobs created at once, per size (20,200)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per size and kind")
    parser.add_argument(
        "--indexed",
        action="store_true",
        help="instead: one Indexed batch/v1 Job, then the same Indexed LeasedJob",
    )
    parser.add_argument("--completions", type=int, default=1000, help="with --indexed: indexes")
    parser.add_argument("--parallelism", type=int, default=100, help="with --indexed")
    parser.add_argument(
        "--timeout", type=float, default=1800.0, help="with --indexed: per kind, seconds"
    )
    parser.add_argument(
        "--leased-first", action="store_true", help="with --indexed: the LeasedJob first"
    )
    parser.add_argument("--output", type=Path, help="default build/bench-kind[-indexed].md")
    args = parser.parse_args(argv)
    output = args.output or REPO / "build" / (
        "bench-kind-indexed.md" if args.indexed else "bench-kind.md"
    )
    started = time.monotonic()
    load = os.getloadavg()
    setting = (
        f"Same kind cluster `{args.cluster}` (kind's job controller for Jobs, the Helm"
        " chart's operator for LeasedJobs), same image (`leasehold:0.1.0`), same worker"
        " ServiceAccount, same kubelets"
    )
    with tempfile.TemporaryDirectory(prefix="leasehold-bench-kind-") as tmp:
        if args.indexed:
            figures = run_indexed(
                args.cluster,
                args.completions,
                args.parallelism,
                args.timeout,
                Path(tmp),
                args.leased_first,
            )
        else:
            rows = run(
                args.cluster, tuple(int(x) for x in args.jobs.split(",")), args.rounds, Path(tmp)
            )
    if args.indexed:
        lines = pods_section(
            figures,
            title="Indexed LeasedJob vs Indexed batch/v1 Job on kind (real pods)",
            setting=setting,
        )
        before, after = figures["operator"]
        same = "the same" if after["code"] == after["checkout"] else "**not** the same"
        lines += [
            f"- The operator: pod `{after['pod']}` (at the start `{before['pod']}`), container"
            f" restarts {before['restarts']} -> {after['restarts']}; its `leasehold` package"
            f" hashes to {after['code']}, this checkout's to {after['checkout']} ({same} code).",
        ]
    else:
        lines = section(
            rows, title="LeasedJob vs batch/v1 Job on kind (real pods)", setting=setting
        )
        lines += ["", "How each round's jobs ended:", ""]
        lines += [f"- {r['kind']} x{r['n']} {r['round']}: {r['outcomes']}" for r in rows]
        failed = [(pod, text) for r in rows for pod, text in sorted(r["failed_logs"].items())]
        if failed:
            lines += ["", "The last lines of each failed pod's log (read when it failed):", ""]
            for pod, text in failed:
                lines += [f"`{pod}`:", "", "```", text.rstrip(), "```", ""]
    end = os.getloadavg()
    lines += [
        "",
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())},"
        f" {time.monotonic() - started:.0f} s; load average (1/5/15 min) at its start"
        f" {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}, at its end"
        f" {end[0]:.1f}/{end[1]:.1f}/{end[2]:.1f}.",
    ]
    text = "\n".join(lines)
    print(text)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text + "\n")
    log(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
