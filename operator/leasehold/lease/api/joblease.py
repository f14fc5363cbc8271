"""The ``JobLease`` resource (short ``jlease``), as pydantic models: the source of its CRD.

Why this module exists: a JobLease is the lease record of one LeasedJob, and the
only object workers may write. Its spec carries the CEL transition rules
(``x-kubernetes-validations`` with ``oldSelf``) through which the API server
enforces the protocol's invariants on every write, whoever the client: a token
that only goes up by one at a claim, a completion recorded once, an attempt cap
that never rises but by the writes that may raise it (docs/architecture.md).
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, Literal, cast

from pydantic import ConfigDict, Field

from leasehold.lease.api.common import (
    MAX_ATTEMPTS,
    MAX_BACKOFF_LIMIT,
    MAX_LEASE_DURATION_SECONDS,
    MAX_PRIORITY,
    MAX_STARTUP_DEADLINE_SECONDS,
    REASON_PATTERN,
    ApiModel,
    CompletionRecord,
    Condition,
    HolderName,
    ObjectName,
    ObjectUID,
)

if TYPE_CHECKING:
    from pydantic.config import JsonDict

MAX_UNCOUNTED_ATTEMPTS: Final = 1000
"""Attempts that may end without drawing on any budget (disruptions, ignored failures)."""

REARM: Final = "(has(self.jobUID) && (!has(oldSelf.jobUID) || self.jobUID != oldSelf.jobUID))"
"""CEL: this write hands the lease (the job name's fencing domain) to a new incarnation."""

_MOVE_FAILURE: Final = (
    "(has(oldSelf.completion) && oldSelf.completion.outcome == 'Failed'"
    " && !has(self.completion)"
    " && has(self.lastFailure) && self.lastFailure.outcome == 'Failed'"
    " && self.lastFailure.fencingToken == oldSelf.completion.fencingToken"
    " && self.lastFailure.holderIdentity == oldSelf.completion.holderIdentity)"
)
"""CEL: this write moves a Failed completion to ``spec.lastFailure``."""

_EXCUSE: Final = (
    "(self.uncountedAttempts == oldSelf.uncountedAttempts + 1"
    " && has(self.lastUncountedToken) && self.lastUncountedToken == self.fencingToken"
    " && (!has(oldSelf.lastUncountedToken) || oldSelf.lastUncountedToken < self.fencingToken)"
    " && self.fencingToken == oldSelf.fencingToken"
    " && !has(oldSelf.holderIdentity) && !has(self.holderIdentity)"
    " && has(oldSelf.maxFencingToken) && has(self.maxFencingToken)"
    " && self.maxFencingToken == oldSelf.maxFencingToken + 1)"
)
"""CEL: this write lets the ended attempt draw on no budget (``store.excuse``): once per
token, the cap goes up by one."""

_REOPEN: Final = f"({_MOVE_FAILURE} && self.failures == oldSelf.failures + 1)"
"""CEL: this write reopens a Failed completion to retry the job (``store.reopen``)."""

_REOPEN_UNCOUNTED: Final = f"({_MOVE_FAILURE} && self.failures == oldSelf.failures && {_EXCUSE})"
"""CEL: this write reopens a Failed completion that a failure rule ignores (no failure
counted; ``store.reopen`` with ``counted=False``)."""

_LEASE_RULES: Final[list[dict[str, str]]] = [
    {
        "rule": "!has(oldSelf.jobUID) || has(self.jobUID)",
        "message": "spec.jobUID cannot be removed: the lease is the fencing domain of its job"
        " name and always names the incarnation it serves",
        "fieldPath": ".jobUID",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": f"!{REARM} || (self.fencingToken == oldSelf.fencingToken"
        " && !has(self.holderIdentity) && !has(self.completion)"
        " && self.baseFencingToken == self.fencingToken)",
        "message": "a new incarnation (spec.jobUID changed) takes the domain unheld and"
        " uncompleted, at the same fencing token, which becomes spec.baseFencingToken",
        "fieldPath": ".jobUID",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": f"{REARM} || (self.baseFencingToken == oldSelf.baseFencingToken"
        " && (has(self.mode) == has(oldSelf.mode))"
        " && (!has(self.mode) || self.mode == oldSelf.mode))",
        "message": "spec.baseFencingToken and spec.mode change only when a new incarnation"
        " takes the domain",
        "fieldPath": ".baseFencingToken",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "!has(self.holderUID) || has(self.holderIdentity)",
        "message": "spec.holderUID names the holder's pod: an unheld lease has none",
        "fieldPath": ".holderUID",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "!has(oldSelf.holderUID) || !has(self.holderIdentity)"
        " || self.fencingToken != oldSelf.fencingToken"
        " || (has(self.holderUID) && self.holderUID == oldSelf.holderUID)",
        "message": "spec.holderUID is bound once per claim: a pod that replaced the holder's"
        " pod under the same name is not the holder",
        "fieldPath": ".holderUID",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "self.fencingToken != oldSelf.fencingToken ? has(self.acquireTime)"
        " : has(self.acquireTime) == has(oldSelf.acquireTime)"
        " && (!has(self.acquireTime) || self.acquireTime == oldSelf.acquireTime)",
        "message": "spec.acquireTime is set by a claim only: the claim (a fencing token bump)"
        " stamps it, and no other write removes or changes it (the operator reads it to tell"
        " whether the holder of the current token may still be running)",
        "fieldPath": ".acquireTime",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "self.jobName == oldSelf.jobName",
        "message": "spec.jobName is immutable",
        "fieldPath": ".jobName",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": f"{REARM} || self.leaseDurationSeconds == oldSelf.leaseDurationSeconds",
        "message": "spec.leaseDurationSeconds is immutable: a holder must not lengthen"
        " its own lease",
        "fieldPath": ".leaseDurationSeconds",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": f"{REARM}"
        " || has(self.startupDeadlineSeconds) == has(oldSelf.startupDeadlineSeconds)"
        " && (!has(self.startupDeadlineSeconds)"
        " || self.startupDeadlineSeconds == oldSelf.startupDeadlineSeconds)",
        "message": "spec.startupDeadlineSeconds is immutable (but for a new incarnation)",
        "fieldPath": ".startupDeadlineSeconds",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": f"{REARM} || !has(oldSelf.maxFencingToken) || (has(self.maxFencingToken)"
        " && (self.maxFencingToken <= oldSelf.maxFencingToken"
        f" + self.suspensions - oldSelf.suspensions || {_EXCUSE}))",
        "message": "spec.maxFencingToken (the attempt limit) can only be lowered, never raised"
        " or removed (except by a new incarnation of the job, or by one in the write that"
        " counts a suspension or raises spec.uncountedAttempts: such an attempt uses no"
        " budget)",
        "fieldPath": ".maxFencingToken",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "!has(oldSelf.ceilingFencingToken) || (has(self.ceilingFencingToken)"
        " && self.ceilingFencingToken <= oldSelf.ceilingFencingToken)",
        "message": "spec.ceilingFencingToken can only be lowered, never raised or removed"
        " (not even by a new incarnation): the tokens of a schedule's run stay inside the"
        " range reserved for it, and a closed run can never claim again",
        "fieldPath": ".ceilingFencingToken",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "self.fencingToken == oldSelf.fencingToken"
        " || self.fencingToken == oldSelf.fencingToken + 1",
        "message": "spec.fencingToken may only stay the same or go up by exactly one (a claim)",
        "fieldPath": ".fencingToken",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": "self.fencingToken == oldSelf.fencingToken"
        " || (!has(oldSelf.holderIdentity) && has(self.holderIdentity))",
        "message": "a fencing token bump is a claim: only an unheld lease can be claimed,"
        " and the claim must set spec.holderIdentity",
        "fieldPath": ".holderIdentity",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "self.fencingToken != oldSelf.fencingToken || !has(self.holderIdentity)"
        " || (has(oldSelf.holderIdentity) && self.holderIdentity == oldSelf.holderIdentity)",
        "message": "spec.holderIdentity may change without a fencing token bump only when"
        " the lease is released (holderIdentity removed)",
        "fieldPath": ".holderIdentity",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": f"!has(oldSelf.completion) || {REARM}"
        " || (has(self.completion) && self.completion == oldSelf.completion)"
        f" || {_REOPEN} || {_REOPEN_UNCOUNTED}",
        "message": "spec.completion is recorded once and can never change (a new incarnation"
        " of the job starts without one; only a Failed one may be moved to"
        " spec.lastFailure, to retry the job)",
        "fieldPath": ".completion",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "self.fencingToken == oldSelf.fencingToken || !self.suspended",
        "message": "a suspended lease (spec.suspended) cannot be claimed: its job is suspended",
        "fieldPath": ".suspended",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": f"self.suspensions == oldSelf.suspensions"
        f" || ({REARM} && self.suspensions == 0)"
        " || (self.suspensions == oldSelf.suspensions + 1 && self.suspended"
        " && !oldSelf.suspended && has(oldSelf.holderIdentity)"
        " && !has(self.holderIdentity) && self.fencingToken == oldSelf.fencingToken"
        " && has(self.lastUncountedToken) && self.lastUncountedToken == self.fencingToken)",
        "message": "spec.suspensions goes up by exactly one, only in the write that suspends a"
        " held lease (unheld, same token, its token marked as spec.lastUncountedToken);"
        " a new incarnation starts at 0",
        "fieldPath": ".suspensions",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": f"self.failures == oldSelf.failures || {_REOPEN}"
        f" || ({REARM} && self.failures == 0 && !has(self.lastFailure))",
        "message": "spec.failures goes up by exactly one, only in the write that moves a Failed"
        " spec.completion to spec.lastFailure (a new incarnation starts at 0)",
        "fieldPath": ".failures",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": f"{REARM} || self.failures != oldSelf.failures || {_REOPEN_UNCOUNTED}"
        " || (has(self.lastFailure) == has(oldSelf.lastFailure)"
        " && (!has(self.lastFailure) || self.lastFailure == oldSelf.lastFailure))",
        "message": "spec.lastFailure changes only when spec.failures goes up (or"
        " spec.uncountedAttempts, for a failure a rule ignores)",
        "fieldPath": ".lastFailure",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": f"self.uncountedAttempts == oldSelf.uncountedAttempts || {_EXCUSE}"
        f" || ({REARM} && self.uncountedAttempts == 0 && !has(self.lastUncountedToken))",
        "message": "spec.uncountedAttempts goes up by exactly one per ended attempt (its token"
        " becomes spec.lastUncountedToken), unheld, in the write that raises"
        " spec.maxFencingToken by one (a new incarnation starts at 0)",
        "fieldPath": ".uncountedAttempts",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": f"{REARM} || self.uncountedAttempts != oldSelf.uncountedAttempts"
        " || (self.suspensions == oldSelf.suspensions + 1"
        " && has(self.lastUncountedToken) && self.lastUncountedToken == self.fencingToken)"
        " || (has(self.lastUncountedToken) == has(oldSelf.lastUncountedToken)"
        " && (!has(self.lastUncountedToken)"
        " || self.lastUncountedToken == oldSelf.lastUncountedToken))",
        "message": "spec.lastUncountedToken changes only when spec.uncountedAttempts goes up,"
        " or to the suspended token in the write that suspends a held lease",
        "fieldPath": ".lastUncountedToken",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "has(oldSelf.completion) || !has(self.completion)"
        " || (has(oldSelf.holderIdentity)"
        " && self.completion.holderIdentity == oldSelf.holderIdentity"
        " && self.completion.fencingToken == oldSelf.fencingToken"
        " && self.fencingToken == oldSelf.fencingToken)",
        "message": "spec.completion must be recorded by the current holder"
        " under the current fencing token",
        "fieldPath": ".completion",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "!has(oldSelf.completion)"
        " || (self.fencingToken == oldSelf.fencingToken && !has(self.holderIdentity))",
        "message": "a completed lease can never be claimed or held again",
        "fieldPath": ".holderIdentity",
        "reason": "FieldValueForbidden",
    },
]

_LEASE_CREATE_RULES: Final[list[dict[str, str]]] = [
    {
        "rule": "!has(self.completion) || self.completion.fencingToken <= self.fencingToken",
        "message": "spec.completion.fencingToken cannot exceed spec.fencingToken",
        "fieldPath": ".completion.fencingToken",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": "!has(self.maxFencingToken) || self.fencingToken <= self.maxFencingToken",
        "message": "spec.fencingToken cannot pass spec.maxFencingToken: the job's attempts"
        " are used up",
        "fieldPath": ".fencingToken",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "!has(self.completion) || !has(self.holderIdentity)",
        "message": "a completed lease is unheld: remove spec.holderIdentity in the same write"
        " that records spec.completion",
        "fieldPath": ".holderIdentity",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "!self.suspended || !has(self.holderIdentity)",
        "message": "a suspended lease (spec.suspended) is unheld: remove spec.holderIdentity in"
        " the same write",
        "fieldPath": ".holderIdentity",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "!has(self.ceilingFencingToken) || (has(self.maxFencingToken)"
        " && self.maxFencingToken <= self.ceilingFencingToken)",
        "message": "spec.maxFencingToken cannot pass spec.ceilingFencingToken (and must be"
        " set under one): no excuse, suspension or new incarnation raises the attempt"
        " limit past the ceiling",
        "fieldPath": ".maxFencingToken",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "self.baseFencingToken <= self.fencingToken",
        "message": "spec.baseFencingToken cannot exceed spec.fencingToken",
        "fieldPath": ".baseFencingToken",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": "!has(self.holderIdentity) || self.fencingToken >= 1",
        "message": "a held lease has a fencing token of at least 1",
        "fieldPath": ".fencingToken",
        "reason": "FieldValueInvalid",
    },
]


class LeaseMode(enum.StrEnum):
    """Who claims a lease: the operator for the pods it creates, or a worker pool."""

    PUSH = "Push"
    """The job has a pod template: only the operator claims, for the pod it creates."""
    PULL = "Pull"
    """The job has no pod template: workers of a pool claim it."""


class JobLeaseSpec(ApiModel):
    """The lease record: who holds the job, under which fencing token.

    A JobLease is also its job name's fencing domain: it outlives every
    incarnation of the LeasedJob (it has no ownerReference to it; a finalizer
    keeps it until its namespace goes), so tokens under one namespace/name
    never repeat and never go down (docs/lifecycle.md, "Across a job's
    whole life").
    """

    model_config = ConfigDict(
        json_schema_extra=cast(
            "JsonDict", {"x-kubernetes-validations": _LEASE_RULES + _LEASE_CREATE_RULES}
        )
    )

    job_name: ObjectName = Field(description="Name of the LeasedJob this lease belongs to.")
    job_uid: ObjectUID | None = Field(
        default=None,
        alias="jobUID",
        description="metadata.uid of the LeasedJob incarnation the lease serves now. A new"
        " incarnation under the same name takes the lease over at its current token.",
    )
    mode: LeaseMode | None = Field(
        default=None,
        description="Push: only the operator claims (for the pods it creates). Pull: worker"
        " pools claim. Set by the operator for each incarnation.",
    )
    base_fencing_token: int = Field(
        default=0,
        ge=0,
        description="The fencing token when the current incarnation took the lease; its"
        " attempts are spec.fencingToken - spec.baseFencingToken.",
    )
    holder_identity: HolderName | None = Field(
        default=None,
        description="Current holder (pod name in push mode, worker id in pull mode);"
        " absent when the lease is unheld.",
    )
    holder_uid: ObjectUID | None = Field(
        default=None,
        alias="holderUID",
        description="metadata.uid of the holder's pod, bound once per claim: a pod that"
        " replaced it under the same name is not the holder.",
    )
    fencing_token: int = Field(
        default=0,
        ge=0,
        description="The lease's generation: goes up by exactly one at every claim, never down."
        " Targets reject effects carrying a lower token.",
    )
    lease_duration_seconds: int = Field(
        default=30,
        ge=1,
        le=MAX_LEASE_DURATION_SECONDS,
        description="How long the holder may go without renewing before the operator"
        " reclaims the lease.",
    )
    acquire_time: datetime | None = Field(
        default=None,
        description="When the current holder claimed (the claimant's clock). Set by every"
        " claim and by no other write: its presence tells the operator a token was held.",
    )
    renew_time: datetime | None = Field(
        default=None,
        description="When the holder last renewed (the holder's clock; shown to people,"
        " never used to judge expiry).",
    )
    completion: CompletionRecord | None = Field(
        default=None, description="The job's completion, recorded once; immutable after."
    )
    max_fencing_token: int | None = Field(
        default=None,
        ge=0,
        description="No claim may take spec.fencingToken past this: the job's attempt limit."
        " The operator lowers it to the current token to stop a job (deadline, failure).",
    )
    ceiling_fencing_token: int | None = Field(
        default=None,
        ge=0,
        description="No write may take spec.maxFencingToken (and so any claim) past this;"
        " it may only be lowered, never raised or removed, not even by a new incarnation."
        " A LeasedCronJob sets it on each run's lease to the top of the token range"
        " reserved for the run, and lowers it to the current token to close a run for"
        " good (concurrencyPolicy Forbid or Replace): excuses and suspensions raise the"
        " cap only below it.",
    )
    failures: int = Field(
        default=0,
        ge=0,
        le=MAX_ATTEMPTS + MAX_BACKOFF_LIMIT,
        description="Failed completions the operator reopened to retry the job (each within"
        " the job's backoffLimit). Goes up by one in the write that reopens.",
    )
    last_failure: CompletionRecord | None = Field(
        default=None,
        description="The last Failed completion reopened: kept so the failure stays on record.",
    )
    params: dict[str, Any] | None = Field(
        default=None,
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
        description="The job's spec.params, copied by the operator when the incarnation takes"
        " the lease: the input a claimer gets with the lease (the SDK's LeaseHolder.params).",
    )
    priority: int = Field(
        default=0,
        ge=-MAX_PRIORITY,
        le=MAX_PRIORITY,
        description="The job's spec.priority, copied likewise: pull pools claim higher first.",
    )
    job_creation_timestamp: datetime | None = Field(
        default=None,
        description="The served incarnation's metadata.creationTimestamp: pull pools claim the"
        " older first among equal priorities (the lease itself may be older: it outlives jobs).",
    )
    suspended: bool = Field(
        default=False,
        description="The job is suspended (its spec.suspend): no claim is possible and the"
        " lease is unheld. Written by the operator only.",
    )
    suspensions: int = Field(
        default=0,
        ge=0,
        description="Attempts ended by a suspension. Goes up by one in the write that suspends"
        " a held lease, which may also raise spec.maxFencingToken by one: a suspended"
        " attempt uses no budget.",
    )
    uncounted_attempts: int = Field(
        default=0,
        ge=0,
        le=MAX_UNCOUNTED_ATTEMPTS,
        description="Attempts that ended without drawing on the job's budgets (a disruption"
        " such as an eviction, a failure the job's podFailurePolicy ignores). Each raised"
        " spec.maxFencingToken by one, in the write that added it.",
    )
    last_uncounted_token: int | None = Field(
        default=None,
        ge=1,
        description="The token of the last attempt counted in spec.uncountedAttempts (one"
        " write per token).",
    )
    startup_deadline_seconds: int | None = Field(
        default=None,
        ge=1,
        le=MAX_STARTUP_DEADLINE_SECONDS,
        description="Push mode: how long an attempt may take to start (from the claim to its"
        " first renewal or its pod running) before the operator reclaims it. The lease"
        " duration only counts from the start. Absent in pull mode (the claimant is the"
        " worker). Immutable.",
    )


class LeaseCondition(Condition):
    """A JobLease's condition (``metav1.Condition``): the state of one aspect.

    ``reason`` and ``lastTransitionTime`` are required, as ``metav1.Condition``'s
    (a LeasedJob's and LeasedCronJob's are optional, as batch/v1's).
    """

    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=REASON_PATTERN,
        description="CamelCase reason for the condition's last transition.",
    )
    last_transition_time: datetime = Field(
        description="When status last changed (API server clock of the writer)."
    )


class JobLeaseStatus(ApiModel):
    """What the operator observed of the lease. Written only by the operator."""

    observed_generation: int | None = Field(default=None, ge=0)
    last_reclaimed_token: int | None = Field(
        default=None,
        ge=1,
        description="Written by operators before 2026-12-05 only: the last token taken back"
        " on expiry. The reclaim now notes it in its own write, as the annotation"
        " leasehold.dev/last-reclaimed-token; the operator reads both.",
    )
    last_reclaim_reason: str | None = Field(
        default=None,
        max_length=64,
        description="Written by operators before 2026-12-05 only: why that token was taken"
        " back, LeaseExpired (no renewal for the lease duration) or StartupDeadlineExceeded"
        " (the attempt never started). Now the annotation leasehold.dev/last-reclaim-reason.",
    )
    conditions: list[LeaseCondition] | None = Field(
        default=None,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


class JobLease(ApiModel):
    """A ``JobLease`` object: one per LeasedJob, owned by it."""

    api_version: Literal["leasehold.dev/v1alpha1"] = "leasehold.dev/v1alpha1"
    kind: Literal["JobLease"] = "JobLease"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: JobLeaseSpec
    status: JobLeaseStatus | None = None
