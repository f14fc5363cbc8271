"""Command line: ``python -m podrunner --kubeconfig K --workdir D [--node NAME]``.

Runs a `PodRunner` in the foreground until SIGTERM or SIGINT (Ctrl-C), then
kills the pod processes it started and exits.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from kubernetes.config import ConfigException

from podrunner.kube import KubeError
from podrunner.runner import DEFAULT_NODE, MAX_GRACE_SECONDS, PodRunner


def default_workdir() -> Path:
    """Return the default work directory, ``${LEASEHOLD_CACHE_DIR:-~/.cache/leasehold}/podrunner``.

    Returns:
        The path (not created).
    """
    cache = os.environ.get("LEASEHOLD_CACHE_DIR") or str(Path.home() / ".cache" / "leasehold")
    return Path(cache) / "podrunner"


def _env_pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser of the CLI.

    Returns:
        The parser.
    """
    kubeconfig = os.environ.get("KUBECONFIG")
    parser = argparse.ArgumentParser(
        prog="python -m podrunner",
        description=(
            "Play the kubelet of one node on a kubelet-less cluster (such as "
            "`python -m localcluster up`): register the node and keep it Ready, and run "
            "the first container's command + args of every pod scheduled to it as a "
            "local process (images are ignored), with the pod's env, a service-account "
            "token bound to the pod (KUBECONFIG and LEASEHOLD_SERVICEACCOUNT_DIR point "
            "at it) and its output in WORKDIR/pods/<namespace>_<name>_<uid>/log. "
            "Restart policies are treated as Never. Runs until SIGTERM or Ctrl-C, "
            "then kills its pod processes."
        ),
        epilog=(
            'Example: eval "$(python -m localcluster up)"; '
            "python -m podrunner --workdir /tmp/runner & "
            "kubectl run hello --image=none --restart=Never --command -- sh -c 'echo hi'"
        ),
    )
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        default=Path(kubeconfig) if kubeconfig else None,
        required=kubeconfig is None,
        help="kubeconfig with rights on nodes, node leases, pods and service-account "
        "tokens, e.g. the admin one of localcluster (default: $KUBECONFIG)",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=default_workdir(),
        help="folder for the pods' logs, pid files and credentials (default: %(default)s)",
    )
    parser.add_argument(
        "--node",
        default=DEFAULT_NODE,
        help="name of the Node to register and serve (default: %(default)s)",
    )
    parser.add_argument(
        "--env",
        metavar="NAME=VALUE",
        type=_env_pair,
        action="append",
        default=[],
        help="add a variable to every pod process (repeatable; a pod's own env wins)",
    )
    parser.add_argument(
        "--heartbeat-interval",
        type=float,
        default=10.0,
        help="seconds between node status posts and node Lease renewals (default: %(default)s)",
    )
    parser.add_argument(
        "--max-grace",
        type=float,
        default=MAX_GRACE_SECONDS,
        help="cap on a pod's termination grace period in seconds (default: %(default)s)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages too")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI.

    Args:
        argv: Arguments without the program name; default ``sys.argv[1:]``.

    Returns:
        The exit code: 0 after a signal, 1 when the runner cannot start.
    """
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        logging.getLogger("podrunner").info("got %s; stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    runner = PodRunner(
        args.kubeconfig,
        args.workdir,
        args.node,
        dict(args.env),
        heartbeat_interval=args.heartbeat_interval,
        max_grace_seconds=args.max_grace,
    )
    try:
        runner.start()
    except (KubeError, OSError, ConfigException) as exc:
        print(f"error: the pod runner could not start: {exc}", file=sys.stderr)
        return 1
    try:
        while not stop.wait(1.0):
            pass
    finally:
        runner.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
