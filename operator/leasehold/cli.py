"""The ``leasehold`` command line.

Why this module exists: one entry point for the things people and scripts
run: writing the CRDs from the models (``leasehold crds``), and, as they
land, the operator and the ``run`` wrapper for workers. It only parses
arguments and calls into the package; no logic lives here.
"""

from __future__ import annotations

# Only the standard library at import time: ``leasehold run`` installs its
# signal handlers before the heavy imports (see :func:`main`).
import argparse
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

DESCRIPTION = """\
leasehold runs Kubernetes jobs under expiring leases with fencing tokens.
A worker that stalls loses its lease; the job runs again under a higher token,
and the stalled worker's late writes are rejected by the lease store and by
fenced targets.
"""


EARLY_SIGNALS = (signal.SIGTERM, signal.SIGINT)
"""Signals ``leasehold run`` records from its first instruction on."""
_received: list[int] = []
"""Signals that arrived before ``leasehold run`` installed its own handlers."""


def _record(signum: int, frame: FrameType | None) -> None:
    _received.append(signum)


def _cmd_crds(args: argparse.Namespace) -> int:
    from leasehold.lease.api import crds

    if args.check:
        stale = [
            name
            for name, crd in crds.all_crds().items()
            if not (args.output / name).is_file()
            or (args.output / name).read_text() != crds.render(crd)
        ]
        if stale:
            print(
                f"stale CRDs in {args.output}: {', '.join(stale)}; run `make crds`",
                file=sys.stderr,
            )
            return 1
        print(f"CRDs in {args.output} are up to date")
        return 0
    for path in crds.write(args.output):
        print(f"wrote {path}")
    return 0


OPERATOR_EXTRA_MODULES = frozenset({"kopf", "prometheus_client", "pydantic_settings"})
"""What ``leasehold[operator]`` installs beyond the core (``pip install leasehold``)."""


_OPERATOR_SETTING_FLAGS = (
    "expiry_margin_seconds",
    "liveness_endpoint",
    "metrics_port",
    "priority",
    "peering_lifetime_seconds",
    "reconcile_workers",
    "index_step_workers",
)
"""``leasehold operator`` options named as the setting they override, which they
override when given (``None``: not given, the setting's own source decides)."""


def _cmd_operator(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    try:
        from leasehold.controller.main import run_operator
        from leasehold.controller.settings import OperatorSettings
    except ModuleNotFoundError as exc:
        if exc.name not in OPERATOR_EXTRA_MODULES:
            raise
        print(
            f"leasehold operator: {exc.name} is not installed; the operator needs its extra:"
            " pip install 'leasehold[operator]'",
            file=sys.stderr,
        )
        return 2

    overrides: dict[str, object] = {}
    if args.namespaces:
        overrides["namespaces"] = args.namespaces
    for field in _OPERATOR_SETTING_FLAGS:
        if getattr(args, field) is not None:
            overrides[field] = getattr(args, field)
    if args.peering:
        overrides["peering_name"] = args.peering
        overrides["standalone"] = False
    if args.log_level:
        overrides["log_level"] = args.log_level
    try:
        settings = OperatorSettings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        for error in exc.errors():
            where = ".".join(str(part) for part in error["loc"])
            print(f"leasehold operator: invalid setting {where}: {error['msg']}", file=sys.stderr)
        return 2
    return run_operator(settings)


def _add_crds_parser(sub: Any) -> None:
    """``leasehold crds``: write (or check) the CRD YAML generated from the models."""
    p_crds = sub.add_parser(
        "crds",
        help="write the CRD YAML generated from the models",
        description="Write deploy/crds/*.yaml from the pydantic models (the single source of"
        " truth). With --check, only report whether the files are stale.",
    )
    p_crds.add_argument(
        "--output",
        type=Path,
        default=Path("deploy/crds"),
        help="folder to write into (default: deploy/crds)",
    )
    p_crds.add_argument(
        "--check",
        action="store_true",
        help="exit 1 if the files differ from what the models generate; write nothing",
    )
    p_crds.set_defaults(func=_cmd_crds)


def _add_operator_parser(sub: Any) -> None:
    """``leasehold operator``: the flags that override the operator's ``LEASEHOLD_*`` settings."""
    p_op = sub.add_parser(
        "operator",
        help="run the operator (reconciles LeasedJobs, reclaims expired leases)",
        description="Run the leasehold operator. It watches LeasedJobs and their JobLeases,"
        " claims a lease for each attempt's pod, reclaims leases whose holder stopped"
        " renewing (judged on its own monotonic clock), and fails jobs past their attempt"
        " limit or deadline. Settings come from LEASEHOLD_* environment variables;"
        " flags override them. Credentials: $KUBECONFIG, ~/.kube/config or in-cluster.",
    )
    p_op.add_argument(
        "-n",
        "--namespace",
        action="append",
        dest="namespaces",
        metavar="NS",
        help="watch this namespace (repeatable); default: the whole cluster",
    )
    p_op.add_argument(
        "--expiry-margin-seconds",
        type=float,
        help="time past a lease's duration before it is reclaimed (default 1.0)",
    )
    p_op.add_argument(
        "--liveness-endpoint",
        help="where to serve the liveness probe (default http://0.0.0.0:8080/healthz)",
    )
    p_op.add_argument(
        "--metrics-port",
        type=int,
        help="port of the Prometheus /metrics endpoint, 0 to disable (default 9090)",
    )
    p_op.add_argument(
        "--peering",
        metavar="NAME",
        help="run with Kopf peering under this name (HA: one active replica); default: standalone",
    )
    p_op.add_argument("--priority", type=int, help="peering priority of this replica")
    p_op.add_argument(
        "--peering-lifetime-seconds",
        type=int,
        metavar="S",
        help="HA: a replica silent this long is taken over by a standby (15-3600, default 60)",
    )
    p_op.add_argument(
        "--reconcile-workers",
        type=int,
        metavar="N",
        help="threads running reconciles and reclaims at once (default 16)",
    )
    p_op.add_argument(
        "--index-step-workers",
        type=int,
        metavar="N",
        help="threads carrying out an Indexed job's index steps at once (default 4)",
    )
    p_op.add_argument(
        "--log-level",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="how much to log (default INFO)",
    )
    p_op.set_defaults(func=_cmd_operator)


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser.

    Returns:
        The top-level parser with one sub-parser per command.
    """
    parser = argparse.ArgumentParser(
        prog="leasehold",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _add_crds_parser(sub)
    _add_operator_parser(sub)
    from leasehold.worker.run import add_run_parser

    add_run_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line.

    Args:
        argv: arguments without the program name (default: ``sys.argv[1:]``).

    ``leasehold run`` records ``SIGTERM``/``SIGINT`` before anything else
    (the imports, the lease's start): as a container's PID 1 a signal without
    a handler would be dropped, and the pod's stop lost. The run command
    then handles what arrived (:func:`leasehold.worker.run.run_command`).

    Returns:
        The process exit code.
    """
    main_at = time.monotonic()
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["run"] and threading.current_thread() is threading.main_thread():
        for signum in EARLY_SIGNALS:
            signal.signal(signum, _record)
    args = build_parser().parse_args(args_list)
    args.early_signals = _received
    args.main_at = main_at
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
