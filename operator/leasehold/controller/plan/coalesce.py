"""Which changes of a job's status may wait for the next status write, and which may not.

Why this module exists: an Indexed job of 1,000 indexes sees a burst of
index events (a lease claimed, a pod ready, an index completed) every
second, and each would write the job's status again only to move a count.
batch/v1's job controller batches such updates too; here a change that
only moves counts (``active``, ``ready``, ``succeeded``,
``completedIndexes``, ...) may wait a short interval and be written with the
next one, while a change that a reader or a later plan acts on (the phase,
a condition's status or reason, ``failedIndexes``, the number of
completions) is written at once. The actors keep the interval
(:func:`leasehold.controller.act.status.write_status_soon`, single jobs'
too: a pod's Ready rides with the next write);
this module only judges, on the status as written and as planned (the
subresource's JSON, by alias).

Why ``failedIndexes`` may not wait: the plan tells an index's failure as an
Event once, when the index is failed but the status written does not say so
yet (:func:`leasehold.controller.plan.indexed.plan_indexed`); an unwritten
``failedIndexes`` would tell it again on the next reconcile. The same holds
for the completions behind ``completionProgress`` (the ``Scaled`` Event).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

COUNTS: Final = frozenset(
    {
        "active",
        "ready",
        "terminating",
        "succeeded",
        "failed",
        "attempts",
        "completedIndexes",
        "completionProgress",
    }
)
"""Status fields (by alias) whose change alone may wait for the next write."""


def may_wait(written: Mapping[str, Any], planned: Mapping[str, Any]) -> bool:
    """Whether ``planned`` differs from ``written`` only in what may wait a short interval.

    Args:
        written: the job's status as last written (``.status`` of the body read).
        planned: the status this reconcile would write (same JSON form).

    Returns:
        ``True`` when every difference is a count (:data:`COUNTS`), a
        condition's message, or ``completionProgress``'s succeeded part;
        ``False`` for anything else: the phase, any other field, a
        condition's status, reason or ``observedGeneration``, a condition
        added or removed, or the completions behind ``completionProgress``.
    """
    keys = (set(written) | set(planned)) - COUNTS - {"conditions"}
    if any(written.get(k) != planned.get(k) for k in keys):
        return False
    if _total(written.get("completionProgress")) != _total(planned.get("completionProgress")):
        return False
    return _conditions(written.get("conditions")) == _conditions(planned.get("conditions"))


def _total(progress: Any) -> str | None:
    """The completions part of ``completionProgress`` (``"<succeeded>/<completions>"``)."""
    if not isinstance(progress, str):
        return None
    return progress.partition("/")[2]


def _conditions(conditions: Any) -> dict[Any, tuple[Any, Any, Any]]:
    """Each condition's type -> (status, reason, observedGeneration): what may not wait."""
    if not isinstance(conditions, list):
        return {}
    return {
        c.get("type"): (c.get("status"), c.get("reason"), c.get("observedGeneration"))
        for c in conditions
        if isinstance(c, Mapping)
    }
