"""Failure rules (spec.podFailurePolicy), pure: matching, defaults, and the planner's use."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from leasehold import names
from leasehold.controller.engines.pods import PodMemory
from leasehold.controller.plan import single as reconcile
from leasehold.controller.plan.failure_policy import AttemptEnd, PodFacts, judge
from leasehold.controller.plan.pod import pod_facts
from leasehold.controller.plan.single import Action
from leasehold.lease import protocol
from leasehold.lease.api import FailureAction, LeasedJob, LeasedJobStatus, Phase, PodFailurePolicy
from leasehold.lease.protocol import Completion, FencingToken, HolderIdentity, LeaseRecord, Outcome

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
DISRUPTED = (("Ready", "True"), ("DisruptionTarget", "True"))


def policy(*rules: dict[str, Any]) -> PodFailurePolicy:
    return PodFailurePolicy.model_validate({"rules": list(rules)})


def pod(*codes: tuple[str, int], conditions: tuple[tuple[str, str], ...] = ()) -> PodFacts:
    return PodFacts(None, None, codes[0][1] if codes else None, codes, conditions)


def on_codes(action: str, operator: str, values: list[int], **kw: Any) -> dict[str, Any]:
    return {"action": action, "onExitCodes": {"operator": operator, "values": values, **kw}}


def test_first_matching_rule_decides() -> None:
    rules = policy(
        on_codes("Ignore", "In", [3]),
        on_codes("FailJob", "NotIn", [0, 1]),
        on_codes("Count", "In", [42]),
    )
    assert judge(rules, AttemptEnd(True, 3)).action == FailureAction.IGNORE
    verdict = judge(rules, AttemptEnd(True, 42, "main"))
    assert (verdict.action, verdict.rule) == (FailureAction.FAIL_JOB, 1)
    assert "container main exited with code 42" in verdict.message
    assert judge(rules, AttemptEnd(True, 1)).action == FailureAction.COUNT


def test_container_name_restricts_the_codes_checked() -> None:
    rules = policy(on_codes("FailJob", "In", [42], containerName="main"))
    sidecar = AttemptEnd(True, None, pod=pod(("main", 0), ("sidecar", 42)))
    assert judge(rules, sidecar).action == FailureAction.COUNT
    main = AttemptEnd(True, None, pod=pod(("main", 42)))
    assert judge(rules, main).action == FailureAction.FAIL_JOB
    # A reported code of an unknown container matches only rules without a name.
    assert judge(rules, AttemptEnd(True, 42, None)).action == FailureAction.COUNT


def test_exit_code_zero_never_matches() -> None:
    rules = policy(on_codes("FailJob", "NotIn", [1]))
    assert judge(rules, AttemptEnd(True, 0, pod=pod(("main", 0)))).action == FailureAction.COUNT


def test_lost_lease_exit_code_is_a_reclaim_not_a_failure() -> None:
    rules = policy(on_codes("FailJob", "NotIn", [1]))
    lost = AttemptEnd(False, pod=pod(("main", 75)))
    assert judge(rules, lost).action == FailureAction.COUNT
    # The command's own 75, recorded in a completion, is a failure code like any other.
    assert judge(rules, AttemptEnd(True, 75, "main")).action == FailureAction.FAIL_JOB


def test_a_disruption_is_ignored_unless_a_rule_says_otherwise() -> None:
    evicted = AttemptEnd(False, pod=pod(("main", 143), conditions=DISRUPTED))
    verdict = judge(None, evicted)
    assert (verdict.action, verdict.disrupted, verdict.rule) == (FailureAction.IGNORE, True, None)
    strict = policy({"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]})
    assert judge(strict, evicted).action == FailureAction.FAIL_JOB
    false_only = policy(
        {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "False"}]}
    )
    assert judge(false_only, evicted).action == FailureAction.IGNORE


@given(
    codes=st.lists(st.integers(0, 255), max_size=4),
    values=st.lists(st.integers(1, 255), min_size=1, max_size=5, unique=True),
    operator=st.sampled_from(["In", "NotIn"]),
)
def test_exit_code_matching_follows_batch_job(
    codes: list[int], values: list[int], operator: str
) -> None:
    rules = policy(on_codes("FailJob", operator, sorted(values)))
    end = AttemptEnd(True, None, pod=pod(*((f"c{i}", c) for i, c in enumerate(codes))))
    nonzero = [c for c in codes if c != 0]
    inside = [c in values for c in nonzero]
    expected = any(inside) if operator == "In" else not all(inside)
    assert (judge(rules, end).action == FailureAction.FAIL_JOB) == expected


@pytest.mark.parametrize(
    ("rules", "field"),
    [
        ([{"action": "FailJob"}], None),  # neither: the CRD's CEL rule (tested on the server)
        ([on_codes("FailJob", "In", [])], "values"),
        ([on_codes("FailJob", "In", [256])], "values"),
        ([on_codes("Retry", "In", [1])], "action"),
        ([on_codes("FailJob", "In", [1])] * 21, "rules"),
    ],
)
def test_invalid_policies_are_refused_by_the_model(
    rules: list[dict[str, Any]], field: str | None
) -> None:
    if field is None:
        policy(*rules)  # structurally fine; the CEL rule refuses it on the server
        return
    with pytest.raises(ValidationError, match=field):
        policy(*rules)


def test_pod_facts_read_codes_and_conditions_from_the_api_body() -> None:
    body: dict[str, Any] = {
        "metadata": {"uid": "u", "labels": {names.LABEL_JOB: "j", names.LABEL_TOKEN: "4"}},
        "spec": {"nodeName": "n"},
        "status": {
            "conditions": [{"type": "DisruptionTarget", "status": "True"}],
            "initContainerStatuses": [{"name": "init", "state": {"terminated": {"exitCode": 0}}}],
            "containerStatuses": [
                {"name": "main", "state": {"terminated": {"exitCode": 143}}},
                {"name": "side", "state": {"running": {}}},
            ],
        },
    }
    parsed = pod_facts(body)
    assert parsed is not None
    token, facts = parsed
    assert (token, facts.exit_code, facts.exit_codes) == (4, 143, (("init", 0), ("main", 143)))
    assert facts.disrupted
    memory = PodMemory()
    for t in range(1, 8):
        memory.observe(
            {
                **body,
                "metadata": {
                    **body["metadata"],
                    "namespace": "ns",
                    "labels": {names.LABEL_JOB: "j", names.LABEL_TOKEN: str(t)},
                    "ownerReferences": [{"kind": "LeasedJob", "uid": "j", "controller": True}],
                },
            }
        )
    assert sorted(memory.recall("ns", "j")) == [4, 5, 6, 7]
    memory.forget("ns", "j")
    assert memory.recall("ns", "j") == {}


# -- the planner ---------------------------------------------------------------------


def job(**spec: Any) -> LeasedJob:
    return LeasedJob.model_validate(
        {
            "metadata": {"name": "hello", "namespace": "ns", "uid": "u-1", "generation": 1},
            "spec": {
                "maxAttempts": 2,
                "template": {"spec": {"containers": [{"name": "main", "image": "x"}]}},
                **spec,
            },
        }
    )


def lease(token: int, **kw: Any) -> LeaseRecord:
    kw.setdefault("max_fencing_token", FencingToken(2 + kw.pop("extra_cap", 0)))
    return LeaseRecord(
        job_name="hello",
        holder_identity=None,
        fencing_token=FencingToken(token),
        lease_duration_seconds=10,
        job_uid="u-1",
        **kw,
    )


def failed(token: int, code: int) -> Completion:
    return Completion(
        FencingToken(token), HolderIdentity(f"hello-{token}"), Outcome.FAILED, NOW, "", code
    )


def test_fail_job_rule_fails_at_once_despite_backoff_limit() -> None:
    spec = {"backoffLimit": 3, "podFailurePolicy": {"rules": [on_codes("FailJob", "In", [42])]}}
    p = reconcile.plan(
        job(**spec), lease(1, completion=failed(1, 42)), now=NOW, pod_created_for_holder=False
    )
    assert (p.action, p.status.phase) == (Action.NONE, Phase.FAILED)
    assert [e.reason for e in p.events] == ["PodFailurePolicy"]
    assert "container main exited with code 42" in p.events[0].message
    retried = reconcile.plan(
        job(**spec), lease(1, completion=failed(1, 3)), now=NOW, pod_created_for_holder=False
    )
    assert retried.status.phase == Phase.PENDING  # backing off


def test_ignored_failure_is_excused_then_claimed_without_counting() -> None:
    spec = {"podFailurePolicy": {"rules": [on_codes("Ignore", "In", [3])]}}
    p = reconcile.plan(
        job(**spec), lease(2, completion=failed(2, 3)), now=NOW, pod_created_for_holder=False
    )
    assert p.action is Action.EXCUSE
    assert p.status.failed == 0
    # What store.reopen(counted=False) writes: the cap one up, the budgets untouched.
    decision = protocol.reopen(lease(2, completion=failed(2, 3)), counted=False)
    assert isinstance(decision, protocol.Allowed)
    reopened = decision.record
    assert (reopened.failures, reopened.uncounted_attempts, reopened.max_fencing_token) == (0, 1, 3)
    claim = reconcile.plan(job(**spec), reopened, now=NOW, pod_created_for_holder=False)
    assert (claim.action, claim.pod_name) == (Action.CLAIM_AND_START, "hello-3")


def test_evicted_attempt_is_excused_and_recorded_as_evicted() -> None:
    history = [{"fencingToken": 2, "podName": "hello-2", "startTime": NOW.isoformat()}]
    seen = job().model_copy(
        update={"status": LeasedJobStatus.model_validate({"attemptHistory": history})}
    )
    evicted = {2: pod(("main", 143), conditions=DISRUPTED)}
    p = reconcile.plan(seen, lease(2), now=NOW, pod_created_for_holder=False, pods=evicted)
    assert p.action is Action.EXCUSE
    assert [e.reason for e in p.events] == ["Evicted"]
    assert p.status.attempt_history is not None
    assert p.status.attempt_history[-1].reason == "Evicted"
    decision = protocol.excuse(lease(2))
    assert isinstance(decision, protocol.Allowed)
    assert protocol.excuse(decision.record) == protocol.Denied(  # once per token
        protocol.Rejection.NOT_EXPIRED, decision.record
    )
    claim = reconcile.plan(
        seen, decision.record, now=NOW, pod_created_for_holder=False, pods=evicted
    )
    assert (claim.action, claim.pod_name) == (Action.CLAIM_AND_START, "hello-3")
    # Without the disruption the same attempt is a reclaim: maxAttempts=2 is used up.
    used = reconcile.plan(
        seen, lease(2), now=NOW, pod_created_for_holder=False, pods={2: pod(("main", 143))}
    )
    assert used.action is Action.STOP


def test_exit_codes_after_an_ended_attempt_was_seen_are_not_its_outcome() -> None:
    spec = {"maxAttempts": 3, "podFailurePolicy": {"rules": [on_codes("FailJob", "NotIn", [0])]}}
    ended = [{"fencingToken": 2, "podName": "hello-2", "reason": "Reclaimed"}]
    seen = job(**spec).model_copy(
        update={"status": LeasedJobStatus.model_validate({"attemptHistory": ended})}
    )
    exited = {2: pod(("main", 1))}
    late = reconcile.plan(
        seen, lease(2, extra_cap=1), now=NOW, pod_created_for_holder=False, pods=exited
    )
    assert late.status.phase != Phase.FAILED  # judged a reclaim when first seen
    first = job(**spec)
    fresh = reconcile.plan(
        first, lease(2, extra_cap=1), now=NOW, pod_created_for_holder=False, pods=exited
    )
    assert fresh.status.phase == Phase.FAILED
    assert [e.reason for e in fresh.events] == ["PodFailurePolicy"]
