"""What ``kubectl leasehold`` shows of a LeasedJob and its JobLeases: rows, then text.

Why this module exists: the plugin's commands read objects (the job, its
lease, its index leases) and print them as a table, JSON or YAML. The views
are pure functions of the objects as the API serves them (camelCase JSON)
and of the time now, so they are tested without a cluster; the reading and
the printing of text live in :mod:`leasehold.plugin.main`.

Each view is a list of rows; a row is a dict of column name to value, the
values JSON-ready (strings, integers, booleans, ``None``). ``-o wide`` shows
every column, the default output the narrow ones; ``-o json`` and
``-o yaml`` print the rows whole.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

import yaml

from leasehold import names

Row = dict[str, Any]
"""One line of a view: column name to a JSON-ready value."""

QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
"""The label that puts a job in a Kueue LocalQueue (Kueue's own name for it)."""

STATUS_COLUMNS: Final = ("JOB", "PHASE", "LEASE", "HOLDER", "TOKEN", "RENEWED", "ATTEMPTS")
STATUS_WIDE: Final = (*STATUS_COLUMNS, "NODE", "LEASE-SECONDS", "SUSPENDED", "QUEUE", "REASON")
HISTORY_COLUMNS: Final = ("TOKEN", "POD", "STARTED", "ENDED", "EXIT", "REASON")
HISTORY_WIDE: Final = (*HISTORY_COLUMNS, "NODE", "POD-UID")
TOKENS_COLUMNS: Final = ("INDEX", "LEASE", "HOLDER", "TOKEN", "RENEWED", "STATE")
TOKENS_WIDE: Final = (*TOKENS_COLUMNS, "MAX-TOKEN", "FAILURES", "LEASE-SECONDS")


def _time(value: Any) -> datetime | None:
    """An RFC 3339 time from the API (``...Z`` or with an offset), or ``None``."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def age(since: Any, now: datetime) -> str | None:
    """How long ago ``since`` was, as kubectl prints ages (``45s``, ``3m12s``, ``2h5m``, ``4d``).

    Args:
        since: an RFC 3339 time string from the API, or anything else (``None``).
        now: the time now (timezone-aware).

    Returns:
        The age, ``0s`` for a time in the future (clocks differ), or ``None``
        when ``since`` is not a time.
    """
    then = _time(since)
    if then is None:
        return None
    seconds = max(0, int((now - then).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds}s" if minutes < 10 else f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes}m" if hours < 10 else f"{hours}h"
    return f"{hours // 24}d"


def lease_state(lease: Mapping[str, Any]) -> str:
    """One word for where a JobLease stands: what ``tokens`` prints as ``STATE``.

    Args:
        lease: the JobLease as the API serves it.

    Returns:
        ``Succeeded``/``Failed`` (a completion was accepted), ``Stopped`` (no
        claim can land: the cap is at the token), ``Suspended``, ``Held`` or
        ``Open`` (a claim may land).
    """
    spec = lease.get("spec") or {}
    completion = spec.get("completion") or {}
    if completion.get("outcome"):
        return str(completion["outcome"])
    if spec.get("suspended"):
        return "Suspended"
    if spec.get("holderIdentity"):
        return "Held"
    token = int(spec.get("fencingToken") or 0)
    cap = spec.get("maxFencingToken")
    if cap is not None and int(cap) <= token:
        return "Stopped"
    return "Open"


def _condition_reason(job: Mapping[str, Any]) -> str | None:
    """The reason of the condition that says most: Failed, Complete, then Ready."""
    conditions = {c.get("type"): c for c in (job.get("status") or {}).get("conditions") or []}
    for kind in ("Failed", "Complete", "FailureTarget", "SuccessCriteriaMet", "Ready"):
        found = conditions.get(kind)
        if found is not None and (kind == "Ready" or found.get("status") == "True"):
            return str(found.get("reason") or "") or None
    return None


def status_rows(
    job: Mapping[str, Any],
    lease: Mapping[str, Any] | None,
    now: datetime,
    workload: Mapping[str, Any] | None = None,
) -> list[Row]:
    """``kubectl leasehold status``: one row for a job, its lease and its holder.

    Args:
        job: the LeasedJob as the API serves it.
        lease: its JobLease (``status.leaseName``), or ``None`` (not made yet;
            a job of several completions: see :func:`token_rows`).
        now: the time now (timezone-aware), for ``RENEWED``.
        workload: the Kueue Workload that queues the job, when it is labelled
            with :data:`QUEUE_LABEL` and one was found.

    Returns:
        One row: ``JOB``, ``PHASE``, ``LEASE``, ``HOLDER``, ``TOKEN``,
        ``RENEWED`` (the age of the lease's ``renewTime``), ``ATTEMPTS`` and,
        in wide output, ``NODE``, ``LEASE-SECONDS``, ``SUSPENDED``, ``QUEUE``
        (the queue name and, with a Workload, where it stands: :func:`admission`) and
        ``REASON``. A job of several completions shows its progress
        (``status.completionProgress``) as ``ATTEMPTS``.
    """
    meta = job.get("metadata") or {}
    spec = job.get("spec") or {}
    st = job.get("status") or {}
    lease_spec = (lease or {}).get("spec") or {}
    history = st.get("attemptHistory") or []
    queue = (meta.get("labels") or {}).get(QUEUE_LABEL)
    if queue and workload is not None:
        queue = f"{queue} ({admission(workload)})"
    attempts = st.get("completionProgress") or st.get("attempts")
    return [
        {
            "JOB": meta.get("name"),
            "PHASE": st.get("phase"),
            "LEASE": st.get("leaseName") or (lease or {}).get("metadata", {}).get("name"),
            "HOLDER": lease_spec.get("holderIdentity") if lease else st.get("holderIdentity"),
            "TOKEN": lease_spec.get("fencingToken") if lease else st.get("fencingToken"),
            "RENEWED": age(lease_spec.get("renewTime"), now)
            if lease_spec.get("holderIdentity")
            else None,
            "ATTEMPTS": attempts,
            "NODE": history[-1].get("nodeName") if history else None,
            "LEASE-SECONDS": lease_spec.get("leaseDurationSeconds")
            or spec.get("leaseDurationSeconds"),
            "SUSPENDED": bool(spec.get("suspend")) or _suspended(st),
            "QUEUE": queue,
            "REASON": _condition_reason(job),
        }
    ]


def admission(workload: Mapping[str, Any]) -> str:
    """Where a Kueue Workload stands, in a few words.

    Args:
        workload: the Workload as the API serves it.

    Returns:
        ``finished: <reason>`` once ``Finished``; ``evicted: <reason>``
        while ``Evicted`` (``Preempted``, ...: the job is suspended, fenced,
        until it is admitted again); ``admitted by <ClusterQueue>`` (or
        ``admitted``) while ``Admitted``; else ``pending``.
    """
    st = workload.get("status") or {}
    conditions = {c.get("type"): c for c in st.get("conditions") or []}

    def true(type_: str) -> Mapping[str, Any] | None:
        found = conditions.get(type_)
        return found if found is not None and found.get("status") == "True" else None

    finished, evicted, admitted = true("Finished"), true("Evicted"), true("Admitted")
    if finished is not None:
        return f"finished: {finished.get('reason')}"
    if evicted is not None:
        return f"evicted: {evicted.get('reason')}"
    if admitted is not None:
        cluster_queue = (st.get("admission") or {}).get("clusterQueue")
        return f"admitted by {cluster_queue}" if cluster_queue else "admitted"
    return "pending"


def _suspended(status: Mapping[str, Any]) -> bool:
    """Whether the job's ``Suspended`` condition is True (``spec.suspend``, or its queue's gate)."""
    return any(
        c.get("type") == "Suspended" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def history_rows(job: Mapping[str, Any]) -> list[Row]:
    """``kubectl leasehold history``: the job's attempts, oldest first.

    From ``status.attemptHistory`` (the last ten attempts the operator
    recorded; an attempt still running has no ``ENDED``).

    Args:
        job: the LeasedJob as the API serves it.

    Returns:
        A row per attempt: ``TOKEN``, ``POD``, ``STARTED``, ``ENDED``,
        ``EXIT``, ``REASON`` and, wide, ``NODE`` and ``POD-UID``.
    """
    return [
        {
            "TOKEN": record.get("fencingToken"),
            "POD": record.get("podName"),
            "STARTED": record.get("startTime"),
            "ENDED": record.get("endTime"),
            "EXIT": record.get("exitCode"),
            "REASON": record.get("reason") or ("Running" if not record.get("endTime") else None),
            "NODE": record.get("nodeName"),
            "POD-UID": record.get("podUID"),
        }
        for record in (job.get("status") or {}).get("attemptHistory") or []
    ]


def token_rows(leases: Sequence[Mapping[str, Any]], now: datetime) -> list[Row]:
    """``kubectl leasehold tokens``: each lease of a job, by completion index.

    Args:
        leases: the job's JobLeases (its own, or one per index) as served.
        now: the time now (timezone-aware), for ``RENEWED``.

    Returns:
        A row per lease, by index (a single job's lease has index ``None``):
        ``INDEX``, ``LEASE``, ``HOLDER``, ``TOKEN``, ``RENEWED``, ``STATE``
        (:func:`lease_state`) and, wide, ``MAX-TOKEN``, ``FAILURES``,
        ``LEASE-SECONDS``.
    """

    def index_of(lease: Mapping[str, Any]) -> int:
        raw = str(
            ((lease.get("metadata") or {}).get("labels") or {}).get(
                names.LABEL_COMPLETION_INDEX, ""
            )
        )
        return int(raw) if raw.isdigit() else -1

    rows = []
    for lease in sorted(leases, key=index_of):
        spec = lease.get("spec") or {}
        index = index_of(lease)
        rows.append(
            {
                "INDEX": index if index >= 0 else None,
                "LEASE": (lease.get("metadata") or {}).get("name"),
                "HOLDER": spec.get("holderIdentity"),
                "TOKEN": spec.get("fencingToken"),
                "RENEWED": age(spec.get("renewTime"), now) if spec.get("holderIdentity") else None,
                "STATE": lease_state(lease),
                "MAX-TOKEN": spec.get("maxFencingToken"),
                "FAILURES": spec.get("failures"),
                "LEASE-SECONDS": spec.get("leaseDurationSeconds"),
            }
        )
    return rows


def render(rows: Sequence[Row], columns: Sequence[str], output: str | None) -> str:
    """Rows as text: a table (kubectl's look), JSON or YAML.

    Args:
        rows: the view's rows.
        columns: the columns a table shows (``-o wide``: the wide set), in order.
        output: ``None`` or ``"wide"`` (a table), ``"json"``, ``"yaml"``.

    Returns:
        The text, ending with a newline; a table of no rows is ``No resources found.``

    Raises:
        ValueError: another ``output``.
    """
    if output == "json":
        return json.dumps(list(rows), indent=2) + "\n"
    if output == "yaml":
        return str(yaml.safe_dump(list(rows), sort_keys=False))
    if output not in (None, "wide"):
        raise ValueError(f"unknown output format {output!r}: use json, yaml or wide")
    if not rows:
        return "No resources found.\n"
    cells = [[_cell(row.get(column)) for column in columns] for row in rows]
    widths = [max(len(c), *(len(line[i]) for line in cells)) for i, c in enumerate(columns)]
    lines = [list(columns), *cells]
    return "".join(
        "   ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        + "\n"
        for line in lines
    )


def _cell(value: Any) -> str:
    """A table cell: ``<none>`` for no value, as kubectl prints it."""
    if value is None or value == "":
        return "<none>"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)
