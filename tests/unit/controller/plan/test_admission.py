"""The admission webhook's pure rules (plan/admission.py): what is refused, and the field named."""

from __future__ import annotations

from typing import Any

import pytest

from leasehold.controller.plan import admission
from leasehold.lease.api.leasedjob import MAX_PARAMS_BYTES


def cron(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "nightly", "namespace": "ns"},
        "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {}}, **spec},
    }


def job(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "hello", "namespace": "ns"}, "spec": spec}


def big_params() -> dict[str, Any]:
    return {"blob": "x" * MAX_PARAMS_BYTES}


@pytest.mark.parametrize("zone", [None, "UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires"])
def test_known_time_zones_are_allowed(zone: str | None) -> None:
    assert admission.time_zone_error(zone) is None


@pytest.mark.parametrize("zone", ["bad-time-zone", "", "Local/../x", "/etc/passwd", "Mars/Base"])
def test_unknown_time_zone_is_refused_naming_the_field(zone: str) -> None:
    error = admission.time_zone_error(zone)
    assert error is not None
    assert error.startswith("spec.timeZone: unknown time zone"), error


def test_bad_time_zone_message_is_batchs() -> None:
    assert admission.time_zone_error("bad-time-zone") == (
        'spec.timeZone: unknown time zone "bad-time-zone" (an IANA name such as Europe/Berlin)'
    )


@pytest.mark.parametrize("expression", ["0 3 * * *", "*/5 * * * 1-5", "@hourly", "@yearly"])
def test_parsable_schedules_are_allowed(expression: str) -> None:
    assert admission.schedule_error(expression) is None


@pytest.mark.parametrize(
    "expression", ["61 * * * *", "* * *", "@fortnightly", "0 25 * * *", "x y z w v", 5]
)
def test_unparsable_schedule_is_refused_naming_the_field(expression: object) -> None:
    error = admission.schedule_error(expression)
    assert error is not None and error.startswith("spec.schedule"), error


def test_params_over_the_limit_are_refused_with_their_size() -> None:
    error = admission.params_error(big_params(), "spec.params")
    assert error is not None
    assert error.startswith("spec.params: Too long: may not be more than 32768 bytes"), error
    assert f"(it is {MAX_PARAMS_BYTES + 11})" in error  # {"blob":"..."} adds 11 bytes


def test_params_at_the_limit_are_allowed() -> None:
    exactly = {"blob": "x" * (MAX_PARAMS_BYTES - 11)}
    assert admission.params_error(exactly, "spec.params") is None
    assert admission.params_error(None, "spec.params") is None


def test_leased_job_with_oversized_params_is_refused() -> None:
    assert admission.leased_job_errors(job(params=big_params()))[0].startswith("spec.params:")
    assert admission.leased_job_errors(job(params={"shard": 7})) == []
    assert admission.leased_job_errors(job()) == []


def test_leased_cron_job_errors_name_every_bad_field() -> None:
    bad = cron(
        schedule="61 * * * *",
        timeZone="bad-time-zone",
        jobTemplate={"spec": {"params": big_params()}},
    )
    errors = admission.leased_cron_job_errors(bad)
    assert [e.split(":")[0].split(" ")[0] for e in errors] == [
        "spec.schedule",
        "spec.timeZone",
        "spec.jobTemplate.spec.params",
    ]
    assert admission.leased_cron_job_errors(cron(timeZone="Europe/Berlin")) == []


def test_update_checks_only_changed_fields() -> None:
    """An object stored with a bad value (the webhook was away) may still be updated otherwise."""
    stored = cron(timeZone="bad-time-zone")
    suspended = cron(timeZone="bad-time-zone", suspend=True)
    assert admission.leased_cron_job_errors(suspended, stored) == []
    assert admission.leased_cron_job_errors(suspended) != []  # a create is always checked
    moved = cron(timeZone="Not/A_Zone", suspend=True)
    assert admission.leased_cron_job_errors(moved, stored)[0].startswith("spec.timeZone")
    rescheduled = cron(schedule="99 * * * *")
    assert admission.leased_cron_job_errors(rescheduled, cron())[0].startswith("spec.schedule")
    stored_job = job(params=big_params())
    assert admission.leased_job_errors(job(params=big_params(), cancel=True), stored_job) == []


def test_malformed_objects_are_judged_without_raising() -> None:
    assert admission.leased_cron_job_errors({}) == ["spec.schedule: must be a string"]
    assert admission.leased_cron_job_errors({"spec": "x"}) == ["spec.schedule: must be a string"]
    assert admission.leased_job_errors({"spec": {"params": {"x": {1, 2}}}}) == [
        "spec.params: must be a JSON object"
    ]


def test_a_scale_down_below_a_success_policy_index_is_refused() -> None:
    """batch/v1 validateJobSpec on update: succeededIndexes against the new completions."""
    policy = {"rules": [{"succeededCount": 1}, {"succeededIndexes": "0,3-4"}]}
    shape = {"completionMode": "Indexed", "successPolicy": policy}
    stored = job(completions=5, parallelism=5, **shape)
    assert admission.leased_job_errors(job(completions=3, parallelism=3, **shape), stored) == [
        "spec.successPolicy.rules[1].succeededIndexes: Invalid value: '0,3-4': error parsing"
        " succeededIndexes: too large index: '3' (completions=3)"
    ]
    assert admission.leased_job_errors(job(completions=6, parallelism=6, **shape), stored) == []
    # only a change of completions is judged here (at create the operator tells)
    assert admission.leased_job_errors(job(completions=3, parallelism=3, **shape)) == []
