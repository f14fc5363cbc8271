"""``spec.selector`` and ``spec.manualSelector``: matching, text form, the operator's own check."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import ValidationError

from leasehold.controller.plan.pod import pod_selector
from leasehold.lease.api import LabelSelector, LeasedJob, LeasedJobSpec


def _selector(**body: Any) -> LabelSelector:
    return LabelSelector.model_validate(body)


def test_selector_text_is_sorted_by_key_as_labels_selector_string() -> None:
    selector = _selector(
        matchLabels={"tier": "batch", "app": "etl"},
        matchExpressions=[
            {"key": "zone", "operator": "In", "values": ["b", "a"]},
            {"key": "canary", "operator": "DoesNotExist"},
            {"key": "owner", "operator": "Exists"},
            {"key": "env", "operator": "NotIn", "values": ["prod"]},
        ],
    )
    assert selector.to_string() == (
        "app=etl,!canary,env notin (prod),owner,tier=batch,zone in (a,b)"
    )
    assert _selector().to_string() == ""


@pytest.mark.parametrize(
    ("body", "matches"),
    [
        ({"matchLabels": {"app": "etl"}}, True),
        ({"matchLabels": {"app": "web"}}, False),
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["etl"]}]}, True),
        ({"matchExpressions": [{"key": "x", "operator": "In", "values": ["etl"]}]}, False),
        ({"matchExpressions": [{"key": "x", "operator": "NotIn", "values": ["etl"]}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["etl"]}]}, False),
        ({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, False),
        ({}, True),
    ],
)
def test_selector_matches_as_metav1(body: dict[str, Any], matches: bool) -> None:
    assert _selector(**body).matches({"app": "etl"}) is matches


def _spec(**fields: Any) -> LeasedJobSpec:
    template = {"metadata": {"labels": {"app": "etl"}}, "spec": {"containers": []}}
    return LeasedJobSpec.model_validate({"template": template, **fields})


def test_operator_refuses_what_the_crd_refuses() -> None:
    selector = {"matchLabels": {"app": "etl"}}
    with pytest.raises(ValidationError, match=re.escape("`selector` not auto-generated")):
        _spec(selector=selector)
    with pytest.raises(ValidationError, match=re.escape("spec.selector: Required value")):
        _spec(manualSelector=True)
    with pytest.raises(ValidationError, match=re.escape("does not match template `labels`")):
        _spec(manualSelector=True, selector={"matchLabels": {"app": "web"}})
    assert _spec(manualSelector=True, selector=selector).selector is not None


def test_status_selector_is_generated_from_the_uid_unless_manual() -> None:
    meta = {"name": "j", "namespace": "ns", "uid": "u-1"}
    generated = LeasedJob(metadata=meta, spec=_spec())
    assert pod_selector(generated) == "leasehold.dev/controller-uid=u-1"
    manual = LeasedJob(
        metadata=meta, spec=_spec(manualSelector=True, selector={"matchLabels": {"app": "etl"}})
    )
    assert pod_selector(manual) == "app=etl"


def test_the_longest_selector_fits_status_selector() -> None:
    # A selector at every limit (32 labels, 32 NotIn expressions of 32 values,
    # keys and values at their longest) is valid; its text must fit the
    # status field, or every status write of the job is refused (review).
    from leasehold.lease.api.leasedjob import MAX_SELECTOR_LENGTH, MAX_SELECTOR_TERMS

    def key(i: int) -> str:
        return f"{'p' * 240}{i:013d}/{'n' * 59}{i:04d}"

    def value(i: int) -> str:
        return f"{'v' * 59}{i:04d}"

    n = MAX_SELECTOR_TERMS
    selector = LabelSelector.model_validate(
        {
            "matchLabels": {key(i): value(i) for i in range(n)},
            "matchExpressions": [
                {"key": key(n + i), "operator": "NotIn", "values": [value(j) for j in range(n)]}
                for i in range(n)
            ],
        }
    )
    text = selector.to_string()
    assert len(text) > 80_000
    assert len(text) <= MAX_SELECTOR_LENGTH
