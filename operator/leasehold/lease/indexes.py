"""Indexed jobs' names and index sets: pure helpers shared by the operator and the SDK.

Why this module exists: an Indexed LeasedJob has one JobLease per index, each
its own fencing domain; the operator names them, a pull-mode worker finds
them, and the job's status lists indexes the way batch/v1 Job does
(``completedIndexes: "1,3-5,7"``). Spelled once here so the operator, the
SDK and the tests cannot disagree. No Kubernetes import.

An index lease is ``<job>.<index>``: a LeasedJob's name may not contain a
dot (a CEL rule on the CRD), so no job's own lease (named like the job) can
ever take an index lease's name. The index's pods keep batch Job's hostname
form, ``<job>-<index>-<token>``; so did the index leases of earlier
versions, which the operator carries over (docs/indexed.md, "Lease names").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

MAX_NAME: Final = 253
"""The longest object name (a DNS subdomain)."""


INDEX_SEPARATOR: Final = "."
"""Between a job's name and an index in its index leases' names; never in a job's name."""

_TOKEN_ROOM: Final = 8
"""Characters kept free for a pod's ``-<token>`` after an index's hostname."""


def index_lease_name(job_name: str, index: int) -> str:
    """The JobLease (and the index's fencing domain) of one index of an Indexed job.

    Args:
        job_name: the LeasedJob's name.
        index: the completion index (>= 0).

    Returns:
        ``<job>.<index>``, the job part cut so the name stays a valid object
        name (at most 253 characters). No LeasedJob's own lease has a dot,
        so it never collides with a job's lease.

    Raises:
        ValueError: a negative index.
    """
    return _with_index(job_name, INDEX_SEPARATOR, index)


def index_hostname(job_name: str, index: int) -> str:
    """The name an index's pods start with: batch Job's hostname form.

    Args:
        job_name: the LeasedJob's name.
        index: the completion index (>= 0).

    Returns:
        ``<job>-<index>``, the job part cut so that ``-<token>`` still fits in
        an object name; its pods are ``<job>-<index>-<token>``.

    Raises:
        ValueError: a negative index.
    """
    return _with_index(job_name, "-", index)


def legacy_index_lease_name(job_name: str, index: int) -> str:
    """The name earlier versions gave an index's lease (:func:`index_hostname`'s form).

    Only read: the operator carries a lease of that name over to
    :func:`index_lease_name` (its token, then the old lease stopped).

    Args:
        job_name: the LeasedJob's name.
        index: the completion index (>= 0).

    Returns:
        ``<job>-<index>``.

    Raises:
        ValueError: a negative index.
    """
    return index_hostname(job_name, index)


def _with_index(job_name: str, separator: str, index: int) -> str:
    if index < 0:
        raise ValueError(f"a completion index is >= 0, got {index}")
    suffix = f"{separator}{index}"
    return job_name[: MAX_NAME - len(suffix) - _TOKEN_ROOM] + suffix


def compress(indexes: Iterable[int]) -> str:
    """Write a set of indexes as batch/v1 Job's compressed ranges.

    Args:
        indexes: indexes (>= 0), in any order, duplicates allowed.

    Returns:
        Ascending, comma-separated; runs of three or more consecutive
        indexes as ``first-last``, a pair as two numbers, as batch/v1's
        ``orderedIntervals.String`` (pkg/controller/job/indexed_job_utils.go):
        ``{1, 3, 4, 5, 7}`` gives ``"1,3-5,7"``, ``{0, 1}`` gives ``"0,1"``;
        empty gives ``""``.
    """
    ordered = sorted(set(indexes))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        if i == j:
            parts.append(str(ordered[i]))
        else:
            parts.append(f"{ordered[i]}{',' if j == i + 1 else '-'}{ordered[j]}")
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


def parse_intervals(text: str, completions: int) -> list[tuple[int, int]]:
    """Read a ``successPolicy`` rule's ``succeededIndexes`` as batch/v1 validates it.

    The text is comma-separated intervals, each ``x`` or ``x-y``, strictly
    increasing (``"1,3-5,7"``): an interval's last index above its first,
    each interval above the one before (so none overlap), every index below
    ``completions``. The rules and messages follow batch/v1's
    ``validateIndexesFormat`` (pkg/apis/batch/validation/validation.go).

    Args:
        text: e.g. ``"0,2-4"``.
        completions: the job's ``spec.completions``.

    Returns:
        The intervals as ``(first, last)`` pairs (inclusive), in order.

    Raises:
        ValueError: the text breaks one of the rules (the message says which).
    """
    intervals: list[tuple[int, int]] = []
    last_index: int | None = None
    for fragment in text.split(",") if text else []:
        limits = fragment.split("-")
        if len(limits) > 2:
            raise ValueError(
                f"the fragment {fragment!r} violates the requirement that an index interval"
                " can have at most two parts separated by '-'"
            )
        numbers: list[int] = []
        for limit in limits:
            if not limit.isdigit():
                raise ValueError(f"cannot convert string to integer for index: {limit!r}")
            number = int(limit)
            if number >= completions:
                raise ValueError(f"too large index: {limit!r} (completions={completions})")
            if last_index is not None and last_index >= number:
                raise ValueError(f"non-increasing order, previous: {last_index}, current: {number}")
            last_index = number
            numbers.append(number)
        intervals.append((numbers[0], numbers[-1]))
    return intervals


def interval_total(intervals: Iterable[tuple[int, int]]) -> int:
    """How many indexes intervals hold.

    Args:
        intervals: ``(first, last)`` pairs with inclusive ends, not overlapping
            (as :func:`parse_intervals` returns them).

    Returns:
        The number of indexes, e.g. 5 for ``[(1, 1), (3, 5), (7, 7)]``.
    """
    return sum(last - first + 1 for first, last in intervals)
