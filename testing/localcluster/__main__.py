"""Command line: ``python -m localcluster up|down|status``.

``up`` starts a control plane that outlives the command (its processes run
in their own sessions), records their pids in ``<workdir>/state.json`` and
prints ``export KUBECONFIG=...``, so ``eval "$(python -m localcluster up)"``
points the shell at it. Progress and errors go to stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from localcluster.cluster import LocalCluster
from localcluster.errors import LocalClusterError
from localcluster.layout import COMPONENTS, Layout
from localcluster.probes import component_probes
from localcluster.process import stop_all
from localcluster.state import ClusterState, clear_state, load_state


def default_workdir() -> Path:
    """Return the default work directory, ``${LEASEHOLD_CACHE_DIR:-~/.cache/leasehold}/cluster``.

    Returns:
        The path (not created).
    """
    cache = os.environ.get("LEASEHOLD_CACHE_DIR") or str(Path.home() / ".cache" / "leasehold")
    return Path(cache) / "cluster"


def _export_line(kubeconfig: Path) -> str:
    return f"export KUBECONFIG={kubeconfig}"


def _health(state: ClusterState) -> dict[str, str]:
    probes = component_probes(Layout(state.workdir), state.ports)
    report: dict[str, str] = {}
    for process in state.processes:
        if not process.running():
            report[process.name] = "not running"
            continue
        result = probes[process.name]()
        report[process.name] = "healthy" if result.ok else f"unhealthy: {result.detail}"
    for name in COMPONENTS:
        report.setdefault(name, "never started")
    return report


def cmd_up(args: argparse.Namespace) -> int:
    """Start a detached cluster, or report the one already running.

    Args:
        args: Parsed arguments (``workdir``, ``bin_dir``, ``timeout``).

    Returns:
        Exit code: 0 when a healthy cluster runs, 1 otherwise.
    """
    layout = Layout(args.workdir.absolute())
    state = load_state(layout)
    if state is not None and state.running():
        health = _health(state)
        if all(value == "healthy" for value in health.values()):
            print(f"a cluster already runs in {layout.workdir}", file=sys.stderr)
            print(_export_line(state.kubeconfig))
            return 0
        for name, value in health.items():
            print(f"  {name}: {value}", file=sys.stderr)
        print(
            f"a cluster in {layout.workdir} runs only in part; "
            f"run `python -m localcluster down --workdir {layout.workdir}` first",
            file=sys.stderr,
        )
        return 1
    cluster = LocalCluster(layout.workdir, args.bin_dir, timeout=args.timeout)
    print(f"starting control plane in {layout.workdir}", file=sys.stderr)
    kubeconfig = cluster.start()
    steps = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in cluster.timings.items())
    print(f"control plane ready at {cluster.server} ({steps})", file=sys.stderr)
    down = "python -m localcluster down"
    if layout.workdir != default_workdir().absolute():
        down += f" --workdir {layout.workdir}"
    print(f"logs: {layout.logs_dir}; stop it with: {down}", file=sys.stderr)
    print(_export_line(kubeconfig))
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    """Stop the cluster recorded in the work directory.

    Args:
        args: Parsed arguments (``workdir``, ``grace``).

    Returns:
        Exit code 0 (also when nothing ran).
    """
    layout = Layout(args.workdir.absolute())
    state = load_state(layout)
    if state is None:
        print(f"no cluster runs in {layout.workdir}", file=sys.stderr)
        return 0
    running = state.running()
    stop_all(state.stop_waves(), args.grace)
    clear_state(layout)
    stopped = ", ".join(process.name for process in running)
    summary = f"stopped {stopped}" if stopped else "nothing was running"
    print(f"{summary}; logs stay in {layout.logs_dir}", file=sys.stderr)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """Print each component's pid and health.

    Args:
        args: Parsed arguments (``workdir``).

    Returns:
        Exit code: 0 when every component is healthy, 1 otherwise.
    """
    layout = Layout(args.workdir.absolute())
    state = load_state(layout)
    if state is None:
        print(f"no cluster runs in {layout.workdir}")
        return 1
    pids = {process.name: process.pid for process in state.processes}
    health = _health(state)
    print(f"cluster in {layout.workdir} at {state.server}")
    for name, value in health.items():
        pid = pids.get(name)
        print(f"  {name:<24} pid {pid if pid is not None else '-':<8} {value}")
    print(f"  logs: {layout.logs_dir}")
    print(_export_line(state.kubeconfig))
    return 0 if all(value == "healthy" for value in health.values()) else 1


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser of the CLI.

    Returns:
        The parser, with ``up``, ``down`` and ``status`` subcommands.
    """
    parser = argparse.ArgumentParser(
        prog="python -m localcluster",
        description=(
            "Run a local Kubernetes control plane (etcd, kube-apiserver, "
            "kube-controller-manager, kube-scheduler; no kubelet) on loopback ports."
        ),
        epilog='Typical use: eval "$(python -m localcluster up)"; kubectl get ns; '
        "python -m localcluster down",
    )
    workdir = argparse.ArgumentParser(add_help=False)
    workdir.add_argument(
        "--workdir",
        type=Path,
        default=default_workdir(),
        help="folder for PKI, etcd data, kubeconfig, logs and state.json (default: %(default)s)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = commands.add_parser(
        "up",
        parents=[workdir],
        help="start the control plane in the background",
        description=(
            "Start the control plane with a fresh PKI and an empty etcd, wait until every "
            "component is healthy, then exit and leave it running. Prints "
            "'export KUBECONFIG=...' on stdout. If a healthy cluster already runs in "
            "the work directory, only prints that line."
        ),
    )
    up.add_argument(
        "--bin-dir",
        type=Path,
        default=None,
        help="folder with etcd and the kube-* binaries (default: run hack/controlplane/build.sh)",
    )
    up.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds each component gets to become healthy (default: %(default)s)",
    )
    up.set_defaults(handler=cmd_up)

    down = commands.add_parser(
        "down",
        parents=[workdir],
        help="stop the control plane",
        description="Stop the processes recorded in state.json. Logs and data stay.",
    )
    down.add_argument(
        "--grace",
        type=float,
        default=10.0,
        help="seconds between SIGTERM and SIGKILL (default: %(default)s)",
    )
    down.set_defaults(handler=cmd_down)

    status = commands.add_parser(
        "status",
        parents=[workdir],
        help="show pids and health of each component",
        description="Show each component's pid and health; exit 1 unless all are healthy.",
    )
    status.set_defaults(handler=cmd_status)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI.

    Args:
        argv: Arguments without the program name; default ``sys.argv[1:]``.

    Returns:
        The exit code.
    """
    args = build_parser().parse_args(argv)
    try:
        code: int = args.handler(args)
    except LocalClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
