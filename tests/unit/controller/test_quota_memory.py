"""What the operator remembers of pods refused by a ResourceQuota, and when it forgets."""

from __future__ import annotations

from typing import Any, cast

from leasehold.controller.act.attempts import Attempts
from leasehold.controller.act.context import Context


def test_a_deleted_jobs_quota_refused_attempts_are_forgotten_and_no_other_jobs() -> None:
    # Only the in-memory bookkeeping is used: no store, pods or events are called.
    none = cast(Any, None)
    ctx = Context(store=none, pods=none, jobs=none, events=none)
    ctx.quota_held[("ns", "a-1")] = "a"
    ctx.quota_held[("ns", "a-0-2")] = "a"  # index 0 of the same job
    ctx.quota_held[("ns", "a-b-3")] = "a-b"  # a job whose pods share the prefix
    ctx.quota_held[("other", "a-1")] = "a"  # the same name in another namespace

    Attempts(ctx).forget("ns", "a")

    assert ctx.quota_held == {("ns", "a-b-3"): "a-b", ("other", "a-1"): "a"}
