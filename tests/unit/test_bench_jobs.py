"""The job bench's judgement of lease versions and status changes (``bench/jobs.py``)."""

from __future__ import annotations

from typing import Any

from bench.jobs import LeaseVersions, status_change


def _lease(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": spec}


def test_each_lease_version_is_judged_by_what_changed() -> None:
    versions = LeaseVersions("l-")
    held: dict[str, Any] = {"holderIdentity": "l-1-1", "fencingToken": 1}
    steps: list[tuple[str, dict[str, Any]]] = [
        ("ADDED", {"fencingToken": 0}),
        ("MODIFIED", {**held, "renewTime": "t0"}),  # the claim (binds the pod)
        ("MODIFIED", {**held, "renewTime": "t1"}),  # the worker's confirm renewal
        ("MODIFIED", {**held, "renewTime": "t2"}),  # a renewal
        ("MODIFIED", {**held, "renewTime": "t2", "labels": "x"}),  # something else
        ("MODIFIED", {"fencingToken": 1, "completion": {"outcome": "Succeeded"}}),
    ]
    for event, spec in steps:
        versions.see(event, _lease("l-1", **spec), 1.0)
    versions.see("ADDED", _lease("other", fencingToken=0), 2.0)  # not this round's
    assert versions.kinds == {
        "create": 1,
        "claim": 1,
        "confirm renewal": 1,
        "renewal": 1,
        "other": 1,
        "complete": 1,
    }
    assert versions.completed == {"l-1": 1.0}


def test_a_release_and_a_second_attempts_confirm_are_told_apart() -> None:
    versions = LeaseVersions("l-")
    first: dict[str, Any] = {"holderIdentity": "a", "fencingToken": 1}
    second: dict[str, Any] = {"holderIdentity": "b", "fencingToken": 2}
    specs: list[dict[str, Any]] = [
        {"fencingToken": 0},
        {**first, "renewTime": "t0"},
        {**first, "renewTime": "t1"},
        {"fencingToken": 1},
        {**second, "renewTime": "t2"},
        {**second, "renewTime": "t3"},
    ]
    for spec in specs:
        versions.see("MODIFIED", _lease("l-1", **spec), 0.0)
    assert versions.kinds["release or reclaim"] == 1
    assert versions.kinds["confirm renewal"] == 2


def test_a_relisted_lease_is_a_write_only_when_it_changed_meanwhile() -> None:
    """After ``410 Gone`` the bench's watch relists (``bench.harness.follow``)."""
    versions = LeaseVersions("l-")
    held: dict[str, Any] = {"holderIdentity": "l-1-1", "fencingToken": 1, "renewTime": "t0"}
    versions.see("ADDED", _lease("l-1", fencingToken=0), 0.0)
    versions.see("MODIFIED", _lease("l-1", **held), 0.0)
    versions.see("LISTED", _lease("l-1", **held), 1.0)  # unchanged: no write
    versions.see("LISTED", _lease("l-1", **{**held, "renewTime": "t1"}), 2.0)
    assert versions.kinds == {"create": 1, "claim": 1, "confirm renewal": 1}


def test_a_status_change_names_the_fields_and_the_conditions_that_flipped() -> None:
    old = {"phase": "Pending", "conditions": [{"type": "PodCreated", "status": "True"}]}
    new = {
        "phase": "Running",
        "active": 1,
        "conditions": [
            {"type": "PodCreated", "status": "True"},
            {"type": "Running", "status": "True"},
        ],
    }
    assert status_change(old, new) == "active,phase,conditions[Running]"
    assert status_change(new, new) == ""
    assert status_change(None, {"active": 1}) == "active"
