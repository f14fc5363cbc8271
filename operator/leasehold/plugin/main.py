"""``kubectl leasehold``: a LeasedJob's lease, holder, tokens and attempts, for platform operators.

Why this module exists: ``kubectl get leasedjob`` shows a job's printer
columns, but the questions asked during an incident are about its lease:
who holds it, under which token, when it was last renewed, what each attempt
did, which index is stuck. kubectl runs any ``kubectl-<name>`` on ``PATH`` as
``kubectl <name>``; this module is the ``kubectl-leasehold`` console script
installed with the package. It parses arguments, reads the objects with the
official client and prints the views of :mod:`leasehold.plugin.views`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final, cast

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from leasehold import names
from leasehold.plugin import views

DESCRIPTION: Final = """\
Inspect and steer LeasedJobs: their lease, holder, fencing tokens and attempts.

A LeasedJob runs under an expiring lease (a JobLease); each attempt claims it
under a higher fencing token, and a stalled worker's late writes are refused.
These commands read the job and its leases from the API server of the current
kubeconfig context (or --context), in the context's namespace (or -n).
"""

EPILOG: Final = """\
examples:
  kubectl leasehold status nightly-etl -n data     lease, holder, token, renew age
  kubectl leasehold history nightly-etl -o wide    every recorded attempt
  kubectl leasehold tokens shard-import            the lease of each index
  kubectl leasehold suspend nightly-etl            fence the running attempt, run none
  kubectl leasehold resume nightly-etl             run again above the old token
"""

KUEUE_GROUP: Final = "kueue.x-k8s.io"
KUEUE_VERSIONS: Final = ("v1beta2", "v1beta1")
"""Workload API versions tried, newest first (Kueue serves one or both)."""


class CommandError(Exception):
    """What to tell the user on stderr before exiting with status 1."""


def _common_flags() -> argparse.ArgumentParser:
    """The flags every subcommand takes (kubectl's names for them)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-n", "--namespace", help="the job's namespace (default: the context's, else default)"
    )
    common.add_argument("--context", help="the kubeconfig context to use (default: current)")
    common.add_argument(
        "--kubeconfig", help="the kubeconfig file (default: $KUBECONFIG, ~/.kube/config)"
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``kubectl leasehold`` and its subcommands.

    Returns:
        The parser; each subcommand sets ``func`` (its handler) and takes
        ``job``, ``-n``, ``--context``, ``--kubeconfig`` and, where it prints
        a view, ``-o``.
    """
    common = _common_flags()
    output = argparse.ArgumentParser(add_help=False)
    output.add_argument(
        "-o",
        "--output",
        choices=("json", "yaml", "wide"),
        help="json or yaml: the rows whole; wide: a table of more columns",
    )
    parser = argparse.ArgumentParser(
        prog="kubectl leasehold",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, func, parents, text in (
        (
            "status",
            _status,
            [common, output],
            "the job's phase, lease, holder, fencing token, renew age and attempts"
            " (and its Kueue queue, when it is queued)",
        ),
        ("history", _history, [common, output], "the job's recorded attempts as a table"),
        (
            "tokens",
            _tokens,
            [common, output],
            "each lease of the job: per completion index for a job of several completions",
        ),
        (
            "suspend",
            _suspend,
            [common],
            "set spec.suspend: the running attempt's lease is released and its token fenced",
        ),
        (
            "resume",
            _resume,
            [common],
            "clear spec.suspend: the job runs again under a higher token",
        ),
    ):
        sub = commands.add_parser(name, parents=parents, help=text, description=text)
        sub.add_argument("job", help="the LeasedJob's name")
        sub.set_defaults(func=func)
    return parser


class Cluster:
    """The API reads and writes the commands make (the official client).

    Args:
        kubeconfig: the kubeconfig file, or ``None`` (``$KUBECONFIG``, ``~/.kube/config``).
        context: the context, or ``None`` (the current one).
        namespace: the namespace, or ``None`` (the context's, else ``default``).

    Raises:
        CommandError: no usable kubeconfig (and not in a pod).
    """

    def __init__(self, kubeconfig: str | None, context: str | None, namespace: str | None) -> None:
        try:
            api = config.new_client_from_config(config_file=kubeconfig, context=context)
            contexts, current = config.list_kube_config_contexts(config_file=kubeconfig)
            chosen = (
                next((c for c in contexts if c["name"] == context), current) if context else current
            )
            default_namespace = (chosen or {}).get("context", {}).get("namespace") or "default"
        except (ConfigException, FileNotFoundError) as exc:
            if kubeconfig or context:
                raise CommandError(f"error: cannot load kubeconfig: {exc}") from exc
            try:
                config.load_incluster_config()
            except ConfigException:
                raise CommandError(
                    f"error: no kubeconfig found ({exc}); set KUBECONFIG or pass --kubeconfig"
                ) from exc
            api = client.ApiClient()
            default_namespace = "default"
        self.namespace: str = namespace or default_namespace
        self.custom = client.CustomObjectsApi(api)

    def job(self, name: str) -> dict[str, Any]:
        """The LeasedJob ``name``.

        Raises:
            CommandError: it does not exist (kubectl's NotFound message), or the
                API server refused the read.
        """
        return self._call(
            lambda: self.custom.get_namespaced_custom_object(
                names.GROUP, names.VERSION, self.namespace, names.PLURAL_LEASED_JOBS, name
            ),
            f'leasedjobs.{names.GROUP} "{name}"',
        )

    def lease(self, name: str) -> dict[str, Any] | None:
        """The JobLease ``name``, or ``None`` if there is none."""
        try:
            found = self.custom.get_namespaced_custom_object(
                names.GROUP, names.VERSION, self.namespace, names.PLURAL_JOB_LEASES, name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise CommandError(_server_error(exc, f'jobleases.{names.GROUP} "{name}"')) from exc
        return cast(dict[str, Any], found)

    def index_leases(self, job: str) -> list[dict[str, Any]]:
        """The index leases of job ``job`` (``leasehold.dev/job`` and a completion index)."""
        selector = f"{names.LABEL_JOB}={job},{names.LABEL_COMPLETION_INDEX}"
        found = self._call(
            lambda: self.custom.list_namespaced_custom_object(
                names.GROUP,
                names.VERSION,
                self.namespace,
                names.PLURAL_JOB_LEASES,
                label_selector=selector,
            ),
            f"jobleases.{names.GROUP}",
        )
        return list(found.get("items") or [])

    def workload(self, job: Mapping[str, Any]) -> dict[str, Any] | None:
        """The Kueue Workload the job owns, or ``None`` (none, or Kueue not installed)."""
        uid = (job.get("metadata") or {}).get("uid")
        for version in KUEUE_VERSIONS:
            try:
                found = self.custom.list_namespaced_custom_object(
                    KUEUE_GROUP, version, self.namespace, "workloads"
                )
            except ApiException:
                continue  # this version (or Kueue) is not served
            for item in cast(dict[str, Any], found).get("items") or []:
                refs = (item.get("metadata") or {}).get("ownerReferences") or []
                if any(ref.get("uid") == uid for ref in refs):
                    return dict(item)
            return None
        return None

    def patch_suspend(self, name: str, suspend: bool) -> dict[str, Any]:
        """Set the job's ``spec.suspend`` (a merge patch).

        Raises:
            CommandError: the job does not exist, or the API server refused.
        """
        return self._call(
            lambda: self.custom.patch_namespaced_custom_object(
                names.GROUP,
                names.VERSION,
                self.namespace,
                names.PLURAL_LEASED_JOBS,
                name,
                {"spec": {"suspend": suspend}},
            ),
            f'leasedjobs.{names.GROUP} "{name}"',
        )

    def _call(self, read: Callable[[], Any], what: str) -> dict[str, Any]:
        try:
            return dict(read())
        except ApiException as exc:
            raise CommandError(_server_error(exc, what)) from exc


def _server_error(exc: ApiException, what: str) -> str:
    """The wording kubectl uses for a refusal: ``Error from server (NotFound): ... not found``."""
    if exc.status == 404:
        return f"Error from server (NotFound): {what} not found"
    reason = exc.reason or "Error"
    return f"Error from server ({reason}): {what}: {exc.status} {(exc.body or '').strip()[:500]}"


def _now() -> datetime:
    return datetime.now(UTC)


def _columns(narrow: Sequence[str], wide: Sequence[str], output: str | None) -> Sequence[str]:
    return wide if output == "wide" else narrow


def _leases_of(cluster: Cluster, job: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A job's leases: one per index for several completions, else its own (if made)."""
    name = str((job.get("metadata") or {}).get("name"))
    if _is_multi(job):
        return cluster.index_leases(name)
    own = cluster.lease(str((job.get("status") or {}).get("leaseName") or name))
    return [own] if own is not None else []


def _status(cluster: Cluster, args: argparse.Namespace) -> str:
    job = cluster.job(args.job)
    leases = _leases_of(cluster, job)
    single = leases[0] if len(leases) == 1 and not _is_multi(job) else None
    workload = None
    if views.QUEUE_LABEL in ((job.get("metadata") or {}).get("labels") or {}):
        workload = cluster.workload(job)
    rows = views.status_rows(job, single, _now(), workload)
    return views.render(
        rows, _columns(views.STATUS_COLUMNS, views.STATUS_WIDE, args.output), args.output
    )


def _is_multi(job: Mapping[str, Any]) -> bool:
    """Whether the job runs a lease per index: several completions, or a work queue's slots.

    A work queue (``parallelism`` above 1, no ``completions``) that an earlier
    operator ran on one lease (``status.leaseName`` set) keeps that lease.
    """
    spec = job.get("spec") or {}
    if spec.get("completionMode") == "Indexed" or int(spec.get("completions") or 1) > 1:
        return True
    queue = "completions" not in spec and int(spec.get("parallelism") or 1) > 1
    return queue and not (job.get("status") or {}).get("leaseName")


def _history(cluster: Cluster, args: argparse.Namespace) -> str:
    rows = views.history_rows(cluster.job(args.job))
    return views.render(
        rows, _columns(views.HISTORY_COLUMNS, views.HISTORY_WIDE, args.output), args.output
    )


def _tokens(cluster: Cluster, args: argparse.Namespace) -> str:
    rows = views.token_rows(_leases_of(cluster, cluster.job(args.job)), _now())
    return views.render(
        rows, _columns(views.TOKENS_COLUMNS, views.TOKENS_WIDE, args.output), args.output
    )


def _suspend(cluster: Cluster, args: argparse.Namespace) -> str:
    cluster.patch_suspend(args.job, True)
    return f"leasedjob.{names.GROUP}/{args.job} suspended\n"


def _resume(cluster: Cluster, args: argparse.Namespace) -> str:
    cluster.patch_suspend(args.job, False)
    return f"leasedjob.{names.GROUP}/{args.job} resumed\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``kubectl leasehold`` (the ``kubectl-leasehold`` console script).

    Args:
        argv: the arguments after the command name (default: ``sys.argv[1:]``).

    Returns:
        The exit status: 0, 1 on an error told on stderr (a missing job, no
        kubeconfig, a refusal), 2 on a usage error (argparse's).
    """
    args = build_parser().parse_args(argv)
    try:
        cluster = Cluster(args.kubeconfig, args.context, args.namespace)
        sys.stdout.write(args.func(cluster, args))
    except CommandError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
