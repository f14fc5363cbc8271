"""Indexed jobs' names and index sets: pure helpers shared by the operator and the SDK.

Why this module exists: an Indexed LeasedJob has one JobLease per index, each
its own fencing domain; the operator names them, a pull-mode worker finds
them, and the job's status lists indexes the way batch/v1 Job does
(``completedIndexes: "1,3-5,7"``). Spelled once here so the operator, the
SDK and the tests cannot disagree. No Kubernetes import.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

MAX_NAME: Final = 253
"""The longest object name (a DNS subdomain)."""


def index_lease_name(job_name: str, index: int) -> str:
    """The JobLease (and the index's fencing domain) of one index of an Indexed job.

    Args:
        job_name: the LeasedJob's name.
        index: the completion index (>= 0).

    Returns:
        ``<job>-<index>`` (batch Job's hostname form), the job part cut so
        the name stays a valid object name. Its pods are ``<job>-<index>-<token>``.

    Raises:
        ValueError: a negative index.
    """
    if index < 0:
        raise ValueError(f"a completion index is >= 0, got {index}")
    suffix = f"-{index}"
    return job_name[: MAX_NAME - len(suffix) - 8] + suffix


def compress(indexes: Iterable[int]) -> str:
    """Write a set of indexes as batch/v1 Job's compressed ranges.

    Args:
        indexes: indexes (>= 0), in any order, duplicates allowed.

    Returns:
        Ascending, comma-separated; runs of two or more consecutive indexes
        as ``first-last``: ``{1, 3, 4, 5, 7}`` gives ``"1,3-5,7"``; empty
        gives ``""``.
    """
    ordered = sorted(set(indexes))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def parse(text: str | None) -> set[int]:
    """Read batch/v1 Job's compressed ranges back into a set of indexes.

    Args:
        text: e.g. ``"1,3-5,7"``; ``None`` or ``""`` for none.

    Returns:
        The indexes, e.g. ``{1, 3, 4, 5, 7}``.

    Raises:
        ValueError: malformed text (a non-number, a range whose end is
            below its start).
    """
    out: set[int] = set()
    for part in (text or "").split(","):
        if not part:
            continue
        first, sep, last = part.partition("-")
        lo = int(first)
        hi = int(last) if sep else lo
        if lo < 0 or hi < lo:
            raise ValueError(f"bad index range {part!r}")
        out.update(range(lo, hi + 1))
    return out
