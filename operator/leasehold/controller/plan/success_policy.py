"""Pure judgement of an Indexed job's ``spec.successPolicy``: has a rule been met?

Why this module exists: batch/v1 lets an Indexed Job succeed before every
index ran (``successPolicy``, pkg/controller/job/success_policy.go); a
LeasedJob does the same, and :mod:`leasehold.controller.plan.indexed` then
stops the unfinished indexes' leases. Kept apart from the planner as
:mod:`~leasehold.controller.plan.failure_policy` is: one rule set, one module.
No Kubernetes import.
"""

from __future__ import annotations

from collections.abc import Set
from typing import Final

from leasehold.lease.api import LeasedJob
from leasehold.lease.indexes import parse_intervals

SUCCESS_POLICY: Final = "SuccessPolicy"
"""The reason of ``SuccessCriteriaMet`` and ``Complete`` when a rule was met (batch/v1's)."""


def matched_rule(job: LeasedJob, succeeded: Set[int]) -> str | None:
    """The message of the first ``successPolicy`` rule the succeeded indexes meet.

    As batch/v1's ``matchSuccessPolicy``: rules are checked in order; a rule
    with ``succeededIndexes`` is met when all of them succeeded, or, with
    ``succeededCount``, when at least that many of them did; a rule with
    only ``succeededCount`` when at least that many indexes succeeded. No
    index succeeded: no rule is met. A rule whose indexes cannot be read
    (the operator refuses such a job before planning it) is skipped, as
    batch/v1 skips it.

    Args:
        job: the LeasedJob (``spec.successPolicy``, ``spec.completions``).
        succeeded: the indexes that succeeded.

    Returns:
        ``"Matched rules at index <i>"`` (batch/v1's message) for the first
        rule met, else ``None`` (also without a ``successPolicy``).
    """
    policy = job.spec.success_policy
    if policy is None or not succeeded:
        return None
    completions = job.spec.completions or 1
    for i, rule in enumerate(policy.rules):
        if rule.succeeded_indexes is not None:
            try:
                intervals = parse_intervals(rule.succeeded_indexes, completions)
            except ValueError:
                continue
            wanted = {n for first, last in intervals for n in range(first, last + 1)}
            if not wanted:
                continue
            hits = len(wanted & succeeded)
            count = rule.succeeded_count
            if hits == len(wanted) or (count is not None and hits >= count):
                return f"Matched rules at index {i}"
        elif rule.succeeded_count is not None and len(succeeded) >= rule.succeeded_count:
            return f"Matched rules at index {i}"
    return None
