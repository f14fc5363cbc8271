"""The ``LeasedCronJob`` resource (short ``lcj``), as pydantic models: the source of its CRD.

Why this module exists: a LeasedCronJob creates a LeasedJob at each schedule
time; its runs share one fencing domain (docs/schedules.md,
"LeasedCronJob"). It builds on :mod:`~leasehold.lease.api.leasedjob` (the job
template is a ``LeasedJobSpec``). Field names follow batch/v1 CronJob's where
the meaning is the same.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, Literal, cast

from pydantic import ConfigDict, Field

from leasehold import names
from leasehold.lease.api.common import (
    MAX_STARTUP_DEADLINE_SECONDS,
    ApiModel,
    Condition,
    ObjectUID,
    PodTemplateMetadata,
)
from leasehold.lease.api.leasedjob import LeasedJobSpec
from leasehold.lease.schedule import MACROS, MAX_SCHEDULE_LENGTH

if TYPE_CHECKING:
    from pydantic.config import JsonDict

MAX_HISTORY_LIMIT: Final = 100
MAX_CRON_NAME_LENGTH: Final = 52
"""As CronJob's: a run's name adds ``-`` and up to ten digits (``<cron>-<unix minutes>``)
and must stay a valid label value (63 characters)."""

RUN_UNCOUNTED_ROOM: Final = 10
"""Tokens each run reserves beyond its budget (``maxAttempts + backoffLimit``) for
attempts that draw on no budget (evictions, failures a rule ignores, suspensions):
its lease's ``spec.ceilingFencingToken`` is ``base + budget + RUN_UNCOUNTED_ROOM``.
Past that, such an attempt counts like any other (docs/schedules.md)."""

_SCHEDULE_SHAPE: Final = (
    r"^\\s*(@(" + "|".join(m[1:] for m in MACROS) + r")|\\S+(\\s+\\S+){4})\\s*$"
)


def _template_rules(schema: JsonDict) -> None:
    """A template's spec has the LeasedJob's checks but not its transition rules.

    A LeasedJob's immutable fields (``leaseDurationSeconds``, ``maxAttempts``...)
    may change in a template: each run is a new LeasedJob made from the template
    as it is at that schedule time.
    """
    # This function replaces the LeasedJobSpec's own extra (a dict of its
    # rules), so those rules are taken from it here.
    extra = cast("JsonDict", LeasedJobSpec.model_config.get("json_schema_extra") or {})
    rules = cast("list[dict[str, str]]", extra.get("x-kubernetes-validations") or [])
    schema.pop("x-kubernetes-validations", None)
    kept = [dict(rule) for rule in rules if "oldSelf" not in rule["rule"]]
    kept.append(
        {  # the cron job makes each run's lease: its runs are this operator's
            "rule": f"!has(self.managedBy) || self.managedBy == '{names.MANAGED_BY_LEASEHOLD}'",
            "message": "spec.jobTemplate.spec.managedBy: a LeasedCronJob's runs are managed by"
            f" {names.MANAGED_BY_LEASEHOLD} (the cron job makes each run's lease with its"
            " token range)",
            "fieldPath": ".managedBy",
            "reason": "FieldValueForbidden",
        }
    )
    kept.append(
        {  # batch/v1 ValidateJobTemplateSpec: each run's selector is generated
            "rule": "!has(self.selector)",
            "message": "spec.jobTemplate.spec.selector: `selector` will be auto-generated (each"
            " run's pods are selected by leasehold.dev/controller-uid=<the run's uid>)",
            "fieldPath": ".selector",
            "reason": "FieldValueInvalid",
        }
    )
    kept.append(
        {
            "rule": "!has(self.manualSelector) || !self.manualSelector",
            "message": "spec.jobTemplate.spec.manualSelector: Unsupported value: true:"
            " supported values: unset, false (as batch/v1 CronJob's jobTemplate)",
            "fieldPath": ".manualSelector",
            "reason": "FieldValueInvalid",
        }
    )
    schema["x-kubernetes-validations"] = cast("Any", kept)


class LeasedJobTemplateSpec(LeasedJobSpec):
    """The spec of each run's LeasedJob (a ``LeasedJobSpec``; may change between runs)."""

    model_config = ConfigDict(json_schema_extra=_template_rules)


class LeasedJobTemplate(ApiModel):
    """What each run's LeasedJob is made of (batch/v1 CronJob's ``jobTemplate``)."""

    metadata: PodTemplateMetadata | None = Field(
        default=None, description="Labels and annotations copied onto each run's LeasedJob."
    )
    spec: LeasedJobTemplateSpec = Field(description="Each run's LeasedJob spec.")


class ConcurrencyPolicy(enum.StrEnum):
    """What a due run does about earlier runs that still hold or may claim their leases."""

    ALLOW = "Allow"
    """Runs may overlap; each still has its own token range above every earlier run's."""
    FORBID = "Forbid"
    """The new run waits: earlier runs may make no new attempt, and the new run starts
    only once every earlier run's lease is released, reclaimed or completed."""
    REPLACE = "Replace"
    """Earlier runs' leases are taken back at once (their writes are refused) and their
    LeasedJobs deleted, then the new run starts."""


class LeasedCronJobSpec(ApiModel):
    """When to run, and what each run is."""

    model_config = ConfigDict(
        json_schema_extra=cast(
            "JsonDict",
            {
                "x-kubernetes-validations": [
                    {
                        "rule": f"self.schedule.matches('{_SCHEDULE_SHAPE}')",
                        "message": "spec.schedule must be five cron fields (minute hour"
                        " day-of-month month day-of-week) or one of @yearly, @annually,"
                        " @monthly, @weekly, @daily, @midnight, @hourly",
                        "fieldPath": ".schedule",
                        "reason": "FieldValueInvalid",
                    },
                    {
                        "rule": "!self.schedule.upperAscii().contains('TZ=')",
                        "message": "spec.schedule may not set a time zone (TZ= or CRON_TZ=):"
                        " use spec.timeZone",
                        "fieldPath": ".schedule",
                        "reason": "FieldValueForbidden",
                    },
                ]
            },
        )
    )

    schedule: str = Field(
        min_length=1,
        max_length=MAX_SCHEDULE_LENGTH,
        description="Cron schedule: five fields (minute hour day-of-month month day-of-week)"
        " or a macro (@hourly, @daily, @weekly, @monthly, @yearly). The operator checks"
        " the fields' values and reports an invalid schedule as condition Ready=False"
        " (reason InvalidSchedule) and an Event.",
    )
    time_zone: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$",
        description="IANA time zone the schedule is read in (e.g. Europe/Berlin); UTC if"
        " unset. An unknown zone is reported like an invalid schedule.",
    )
    concurrency_policy: ConcurrencyPolicy = Field(
        default=ConcurrencyPolicy.ALLOW,
        description="Allow, Forbid (the new run starts only once every earlier run's lease"
        " is released, reclaimed or completed; earlier runs make no new attempt) or"
        " Replace (earlier runs' leases are taken back at once, their late writes refused).",
    )
    starting_deadline_seconds: int | None = Field(
        default=None,
        ge=0,
        le=MAX_STARTUP_DEADLINE_SECONDS,
        description="A run not started within this many seconds of its schedule time is"
        " skipped (counted as missed), unless it was due in time and waits for an earlier"
        " run (Forbid, Replace: status.waitingScheduleTime). Unset: no deadline.",
    )
    suspend: bool = Field(
        default=False,
        description="Start no new runs while true (runs already started go on).",
    )
    successful_jobs_history_limit: int = Field(
        default=3,
        ge=0,
        le=MAX_HISTORY_LIMIT,
        description="Succeeded runs (LeasedJobs) to keep; older ones are deleted.",
    )
    failed_jobs_history_limit: int = Field(
        default=1,
        ge=0,
        le=MAX_HISTORY_LIMIT,
        description="Failed runs (LeasedJobs) to keep; older ones are deleted.",
    )
    job_template: LeasedJobTemplate = Field(description="The LeasedJob made at each run.")


class RunReference(ApiModel):
    """A run: one LeasedJob made by the cron job."""

    name: str = Field(max_length=253)
    uid: ObjectUID | None = Field(default=None, alias="uid")
    scheduled_time: datetime | None = Field(
        default=None, description="The schedule time the run was made for."
    )


class LeasedCronJobStatus(ApiModel):
    """What the operator reports of a LeasedCronJob."""

    observed_generation: int | None = Field(default=None, ge=0)
    conditions: list[Condition] | None = Field(
        default=None,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    active: list[RunReference] | None = Field(
        default=None, description="Runs that have not finished."
    )
    last_schedule_time: datetime | None = Field(
        default=None, description="The last schedule time a run was started for."
    )
    last_successful_time: datetime | None = Field(
        default=None, description="When the last run that succeeded completed."
    )
    waiting_schedule_time: datetime | None = Field(
        default=None,
        description="The schedule time whose run was due in time and waits for an earlier"
        " run (concurrencyPolicy Forbid: its lease is still held; Replace: the replaced"
        " worker's lease window): spec.startingDeadlineSeconds does not skip it while it"
        " waits. Cleared when its run starts or a later schedule time is due.",
    )
    reserved_fencing_token: int | None = Field(
        default=None,
        ge=0,
        description="The fencing domain: every run takes its tokens above this (and raises"
        " it by its attempt budget plus room for uncounted attempts, its lease's"
        " spec.ceilingFencingToken), so each run's tokens are above every earlier run's.",
    )


class LeasedCronJob(ApiModel):
    """A ``LeasedCronJob`` object: LeasedJobs on a schedule, in one fencing domain."""

    api_version: Literal["leasehold.dev/v1alpha1"] = "leasehold.dev/v1alpha1"
    kind: Literal["LeasedCronJob"] = "LeasedCronJob"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: LeasedCronJobSpec
    status: LeasedCronJobStatus | None = None
