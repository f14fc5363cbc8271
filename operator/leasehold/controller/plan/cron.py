"""Pure decisions for one LeasedCronJob: final leases, the fencing domain's floor, history.

Why this module exists: the parts of a cron job's reconcile that decide on
plain inputs are tested without an API server (``tests/unit/test_cron.py``);
:mod:`leasehold.controller.act.cron` carries them out.

No Kubernetes client here: inputs are raw bodies and the protocol's
:class:`~leasehold.lease.protocol.LeaseRecord`.
"""

from __future__ import annotations

from typing import Any

from leasehold import names
from leasehold.lease import models
from leasehold.lease.protocol import LeaseRecord


def lease_is_final(record: LeaseRecord) -> bool:
    """Whether a run's lease can never be held again (completed, or unheld and capped).

    Args:
        record: the lease.

    Returns:
        ``True`` if no claim can ever take it again.
    """
    if record.completion is not None:
        return True
    cap = record.max_fencing_token
    return record.holder_identity is None and cap is not None and cap <= record.fencing_token


def reserved_floor(records: list[LeaseRecord]) -> int:
    """The highest token any run's lease has used or may still use.

    Args:
        records: every run's lease (they outlive their runs: the domain finalizer).

    Returns:
        The largest cap or token, ``0`` with no leases.
    """
    return max(
        (max(r.fencing_token, r.max_fencing_token or 0) for r in records),
        default=0,
    )


def history_to_delete(runs: list[dict[str, Any]], *, succeeded: int, failed: int) -> list[str]:
    """Finished runs beyond the history limits, oldest first.

    Args:
        runs: the runs' LeasedJob bodies.
        succeeded: ``spec.successfulJobsHistoryLimit``.
        failed: ``spec.failedJobsHistoryLimit``.

    Returns:
        The names of the runs to delete.
    """
    out: list[str] = []
    for phase, keep in (
        (models.Phase.SUCCEEDED.value, succeeded),
        (models.Phase.FAILED.value, failed),
    ):
        done = sorted(
            (r for r in runs if (r.get("status") or {}).get("phase") == phase),
            key=_scheduled_key,
        )
        out += [r["metadata"]["name"] for r in done[: max(0, len(done) - keep)]]
    return out


def _scheduled_key(run: dict[str, Any]) -> tuple[str, str]:
    meta = run["metadata"]
    return (
        (meta.get("annotations") or {}).get(names.ANNOTATION_SCHEDULED_TIME, ""),
        str(meta.get("creationTimestamp", "")),
    )
