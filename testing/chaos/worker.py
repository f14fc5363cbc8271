"""The chaos run's worker: fenced writes to PostgreSQL under the pod's lease.

Run by the operator's pods as ``python -m chaos.worker`` (``PYTHONPATH``
includes ``testing``). It holds the lease the operator claimed for the pod,
makes ``CHAOS_WRITES`` fenced writes to PostgreSQL (``CHAOS_DSN``, usually
through the run's delaying proxy), each after a lease check, then completes
the lease. Every write and the completion, with the answer it got, is
appended to the history file ``CHAOS_HISTORY`` as one JSON line.

The same :func:`work` runs in-process for the run's pull-mode claimers.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import random
import sys
import time
from typing import Any

import psycopg

from leasehold.fencing import DuplicateEffect, StaleToken
from leasehold.fencing.postgres import GATE_CTE, fence
from leasehold.worker import Accepted, LeaseHolder, LeaseLost, Outcome

EFFECT_SQL = (
    "INSERT INTO chaos_effect (key, token, holder, step)"
    " SELECT %(key)s, %(token)s, %(holder)s, %(step)s"
    f" WHERE EXISTS (SELECT 1 FROM {GATE_CTE})"
)
SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS chaos_effect (
    seq bigserial PRIMARY KEY,
    key text NOT NULL,
    token bigint NOT NULL,
    holder text NOT NULL,
    step text NOT NULL
);
"""


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_CLOCK_GETTIME = {"x86_64": 228, "aarch64": 113}.get(platform.machine())
_LIBC = ctypes.CDLL(None, use_errno=True)


def clock() -> float:
    """The machine's monotonic clock in seconds, the same in every process.

    Why: workers run under libfaketime, which moves ``time.monotonic()`` too;
    the history's ``t`` and ``call`` must be comparable across processes (the
    porcupine judge orders operations by them), so the clock is read with the
    raw system call, which libfaketime does not intercept.
    """
    if _CLOCK_GETTIME is None:
        return time.monotonic()
    spec = _Timespec()
    if _LIBC.syscall(_CLOCK_GETTIME, 1, ctypes.byref(spec)) != 0:  # 1: CLOCK_MONOTONIC
        return time.monotonic()
    return float(spec.tv_sec) + float(spec.tv_nsec) / 1e9


def record(path: str, **fields: Any) -> None:
    """Append one history record (one write of less than a page: atomic).

    ``t`` is :func:`clock` now: the operation's return, or when it was seen.
    """
    line = json.dumps({"t": clock(), **fields}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def work(
    holder: LeaseHolder,
    dsn: str,
    history: str,
    writes: int,
    job: str,
    key: str | None = None,
    hold_seconds: float = 0.0,
) -> bool:
    """Make ``writes`` fenced writes under ``holder``, then complete its lease.

    Args:
        holder: a started lease holder.
        dsn: the PostgreSQL connection string.
        history: the history file.
        writes: how many writes.
        job: the lease's ``namespace/name`` (each lease is a fencing domain:
            a plain job's, an index's, a cron run's).
        key: the fenced resource key (default ``job``); a LeasedCronJob's runs
            share one, ``namespace/<cron>``, as they share one fencing domain.
        hold_seconds: about how long to work under the lease: the writes are
            spread over it (a cron run that outlasts its minute meets the next run).

    Returns:
        Whether the completion was accepted.
    """
    token = int(holder.token)
    key = key or job
    base = {"job": job, "key": key, "holder": holder.holder_identity, "token": token}
    conn: psycopg.Connection[Any] | None = None
    for step in range(writes):
        pause = hold_seconds / max(writes, 1) if hold_seconds > 0 else 0.0
        time.sleep(random.uniform(0.05, 0.3) + random.uniform(0.5, 1.0) * pause)
        # Read before the lease check: the check passed at or after check_raw (a
        # raw-clock lower bound; the checkers compare it with later runs' claims).
        check_raw = clock()
        try:
            holder.check()
        except LeaseLost:
            break
        check_at, deadline = time.monotonic(), holder.deadline
        call, reason = clock(), None
        ok: bool | None
        try:
            if conn is None or conn.closed:
                conn = psycopg.connect(dsn, connect_timeout=5)
            with conn.transaction():
                fence(
                    conn,
                    key,
                    token,
                    holder.effect_key(f"w{step}"),
                    effect=EFFECT_SQL,
                    params={
                        "key": key,
                        "token": token,
                        "holder": holder.holder_identity,
                        "step": f"w{step}",
                    },
                )
            ok = True
        except (StaleToken, DuplicateEffect) as exc:
            ok, reason = False, type(exc).__name__
        except psycopg.Error as exc:  # dropped or held connection: outcome unknown
            record(history, kind="write-unknown", call=call, error=type(exc).__name__, **base)
            conn = None
            continue
        record(
            history,
            kind="write",
            ok=ok,
            reason=reason,
            call=call,
            check_at=check_at,
            check_raw=check_raw,
            deadline=deadline,
            **base,
        )
    if conn is not None:
        conn.close()
    call = clock()
    try:
        result = holder.complete(Outcome.SUCCEEDED, message=f"{writes} writes")
    except Exception as exc:
        record(history, kind="complete-unknown", call=call, error=type(exc).__name__, **base)
        return False
    accepted = isinstance(result, Accepted)
    reason = None if isinstance(result, Accepted) else str(result.rejection)
    record(history, kind="complete", ok=accepted, reason=reason, call=call, **base)
    return accepted


def pod_main() -> int:
    """Work under the pod's lease (env: ``CHAOS_*``); exit 0 when the completion was accepted.

    The history's ``job`` is the pod's lease (``namespace/lease``), not its
    LeasedJob: each index of an Indexed job and each run of a cron job is a
    lease and a fencing domain of its own, and the judges partition by lease.
    ``CHAOS_KEY`` names the fenced target key when it is not the lease (a cron
    job's runs share ``namespace/<cron>``); ``CHAOS_HOLD_SECONDS`` spreads the
    writes over about that long.
    """
    history = os.environ["CHAOS_HISTORY"]
    try:
        holder = LeaseHolder.from_env().start()
    except LeaseLost as lost:
        record(
            history,
            kind="start-refused",
            reason=str(lost.reason),
            holder=os.environ.get("LEASEHOLD_HOLDER"),
        )
        return 75
    lease = f"{holder.namespace}/{holder.lease_name}"
    ok = work(
        holder,
        os.environ["CHAOS_DSN"],
        history,
        int(os.environ["CHAOS_WRITES"]),
        lease,
        key=os.environ.get("CHAOS_KEY") or None,
        hold_seconds=float(os.environ.get("CHAOS_HOLD_SECONDS") or 0),
    )
    holder.close()
    return 0 if ok else 75


def main() -> int:
    """Entry point in a pod: work under the pod's lease."""
    return pod_main()


if __name__ == "__main__":
    sys.exit(main())
