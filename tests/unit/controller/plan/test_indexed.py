"""Indexed jobs, pure parts: index ranges, the per-index planner, pods and fencing keys."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leasehold import fencing, names
from leasehold.controller.act.domain import work_item
from leasehold.controller.engines.pods import PodMemory
from leasehold.controller.plan import indexed
from leasehold.controller.plan.indexed import IndexState
from leasehold.controller.plan.pod import build_pod, pod_name
from leasehold.controller.plan.single import Action, PodFacts
from leasehold.lease import indexes
from leasehold.lease.api import LeasedJob, LeasedJobStatus, Phase
from leasehold.lease.protocol import Completion, FencingToken, HolderIdentity, LeaseRecord, Outcome
from leasehold.worker.holder import LeaseHolder

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def job(template: bool = True, /, **spec: Any) -> LeasedJob:
    body: dict[str, Any] = {
        "metadata": {"name": "big", "namespace": "ns", "uid": "u-1", "generation": 1},
        "spec": {
            "leaseDurationSeconds": 10,
            "maxAttempts": 2,
            "completionMode": "Indexed",
            **spec,
        },
    }
    if template:
        body["spec"]["template"] = {"spec": {"containers": [{"name": "w", "image": "x"}]}}
    return LeasedJob.model_validate(body)


def lease(index: int, token: int, holder: str | None = None, **kw: Any) -> LeaseRecord:
    kw.setdefault("job_uid", "u-1")
    kw.setdefault("max_fencing_token", 2)
    if holder is not None:
        kw.setdefault("holder_uid", f"pod-{index}-{token}")
    return LeaseRecord(
        job_name="big",
        holder_identity=HolderIdentity(holder) if holder else None,
        fencing_token=FencingToken(token),
        lease_duration_seconds=10,
        **kw,
    )


def done(index: int, token: int, outcome: Outcome = Outcome.SUCCEEDED, **kw: Any) -> LeaseRecord:
    completion = Completion(
        FencingToken(token), HolderIdentity(f"big-{index}-{token}"), outcome, NOW
    )
    return lease(index, token, completion=completion, **kw)


# -- ranges ------------------------------------------------------------------


def test_compress_writes_batch_jobs_ranges() -> None:
    assert indexes.compress([7, 1, 3, 4, 5, 4]) == "1,3-5,7"
    assert indexes.compress([]) == ""
    assert indexes.compress([0, 1]) == "0,1"  # batch/v1: a pair is not a range
    assert indexes.compress([0, 1, 2, 5, 6]) == "0-2,5,6"
    assert indexes.parse("1,3-5,7") == {1, 3, 4, 5, 7}
    assert indexes.parse(None) == set()


@given(st.sets(st.integers(min_value=0, max_value=2000), max_size=200))
def test_ranges_round_trip(found: set[int]) -> None:
    text = indexes.compress(found)
    assert indexes.parse(text) == found
    assert indexes.compress(indexes.parse(text)) == text
    # batch/v1's form: a range covers three or more; parts touch only as a pair
    # of single numbers ("4,5"), never a range and a number, never three in a row.
    bounds = [
        tuple(int(x) for x in part.split("-")) if "-" in part else (int(part), int(part))
        for part in text.split(",")
        if part
    ]
    assert all(hi >= lo + 2 for lo, hi in bounds if lo != hi)
    touching = [
        b[0] == a[1] + 1 for a, b in itertools.pairwise(bounds)
    ]  # touching[i]: part i and part i + 1
    for i, touch in enumerate(touching):
        if touch:
            assert bounds[i][0] == bounds[i][1] and bounds[i + 1][0] == bounds[i + 1][1]
            assert i + 1 >= len(touching) or not touching[i + 1]


@pytest.mark.parametrize("bad", ["a", "3-1", "-1", "1,,x"])
def test_parse_refuses_malformed_ranges(bad: str) -> None:
    with pytest.raises(ValueError, match=r"."):
        indexes.parse(bad)


def test_index_lease_name_is_job_dot_index() -> None:
    assert indexes.index_lease_name("big", 3) == "big.3"
    assert indexes.index_lease_name("etl", 1) == "etl.1"
    assert indexes.index_lease_name("a-1", 0) == "a-1.0"
    with pytest.raises(ValueError, match="completion index"):
        indexes.index_lease_name("big", -1)


def test_an_index_lease_name_is_never_a_job_lease_name() -> None:
    """Issue 27, case 4: a single job ``etl-1``'s lease (named like the job) took index 1's."""
    assert indexes.index_lease_name("etl", 1) != "etl-1"
    assert indexes.INDEX_SEPARATOR in indexes.index_lease_name("etl", 1)
    # The legacy form (read only, to carry such a lease over) is the old collision.
    assert indexes.legacy_index_lease_name("etl", 1) == "etl-1"


@given(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=63),
    st.integers(min_value=0, max_value=10_000),
)
def test_no_job_name_is_an_index_lease_name(job: str, index: int) -> None:
    # A job's lease is named like the job, and the CRD refuses a job name with a dot.
    assert "." in indexes.index_lease_name(job, index)


def test_index_lease_name_fits_and_pods_keep_the_hostname_form() -> None:
    long = indexes.index_lease_name("a" * 253, 12345)
    assert long.endswith(".12345") and len(long) <= indexes.MAX_NAME
    assert indexes.index_hostname("big", 3) == "big-3"
    host = indexes.index_hostname("a" * 253, 12345)
    assert host.endswith("-12345")
    assert len(pod_name(host, 9_999_999)) <= 253
    assert pod_name(host, 9_999_999).startswith(host)


# -- the planner ---------------------------------------------------------------


def test_a_new_job_starts_parallelism_indexes_lowest_first() -> None:
    decided = indexed.plan_indexed(job(completions=5, parallelism=2), {}, now=NOW)
    assert [(s.index, s.plan.action) for s in decided.steps] == [
        (0, Action.CREATE_LEASE),
        (1, Action.CREATE_LEASE),
    ]
    assert decided.steps[0].lease_name == "big.0"
    assert decided.status.completion_progress == "0/5"


def test_held_indexes_use_up_parallelism() -> None:
    leases = {0: lease(0, 1, "big-0-1"), 1: done(1, 1), 2: lease(2, 1, "big-2-1")}
    decided = indexed.plan_indexed(job(completions=5, parallelism=3), leases, now=NOW)
    starts = [s.index for s in decided.steps if s.plan.action is Action.CREATE_LEASE]
    assert starts == [3]
    assert decided.status.active == 2
    assert decided.status.completed_indexes == "1"
    assert decided.status.phase == Phase.RUNNING


def test_a_reclaimed_index_is_claimed_again_with_its_own_next_token() -> None:
    leases = {0: lease(0, 1), 1: lease(1, 1, "big-1-1")}
    decided = indexed.plan_indexed(job(completions=2, parallelism=2), leases, now=NOW)
    claim = next(s for s in decided.steps if s.index == 0)
    assert claim.plan.action is Action.CLAIM_AND_START
    assert claim.plan.pod_name == "big-0-2"


def test_parallelism_holds_back_a_reclaimed_index_too() -> None:
    leases = {0: lease(0, 1), 1: lease(1, 1, "big-1-1")}
    decided = indexed.plan_indexed(job(completions=2, parallelism=1), leases, now=NOW)
    assert all(s.plan.action is not Action.CLAIM_AND_START for s in decided.steps)


def test_all_indexes_succeeded_succeeds_the_job() -> None:
    leases = {i: done(i, 1) for i in range(3)}
    decided = indexed.plan_indexed(job(completions=3, parallelism=3), leases, now=NOW)
    assert decided.status.phase == Phase.SUCCEEDED
    assert decided.status.completed_indexes == "0-2"
    assert decided.status.completion_progress == "3/3"
    assert [e.reason for e in decided.events] == ["Completed"]
    complete = next(c for c in decided.status.conditions or [] if c.type == "Complete")
    assert (complete.status, complete.observed_generation) == ("True", 1)


def test_backoff_limit_per_index_fails_only_that_index() -> None:
    spec: dict[str, Any] = {"completions": 3, "parallelism": 3, "backoffLimitPerIndex": 1}
    leases = {
        0: done(0, 2, Outcome.FAILED, failures=1, max_fencing_token=3),
        1: done(1, 1),
        2: lease(2, 1, "big-2-1", max_fencing_token=3),
    }
    decided = indexed.plan_indexed(job(**spec), leases, now=NOW)
    assert decided.status.failed_indexes == "0"
    assert decided.status.completed_indexes == "1"
    assert decided.status.phase == Phase.RUNNING
    assert [e.reason for e in decided.events] == ["BackoffLimitExceeded"]
    assert decided.events[0].message.startswith("Index 0: ")
    # Index 2 ends: every index ran, one failed.
    leases[2] = done(2, 1, max_fencing_token=3)
    status = decided.status
    finished = indexed.plan_indexed(
        job(**spec).model_copy(update={"status": status}), leases, now=NOW
    )
    assert finished.status.phase == Phase.FAILED
    failed = next(c for c in finished.status.conditions or [] if c.type == "Failed")
    assert failed.reason == "FailedIndexes"


def test_a_failed_index_within_its_budget_backs_off_then_retries() -> None:
    spec: dict[str, Any] = {"completions": 2, "parallelism": 2, "backoffLimitPerIndex": 1}
    leases = {0: done(0, 1, Outcome.FAILED, max_fencing_token=3), 1: lease(1, 1, "big-1-1")}
    decided = indexed.plan_indexed(job(**spec), leases, now=NOW)
    step = next(s for s in decided.steps if s.index == 0)
    assert step.plan.action is Action.NONE
    after = step.plan.status.next_attempt_after
    assert after == NOW + timedelta(seconds=10)
    assert [e.reason for e in decided.events] == ["BackingOff"]
    assert decided.requeue_after_seconds == 10
    later = indexed.plan_indexed(job(**spec), leases, now=after, retry_after={0: after})
    assert next(s for s in later.steps if s.index == 0).plan.action is Action.RETRY
    assert later.events == []


def test_more_failed_indexes_than_max_failed_indexes_fails_the_job_and_stops_the_rest() -> None:
    spec: dict[str, Any] = {"completions": 4, "parallelism": 4}
    spec.update(backoffLimitPerIndex=0, maxFailedIndexes=1)
    leases = {
        0: done(0, 1, Outcome.FAILED),
        1: done(1, 1, Outcome.FAILED),
        2: lease(2, 1, "big-2-1"),
        3: done(3, 1),
    }
    decided = indexed.plan_indexed(job(**spec), leases, now=NOW)
    assert decided.status.phase == Phase.FAILED
    assert decided.status.failed_indexes == "0,1"
    failed = next(c for c in decided.status.conditions or [] if c.type == "Failed")
    assert failed.reason == "MaxFailedIndexesExceeded"
    assert [(s.index, s.plan.action) for s in decided.steps] == [(2, Action.STOP)]
    assert decided.delete_pods


def test_without_a_per_index_budget_backoff_limit_counts_the_whole_job() -> None:
    spec: dict[str, Any] = {"completions": 3, "parallelism": 3, "backoffLimit": 1}
    leases = {
        0: done(0, 1, Outcome.FAILED, max_fencing_token=3),
        1: done(1, 1, Outcome.FAILED, max_fencing_token=3),
        2: lease(2, 1, "big-2-1", max_fencing_token=3),
    }
    decided = indexed.plan_indexed(job(**spec), leases, now=NOW)
    assert decided.status.phase == Phase.FAILED
    failed = next(c for c in decided.status.conditions or [] if c.type == "Failed")
    assert failed.reason == "BackoffLimitExceeded"
    assert [(s.index, s.plan.action) for s in decided.steps] == [(2, Action.STOP)]


def test_an_index_out_of_attempts_fails_as_attempts_exhausted() -> None:
    spec: dict[str, Any] = {"completions": 2, "parallelism": 2, "backoffLimitPerIndex": 0}
    leases = {0: lease(0, 2, max_fencing_token=5), 1: lease(1, 1, "big-1-1")}
    decided = indexed.plan_indexed(job(**spec), leases, now=NOW)
    assert decided.status.failed_indexes == "0"
    stop = next(s for s in decided.steps if s.index == 0)
    assert stop.plan.action is Action.STOP


def test_cancel_stops_every_unfinished_index() -> None:
    leases = {0: lease(0, 1, "big-0-1"), 1: done(1, 1), 2: lease(2, 1)}
    decided = indexed.plan_indexed(job(completions=4, parallelism=4, cancel=True), leases, now=NOW)
    assert decided.status.phase == Phase.FAILED
    assert [(s.index, s.plan.action) for s in decided.steps] == [(0, Action.STOP), (2, Action.STOP)]


def test_an_earlier_incarnations_index_lease_is_taken_over() -> None:
    leases = {0: done(0, 4, job_uid="old")}
    decided = indexed.plan_indexed(job(completions=1, parallelism=1), leases, now=NOW)
    assert [s.plan.action for s in decided.steps] == [Action.TAKE_OVER_LEASE]
    assert decided.status.completed_indexes == ""


def test_pull_mode_opens_parallelism_leases_for_a_pool() -> None:
    leases = {0: lease(0, 1, "w-a"), 1: lease(1, 0)}
    decided = indexed.plan_indexed(job(False, completions=5, parallelism=3), leases, now=NOW)
    assert [(s.index, s.plan.action) for s in decided.steps] == [(2, Action.CREATE_LEASE)]


def test_index_states() -> None:
    sub = indexed.plan_index(job(completions=2), 0, lease(0, 1, "big-0-1"), now=NOW)
    assert sub.status.phase == Phase.RUNNING
    assert IndexState.ACTIVE.value == "Active"


def test_an_unbound_held_index_has_its_pod_created() -> None:
    held = lease(0, 1, "big-0-1", holder_uid=None)
    sub = indexed.plan_index(job(completions=2), 0, held, now=NOW)
    assert (sub.action, sub.pod_name) == (Action.START_POD, "big-0-1")


# -- pods and fencing ------------------------------------------------------------


def test_an_index_pod_carries_its_index_and_its_own_lease() -> None:
    pod = build_pod(
        job(completions=3),
        namespace="ns",
        holder="big-2-5",
        token=5,
        owner_uid="u-1",
        lease_duration_seconds=10,
        index=2,
    )
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["JOB_COMPLETION_INDEX"] == "2"
    assert env[names.ENV_COMPLETION_INDEX] == "2"
    assert env[names.ENV_LEASE] == "big.2"
    assert env[names.ENV_JOB] == "big"
    meta = pod["metadata"]
    assert meta["labels"][names.LABEL_COMPLETION_INDEX] == "2"
    assert meta["labels"][names.LABEL_JOB] == "big"
    assert meta["annotations"]["batch.kubernetes.io/job-completion-index"] == "2"
    assert meta["annotations"][names.ANNOTATION_LEASE] == "big.2"
    assert meta["name"] == "big-2-5"  # pods keep batch Job's hostname form
    assert meta["ownerReferences"][0]["name"] == "big"
    # Issue 28: batch/v1's index label (headless Services, affinity select on it)
    # and its hostname, <job>-<index>.
    assert meta["labels"]["batch.kubernetes.io/job-completion-index"] == "2"
    assert pod["spec"]["hostname"] == "big-2"


def test_no_hostname_that_is_not_a_dns_label_nor_for_a_job_that_is_not_indexed() -> None:
    long_name = job(completions=3).model_copy(
        update={"metadata": {"name": "x" * 62, "namespace": "ns", "uid": "u-1"}}
    )
    pod = build_pod(
        long_name, namespace="ns", holder="p", token=1, owner_uid="u-1",
        lease_duration_seconds=10, index=12,
    )  # fmt: skip
    assert "hostname" not in pod["spec"]  # "x" * 62 + "-12" is 65 characters
    plain = job(completions=3, completionMode="NonIndexed")
    pod = build_pod(
        plain, namespace="ns", holder="p", token=1, owner_uid="u-1",
        lease_duration_seconds=10, index=1,
    )  # fmt: skip
    assert "hostname" not in pod["spec"]


def test_fencing_keys_are_per_index() -> None:
    assert fencing.idempotency_key("ns/big", 3, "write", index=1) == "ns/big/index-1/3/write"
    assert fencing.idempotency_key("ns/big", 3, "write") == "ns/big/3/write"
    assert fencing.index_resource("acct/1", 4) == "acct/1#index-4"
    assert fencing.index_resource("acct/1", None) == "acct/1"
    fence = fencing.MemoryFence()
    fence.admit(fencing.index_resource("r", 0), 5)
    fence.admit(fencing.index_resource("r", 1), 1)  # index 1's first token: its own domain
    with pytest.raises(fencing.StaleToken):
        fence.admit(fencing.index_resource("r", 0), 4)


def test_the_sdk_reads_the_index_from_the_pod_contract() -> None:
    env = {
        names.ENV_NAMESPACE: "ns",
        names.ENV_LEASE: "big.3",
        names.ENV_HOLDER: "big-3-2",
        names.ENV_FENCING_TOKEN: "2",
        names.ENV_LEASE_DURATION: "10",
        names.ENV_JOB: "big",
        names.ENV_COMPLETION_INDEX: "3",
    }
    holder = LeaseHolder.from_env(store=object(), environ=env)  # type: ignore[arg-type]
    assert holder.completion_index == 3
    assert holder.effect_key("w") == "ns/big/index-3/2/w"
    assert holder.sql_params("acct/1")["leasehold_resource"] == "acct/1#index-3"


# -- suspend, params, priority --------------------------------------------------


def suspended_status() -> dict[str, Any]:
    return {
        "phase": "Suspended",
        "conditions": [
            {
                "type": "Suspended",
                "status": "True",
                "reason": "JobSuspended",
                "message": "suspended",
                "lastTransitionTime": NOW.isoformat(),
            }
        ],
    }


def test_suspend_suspends_every_unfinished_index_and_starts_none() -> None:
    leases = {0: lease(0, 1, "big-0-1"), 1: done(1, 1), 2: lease(2, 1), 3: lease(3, 1)}
    leases[3] = lease(3, 1, suspended=True)
    decided = indexed.plan_indexed(job(completions=6, parallelism=6, suspend=True), leases, now=NOW)
    # Held index 0 and unheld index 2 are suspended; 3 is already; 4 and 5 get no lease.
    assert [(s.index, s.plan.action) for s in decided.steps] == [
        (0, Action.SUSPEND),
        (2, Action.SUSPEND),
    ]
    st = decided.status
    assert st.phase == Phase.SUSPENDED
    assert (st.completed_indexes, st.completion_progress) == ("1", "1/6")
    conditions = {c.type: (c.status, c.reason) for c in st.conditions or []}
    assert conditions["Suspended"] == ("True", "JobSuspended")
    assert conditions["Ready"] == ("False", "Suspended")
    assert [e.reason for e in decided.events] == ["Suspended"]


def test_a_suspended_job_created_with_no_lease_creates_none() -> None:
    decided = indexed.plan_indexed(job(completions=3, parallelism=3, suspend=True), {}, now=NOW)
    assert decided.steps == []
    assert decided.status.phase == Phase.SUSPENDED


def test_resume_resumes_the_indexes_within_parallelism_at_once() -> None:
    leases = {i: lease(i, 1, suspended=True, suspensions=1, max_fencing_token=3) for i in range(3)}
    body = job(completions=3, parallelism=2).model_dump(by_alias=True, exclude_none=True)
    body["status"] = suspended_status()
    resumed = LeasedJob.model_validate(body)
    decided = indexed.plan_indexed(resumed, leases, now=NOW)
    # Push mode: a resumed index is claimed at once, so only `parallelism` resume.
    assert [(s.index, s.plan.action) for s in decided.steps] == [
        (0, Action.RESUME),
        (1, Action.RESUME),
    ]
    conditions = {c.type: (c.status, c.reason) for c in decided.status.conditions or []}
    assert conditions["Suspended"] == ("False", "JobResumed")
    assert [e.reason for e in decided.events][:1] == ["Resumed"]
    # The index once resumed is claimed at once (no reclaim backoff): its next token.
    after = lease(0, 1, suspensions=1, max_fencing_token=3)
    sub = indexed.plan_index(resumed, 0, after, now=NOW)
    assert (sub.action, sub.pod_name) == (Action.CLAIM_AND_START, "big-0-2")


def test_pull_mode_resumes_every_suspended_index() -> None:
    leases = {i: lease(i, 0, suspended=True) for i in range(3)}
    body = job(False, completions=3, parallelism=3).model_dump(by_alias=True, exclude_none=True)
    body["status"] = suspended_status()
    decided = indexed.plan_indexed(LeasedJob.model_validate(body), leases, now=NOW)
    assert [(s.index, s.plan.action) for s in decided.steps] == [
        (i, Action.RESUME) for i in range(3)
    ]


def test_every_index_lease_carries_the_jobs_params_and_priority() -> None:
    body = job(completions=3, params={"shards": [1, 2, 3]}, priority=7).model_dump(
        by_alias=True, exclude_none=True
    )
    body["metadata"]["creationTimestamp"] = "2026-12-01T12:00:00Z"
    work = work_item(LeasedJob.model_validate(body))
    assert (work.params, work.priority, work.job_created) == ({"shards": [1, 2, 3]}, 7, NOW)


# -- evictions -------------------------------------------------------------------


EVICTED = PodFacts(
    uid="p", node_name="n", exit_code=143, conditions=(("DisruptionTarget", "True"),)
)


def test_an_evicted_index_is_excused_and_claimed_again() -> None:
    ended = lease(1, 1, max_fencing_token=1)
    assert indexed.wants_pod_facts(job(completions=2), ended)
    leases = {0: lease(0, 1, "big-0-1"), 1: ended}
    decided = indexed.plan_indexed(
        job(completions=2, parallelism=2, backoffLimitPerIndex=0, maxAttempts=1),
        leases,
        now=NOW,
        pods={1: {1: EVICTED}},
    )
    step = next(s for s in decided.steps if s.index == 1)
    assert step.plan.action is Action.EXCUSE
    assert [e.reason for e in step.plan.events] == ["Evicted"]
    assert decided.status.failed_indexes is None and decided.status.failed == 0
    # Without its pod the same end counts: out of attempts, the index fails.
    counted = indexed.plan_indexed(
        job(completions=2, parallelism=2, backoffLimitPerIndex=0, maxAttempts=1), leases, now=NOW
    )
    assert counted.status.failed_indexes == "1"


def test_an_excused_index_waits_for_a_slot_like_any_start() -> None:
    leases = {0: lease(0, 1, "big-0-1"), 1: lease(1, 1, max_fencing_token=1)}
    decided = indexed.plan_indexed(
        job(completions=2, parallelism=1, maxAttempts=1), leases, now=NOW, pods={1: {1: EVICTED}}
    )
    assert all(s.plan.action is not Action.EXCUSE for s in decided.steps)


def test_only_an_undecided_end_wants_the_index_pods() -> None:
    spec = job(completions=2)
    assert not indexed.wants_pod_facts(spec, lease(0, 1, "big-0-1"))  # running
    assert not indexed.wants_pod_facts(spec, done(0, 1))  # succeeded
    assert indexed.wants_pod_facts(spec, done(0, 1, Outcome.FAILED))
    assert not indexed.wants_pod_facts(spec, lease(0, 1, last_uncounted_token=1))  # excused
    assert not indexed.wants_pod_facts(spec, lease(0, 0))  # never ran
    assert not indexed.wants_pod_facts(job(False, completions=2), lease(0, 1))  # pull: no pods


def test_pod_memory_keeps_each_indexs_tokens_apart() -> None:
    memory = PodMemory()
    for index in (0, 1):
        memory.observe(
            {
                "metadata": {
                    "namespace": "ns",
                    "uid": f"u-{index}",
                    "ownerReferences": [{"kind": "LeasedJob", "uid": "b", "controller": True}],
                    "labels": {
                        names.LABEL_JOB: "big",
                        names.LABEL_TOKEN: "1",
                        names.LABEL_COMPLETION_INDEX: str(index),
                    },
                },
            }
        )
    assert memory.recall("ns", "big", 0)[1].uid == "u-0"
    assert memory.recall("ns", "big", 1)[1].uid == "u-1"
    assert memory.recall("ns", "big") == {}
    memory.forget("ns", "big")
    assert memory.recall("ns", "big", 0) == {}


# -- failure rules on indexes (batch/v1: FailJob fails the job, FailIndex the index) ---


EXIT_42 = PodFacts(uid="p", node_name="n", exit_code=42, exit_codes=(("w", 42),))


def rules(action: str) -> dict[str, Any]:
    return {"rules": [{"action": action, "onExitCodes": {"operator": "In", "values": [42]}}]}


@pytest.mark.parametrize("per_index", [None, 2])
def test_a_fail_job_rule_on_one_index_fails_the_whole_job_at_once(per_index: int | None) -> None:
    # Issue 27, case 6: with backoffLimitPerIndex only that index failed; without
    # it the reason was IndexFailed. batch/v1 fails the Job, reason PodFailurePolicy.
    spec: dict[str, Any] = {"completions": 3, "parallelism": 3, "backoffLimit": 5}
    spec["podFailurePolicy"] = rules("FailJob")
    if per_index is not None:
        spec["backoffLimitPerIndex"] = per_index
    leases = {
        0: lease(0, 1, "big-0-1", max_fencing_token=8),
        1: done(1, 1, Outcome.FAILED, max_fencing_token=8),
        2: done(2, 1, max_fencing_token=8),
    }
    decided = indexed.plan_indexed(job(**spec), leases, now=NOW, pods={1: {1: EXIT_42}})
    assert decided.status.phase == Phase.FAILED
    failed = next(c for c in decided.status.conditions or [] if c.type == "Failed")
    assert failed.reason == "PodFailurePolicy"
    assert failed.message.startswith("Index 1: Attempt 1 ended:"), failed.message
    assert "FailJob rule" in failed.message
    # The running index is stopped with the job.
    assert any(s.index == 0 and s.plan.action is Action.STOP for s in decided.steps)


def test_a_fail_index_rule_fails_only_that_index() -> None:
    spec: dict[str, Any] = {"completions": 2, "parallelism": 2, "backoffLimitPerIndex": 3}
    spec["podFailurePolicy"] = rules("FailIndex")
    leases = {
        0: lease(0, 1, "big-0-1", max_fencing_token=5),
        1: done(1, 1, Outcome.FAILED, max_fencing_token=5),
    }
    decided = indexed.plan_indexed(job(**spec), leases, now=NOW, pods={1: {1: EXIT_42}})
    assert decided.status.phase == Phase.RUNNING
    assert decided.status.failed_indexes == "1"  # at once: its budget of 3 is not used
    assert [e.reason for e in decided.events] == ["FailIndex"]
    # The next match of the same exit code under Count would back off instead.
    counted = indexed.plan_indexed(
        job(**{**spec, "podFailurePolicy": rules("Count")}),
        leases,
        now=NOW,
        pods={1: {1: EXIT_42}},
    )
    assert counted.status.failed_indexes is None


# -- elastic Indexed jobs: completions scaled with parallelism ---------------


def test_a_scale_down_suspends_the_removed_indexes_and_counts_only_the_rest() -> None:
    # batch/v1: the pods of indexes >= completions are deleted and not counted.
    big = job(completions=2, parallelism=2)
    big.status = LeasedJobStatus(completion_progress="1/4")
    leases = {
        0: done(0, 1),
        1: lease(1, 1, "big-1-1"),
        2: lease(2, 1, "big-2-1"),
        3: done(3, 1, outcome=Outcome.FAILED),  # a completion stands; nothing to stop
        4: lease(4, 1, "big-4-1", job_uid="u-0"),  # an earlier job's: not this job's to stop
        5: lease(5, 1, suspended=True),  # already suspended
    }
    plan = indexed.plan_indexed(big, leases, now=NOW)
    assert [(s.index, s.plan.action) for s in plan.steps if s.index >= 2] == [(2, Action.SUSPEND)]
    assert (plan.status.completed_indexes, plan.status.failed_indexes) == ("0", None)
    assert (plan.status.active, plan.status.completion_progress) == (1, "1/2")
    assert [(e.reason, e.message) for e in plan.events if e.reason == indexed.SCALED] == [
        (
            "Scaled",
            "Scaled down from completions=4 to 2: indexes 2,3 are no longer counted; the leases"
            " of indexes 2 were stopped (suspended at the store), so their workers' renewals"
            " and completions are refused, and their pods deleted.",
        )
    ]


def test_a_scale_up_resumes_a_removed_index_and_creates_the_new_ones() -> None:
    big = job(completions=4, parallelism=4)
    big.status = LeasedJobStatus(completion_progress="0/2")
    leases = {0: lease(0, 1, "big-0-1"), 1: lease(1, 1, "big-1-1"), 2: lease(2, 1, suspended=True)}
    plan = indexed.plan_indexed(big, leases, now=NOW)
    actions = {s.index: s.plan.action for s in plan.steps}
    assert (actions[2], actions[3]) == (Action.RESUME, Action.CREATE_LEASE)
    assert [e.reason for e in plan.events] == [indexed.SCALED]


@pytest.mark.parametrize("progress", ["0/\u00b2", "0/30000000", "0/" + "9" * 30, "0/-3", "x"])
def test_a_completion_progress_written_by_another_client_is_no_scale(progress: str) -> None:
    # /status is open to other writers: a superscript digit crashed the
    # reconcile (int("\u00b2")), a huge number walked a range of millions.
    big = job(completions=2, parallelism=2)
    big.status = LeasedJobStatus(completion_progress=progress)
    plan = indexed.plan_indexed(big, {0: lease(0, 1, "big-0-1")}, now=NOW)
    assert [e for e in plan.events if e.reason == indexed.SCALED] == []


def test_a_job_that_ends_after_a_scale_down_stops_the_removed_leases_for_good() -> None:
    big = job(completions=1, parallelism=1)
    leases = {0: done(0, 1), 1: lease(1, 1, suspended=True), 2: lease(2, 1, "big-2-1")}
    plan = indexed.plan_indexed(big, leases, now=NOW)
    assert plan.status.phase == Phase.SUCCEEDED
    assert [(s.index, s.plan.action) for s in plan.steps] == [(1, Action.STOP), (2, Action.STOP)]
