"""The ``LeasedJob`` resource (short ``ljob``), as pydantic models: the source of its CRD.

Why this module exists: a LeasedJob says what to run (a pod template, or none
for a worker pool to claim), how long a worker may stall before its lease is
reclaimed, and how attempts are retried, counted and kept (backoff,
``podFailurePolicy``, completions, pod retention); its status is what the
operator reports. Field names follow batch/v1 Job's where the meaning is the
same. The spec's transition rules (CEL) keep immutable what its JobLease copies.
"""

from __future__ import annotations

import enum
import json
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, cast

from pydantic import ConfigDict, Field, field_validator, model_validator

from leasehold.lease.api.common import (
    MAX_ATTEMPTS,
    MAX_BACKOFF_LIMIT,
    MAX_LABEL_VALUE_LENGTH,
    MAX_LEASE_DURATION_SECONDS,
    MAX_PRIORITY,
    MAX_STARTUP_DEADLINE_SECONDS,
    ApiModel,
    CompletionRecord,
    Condition,
    ConditionStatus,
    PodTemplateMetadata,
)
from leasehold.lease.indexes import interval_total, parse_intervals

if TYPE_CHECKING:
    from pydantic.config import JsonDict

MAX_JOB_NAME_LENGTH: Final = 63
"""A LeasedJob's name is a label value on its lease and pods (as batch/v1 Job's, 63)."""
MAX_BACKOFF_DELAY_SECONDS: Final = 24 * 3600
MAX_ACTIVE_DEADLINE_SECONDS: Final = 7 * 24 * 3600
DEFAULT_STARTUP_DEADLINE_SECONDS: Final = 600
"""Ten minutes to start: an image pull, a node from the autoscaler, init containers."""
MAX_TTL_SECONDS_AFTER_FINISHED: Final = 365 * 24 * 3600
MAX_PARAMS_BYTES: Final = 32 * 1024
"""``spec.params`` as compact JSON is at most this long (it is copied to the JobLease)."""
MAX_PARAMS_PROPERTIES: Final = 256
MAX_COMPLETIONS: Final = 10_000
"""The most indexes a job may have (each is one JobLease; batch Job allows 100,000
with ``backoffLimitPerIndex``, but its status lists stay bounded here too)."""
MAX_INDEX_LIST_LENGTH: Final = 65_536
"""The longest ``completedIndexes``/``failedIndexes`` text (every other index of
``MAX_COMPLETIONS`` fits)."""
MAX_FAILURE_RULES: Final = 20
"""Rules in ``spec.podFailurePolicy`` (as batch/v1 Job's)."""
MAX_EXIT_CODE_VALUES: Final = 255
MAX_MANAGED_BY_LENGTH: Final = 63
"""``spec.managedBy`` is at most this long (as batch/v1 Job's)."""
MANAGED_BY_PATTERN: Final = (
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
    r"/[-A-Za-z0-9/._~%!$&'()*+,;=:]+$"
)
"""A domain-prefixed path (``example.com/controller``), as batch/v1 Job's ``managedBy``
(apimachinery ``IsDomainPrefixedPath``: a DNS subdomain, ``/``, a non-empty HTTP path);
its backslash escaped for a CEL string."""
MAX_SUCCESS_POLICY_RULES: Final = 20
"""Rules in ``spec.successPolicy`` (as batch/v1 Job's)."""
MAX_SUCCEEDED_INDEXES_LENGTH: Final = 64 * 1024
"""The longest ``succeededIndexes`` text (batch/v1's limit)."""
MAX_ATTEMPT_HISTORY: Final = 10
"""Attempts kept in ``status.attemptHistory``: the last ten (the oldest go first)."""


def params_size(params: object) -> int:
    """How long ``spec.params`` is, the way its limit is measured.

    Args:
        params: the decoded JSON value (an object, normally).

    Returns:
        Bytes of its compact JSON (``json.dumps`` with ``(",", ":")`` separators,
        non-ASCII escaped): what :data:`MAX_PARAMS_BYTES` bounds.

    Raises:
        TypeError: ``params`` holds something JSON cannot encode.
    """
    return len(json.dumps(params, separators=(",", ":")).encode())


class Phase(enum.StrEnum):
    """Where a LeasedJob is in its life."""

    PENDING = "Pending"
    """Accepted; no attempt holds the lease yet."""
    RUNNING = "Running"
    """An attempt holds the lease."""
    SUSPENDED = "Suspended"
    """``spec.suspend`` is true: no attempt runs until it is resumed."""
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class PodTemplate(ApiModel):
    """A pod template (``core/v1 PodTemplateSpec``).

    Only the outline is checked here (at least one container, each with a
    name and an image); the API server validates the full pod when the
    operator creates it, and the operator reports that error on the job.
    """

    metadata: PodTemplateMetadata | None = None
    spec: dict[str, Any] = Field(
        json_schema_extra={
            "x-kubernetes-preserve-unknown-fields": True,
            "required": ["containers"],
            "properties": {
                "containers": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                        "required": ["name", "image"],
                        "properties": {
                            "name": {"type": "string", "minLength": 1, "maxLength": 63},
                            "image": {"type": "string", "minLength": 1, "maxLength": 1024},
                        },
                    },
                },
            },
        },
        description="Pod spec; see core/v1 PodSpec.",
    )


_TEMPLATE_LABELS: Final = "self.?template.?metadata.?labels.orValue({})"
_SELECTED: Final = (
    f"(has(e.values) && e.key in {_TEMPLATE_LABELS} && {_TEMPLATE_LABELS}[e.key] in e.values)"
)
_SELECTOR_MATCHES_TEMPLATE: Final = (
    "!has(self.selector) || ("
    "(!has(self.selector.matchLabels) || self.selector.matchLabels.all(k,"
    f" k in {_TEMPLATE_LABELS} && {_TEMPLATE_LABELS}[k] == self.selector.matchLabels[k]))"
    " && (!has(self.selector.matchExpressions) || self.selector.matchExpressions.all(e,"
    f" e.operator == 'In' ? {_SELECTED} : e.operator == 'NotIn' ? !{_SELECTED}"
    f" : e.operator == 'Exists' ? e.key in {_TEMPLATE_LABELS}"
    f" : !(e.key in {_TEMPLATE_LABELS}))))"
)
"""CEL: the selector selects the template's labels (``LabelSelectorAsSelector(...).Matches``,
as batch/v1's ``ValidateJobSpec``, ``pkg/apis/batch/validation/validation.go``)."""

_JOB_RULES: Final[list[dict[str, Any]]] = [
    {
        "rule": "self.leaseDurationSeconds == oldSelf.leaseDurationSeconds",
        "message": "spec.leaseDurationSeconds is immutable: the JobLease and every worker time"
        " their window from the lease, which cannot change (create a new LeasedJob)",
        "fieldPath": ".leaseDurationSeconds",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "self.startupDeadlineSeconds == oldSelf.startupDeadlineSeconds",
        "message": "spec.startupDeadlineSeconds is immutable: it is copied to the JobLease,"
        " whose timing cannot change (create a new LeasedJob)",
        "fieldPath": ".startupDeadlineSeconds",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "self.maxAttempts == oldSelf.maxAttempts",
        "message": "spec.maxAttempts is immutable: it is the JobLease's attempt cap"
        " (spec.maxFencingToken), which can never be raised (create a new LeasedJob)",
        "fieldPath": ".maxAttempts",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "self.backoffLimit == oldSelf.backoffLimit",
        "message": "spec.backoffLimit is immutable: with spec.maxAttempts it makes the JobLease's"
        " attempt cap (spec.maxFencingToken), which can never be raised (create a new LeasedJob)",
        "fieldPath": ".backoffLimit",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "has(self.params) == has(oldSelf.params)"
        " && (!has(self.params) || self.params == oldSelf.params)",
        "message": "spec.params is immutable: every attempt gets the same input, copied to the"
        " JobLease (create a new LeasedJob)",
        "fieldPath": ".params",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "self.priority == oldSelf.priority",
        "message": "spec.priority is immutable: it is copied to the JobLease (create a new"
        " LeasedJob)",
        "fieldPath": ".priority",
        "reason": "FieldValueForbidden",
    },
    {
        # batch/v1 ElasticIndexedJob (pkg/apis/batch/validation/validation.go,
        # validateCompletions): an Indexed job may change completions only to the
        # new parallelism; a NonIndexed one never.
        "rule": "has(self.completions) == has(oldSelf.completions)"
        " && (!has(self.completions) || self.completions == oldSelf.completions"
        " || (self.completionMode == 'Indexed' && has(self.parallelism)"
        " && self.parallelism == self.completions))",
        "message": "spec.completions can only be modified in tandem with spec.parallelism"
        " (both to the same value), and only with completionMode: Indexed: the indexes"
        " removed are stopped at their JobLeases, and those added get leases of their own",
        "fieldPath": ".completions",
        "reason": "FieldValueInvalid",
    },
    {
        # Stricter than batch/v1, which lets the scale-down through when the
        # rules' indexes fit: CEL cannot walk succeededIndexes, and the webhook
        # that can may be skipped (failurePolicy Ignore). A scale-down it missed
        # would make the running job invalid, and an invalid job is not
        # reconciled: its removed indexes would never be fenced.
        "rule": "!has(self.successPolicy) || !has(self.completions)"
        " || !has(oldSelf.completions) || self.completions >= oldSelf.completions"
        " || self.successPolicy.rules.all(r, !has(r.succeededIndexes))",
        "message": "spec.completions: an Indexed job whose spec.successPolicy names"
        " succeededIndexes cannot be scaled down (it may be scaled up)",
        "fieldPath": ".completions",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "has(self.completions)"
        " || (has(self.parallelism) && self.parallelism > 1)"
        " == (has(oldSelf.parallelism) && oldSelf.parallelism > 1)",
        "message": "spec.parallelism: a job without spec.completions keeps its form: one lease"
        " (parallelism 1) or a work queue of worker slots, each a JobLease of its own"
        " (parallelism above 1); it may change within that form (create a new LeasedJob)",
        "fieldPath": ".parallelism",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "self.completionMode == oldSelf.completionMode",
        "message": "spec.completionMode is immutable (create a new LeasedJob)",
        "fieldPath": ".completionMode",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "has(self.backoffLimitPerIndex) == has(oldSelf.backoffLimitPerIndex)"
        " && (!has(self.backoffLimitPerIndex)"
        " || self.backoffLimitPerIndex == oldSelf.backoffLimitPerIndex)",
        "message": "spec.backoffLimitPerIndex is immutable: it is part of each index's"
        " JobLease cap (spec.maxFencingToken), which can never be raised",
        "fieldPath": ".backoffLimitPerIndex",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "self.completionMode != 'Indexed' || has(self.completions)",
        "message": "an Indexed job needs spec.completions (its number of indexes)",
        "fieldPath": ".completions",
        "reason": "FieldValueRequired",
    },
    {
        "rule": "!has(self.backoffLimitPerIndex) || self.completionMode == 'Indexed'",
        "message": "spec.backoffLimitPerIndex needs spec.completionMode: Indexed",
        "fieldPath": ".backoffLimitPerIndex",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "!has(self.podFailurePolicy) || has(self.backoffLimitPerIndex)"
        " || self.podFailurePolicy.rules.all(r, r.action != 'FailIndex')",
        "message": "spec.podFailurePolicy.rules: the FailIndex action needs"
        " spec.backoffLimitPerIndex (an Indexed job whose indexes fail one by one)",
        "fieldPath": ".podFailurePolicy.rules",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "!has(self.maxFailedIndexes) || (has(self.backoffLimitPerIndex)"
        " && has(self.completions) && self.maxFailedIndexes <= self.completions)",
        "message": "spec.maxFailedIndexes needs spec.backoffLimitPerIndex and cannot exceed"
        " spec.completions",
        "fieldPath": ".maxFailedIndexes",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": "!has(self.podFailurePolicy) || !has(self.podReplacementPolicy)"
        " || self.podReplacementPolicy == 'Failed'",
        "message": "spec.podReplacementPolicy must be Failed when spec.podFailurePolicy is set"
        " (as batch/v1 Job's: a rule judges an attempt's pod once it is terminal)",
        "fieldPath": ".podReplacementPolicy",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": "has(self.successPolicy) == has(oldSelf.successPolicy)"
        " && (!has(self.successPolicy) || self.successPolicy == oldSelf.successPolicy)",
        "message": "spec.successPolicy is immutable (as batch/v1 Job's)",
        "fieldPath": ".successPolicy",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "!has(self.successPolicy) || self.completionMode == 'Indexed'",
        "message": "spec.successPolicy requires spec.completionMode: Indexed",
        "fieldPath": ".successPolicy",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "!has(self.successPolicy) || !has(self.completions)"
        " || self.successPolicy.rules.all(r, !has(r.succeededCount)"
        " || r.succeededCount <= self.completions)",
        "message": "spec.successPolicy.rules[].succeededCount must be less than or equal to"
        " spec.completions",
        "fieldPath": ".successPolicy.rules",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": "has(self.template) == has(oldSelf.template)",
        "message": "spec.template cannot be added or removed: it fixes the JobLease's mode"
        " (Push: the operator claims for the pods it creates; Pull: a worker pool claims),"
        " and the startup bound only a pushed pod has (create a new LeasedJob)",
        "fieldPath": ".template",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "has(self.managedBy) == has(oldSelf.managedBy)"
        " && (!has(self.managedBy) || self.managedBy == oldSelf.managedBy)",
        "message": "spec.managedBy is immutable: the controller that reconciles a job is"
        " chosen once, at create (as batch/v1 Job's)",
        "fieldPath": ".managedBy",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": f'!has(self.managedBy) || self.managedBy.matches("{MANAGED_BY_PATTERN}")',
        "message": "spec.managedBy must be a domain-prefixed path, e.g."
        " leasehold.dev/leasedjob-controller or kueue.x-k8s.io/multikueue",
        "fieldPath": ".managedBy",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": "has(self.selector) == has(oldSelf.selector)"
        " && (!has(self.selector) || self.selector == oldSelf.selector)",
        "message": "spec.selector is immutable (as batch/v1 Job's): it says which pods are"
        " the job's (create a new LeasedJob)",
        "fieldPath": ".selector",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "(has(self.manualSelector) && self.manualSelector)"
        " == (has(oldSelf.manualSelector) && oldSelf.manualSelector)",
        "message": "spec.manualSelector is immutable: it decides whether spec.selector is the"
        " user's or generated (create a new LeasedJob)",
        "fieldPath": ".manualSelector",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "!has(self.selector) || (has(self.manualSelector) && self.manualSelector)",
        "message": "spec.selector: `selector` not auto-generated: without spec.manualSelector:"
        " true the operator generates the selector (leasehold.dev/controller-uid=<uid>, in"
        " status.selector); set manualSelector: true to choose the pods' labels",
        "fieldPath": ".selector",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": "!has(self.manualSelector) || !self.manualSelector || has(self.selector)",
        "message": "spec.selector is required when spec.manualSelector is true",
        "fieldPath": ".selector",
        "reason": "FieldValueRequired",
    },
    {
        "rule": _SELECTOR_MATCHES_TEMPLATE,
        "message": "spec.template.metadata.labels: `selector` does not match template `labels`:"
        " spec.selector must select the pods spec.template makes",
        "fieldPath": ".selector",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": "self.cancel || !oldSelf.cancel",
        "message": "spec.cancel cannot be undone: a cancelled job stays cancelled"
        " (create a new LeasedJob)",
        "fieldPath": ".cancel",
        "reason": "FieldValueForbidden",
    },
]
"""Transition rules of a LeasedJob's spec (docs/lifecycle.md, "Which spec fields may change")."""


class Backoff(ApiModel):
    """The delay before retrying a failed attempt: exponential, capped (as batch/v1 Job's)."""

    model_config = ConfigDict(
        json_schema_extra=cast(
            "JsonDict",
            {
                "x-kubernetes-validations": [
                    {
                        "rule": "self.maxDelaySeconds >= self.initialDelaySeconds",
                        "message": "spec.backoff.maxDelaySeconds must be at least"
                        " spec.backoff.initialDelaySeconds",
                        "fieldPath": ".maxDelaySeconds",
                        "reason": "FieldValueInvalid",
                    }
                ]
            },
        )
    )

    initial_delay_seconds: int = Field(
        default=10,
        ge=0,
        le=MAX_BACKOFF_DELAY_SECONDS,
        description="Delay before the first retry, in seconds (batch Job: 10).",
    )
    factor: float = Field(
        default=2.0,
        ge=1.0,
        le=10.0,
        description="Each further retry waits this many times longer (batch Job: 2).",
    )
    max_delay_seconds: int = Field(
        default=360,
        ge=0,
        le=MAX_BACKOFF_DELAY_SECONDS,
        description="The longest delay between attempts, in seconds (batch Job: 360).",
    )

    def delay_seconds(self, failures: int) -> float:
        """The delay after the ``failures``-th failure (``failures`` >= 1), in seconds."""
        return float(
            min(
                self.initial_delay_seconds * self.factor ** max(0, failures - 1),
                self.max_delay_seconds,
            )
        )


class PodRetention(enum.StrEnum):
    """Which attempt pods the operator keeps (``spec.podRetention``)."""

    LAST = "Last"
    """Fenced-off attempts' pods are deleted; the last attempt's pod is kept."""
    NONE = "None"
    """The last attempt's pod is deleted too, once the job finished."""
    ALL = "All"
    """Every attempt's pod that ended is kept; only still-running fenced-off ones go."""


class PodReplacementPolicy(enum.StrEnum):
    """When the next attempt's pod may be created (batch/v1 Job's podReplacementPolicy)."""

    TERMINATING_OR_FAILED = "TerminatingOrFailed"
    """As soon as the lease allows a new claim, while an earlier attempt's pod may
    still be terminating (its writes are fenced all the same)."""
    FAILED = "Failed"
    """Only once every earlier attempt's pod is terminal (gone, or phase Succeeded or
    Failed): never two pods of the job (of an index) at once."""


class CompletionMode(enum.StrEnum):
    """How a job with several completions tells them apart (batch/v1 Job's names)."""

    NON_INDEXED = "NonIndexed"
    """The completions are alike: the job succeeds after ``completions`` successes."""
    INDEXED = "Indexed"
    """Each completion has an index ``0..completions-1``, its own JobLease (fencing
    domain) and attempts; the pod gets the index as ``JOB_COMPLETION_INDEX``."""


class FailureAction(enum.StrEnum):
    """What a ``podFailurePolicy`` rule does with an attempt it matches (batch/v1 Job's)."""

    FAIL_JOB = "FailJob"
    """The job fails at once, whatever budget is left (reason ``PodFailurePolicy``); in an
    Indexed job, the whole job, as batch/v1's."""
    FAIL_INDEX = "FailIndex"
    """Indexed jobs with ``backoffLimitPerIndex`` only: the attempt's index fails at once,
    whatever its budget (it counts towards ``maxFailedIndexes``), as batch/v1's."""
    IGNORE = "Ignore"
    """The attempt draws on no budget (not ``backoffLimit``, not ``maxAttempts``)."""
    COUNT = "Count"
    """The default: a failure counts against ``backoffLimit``, a reclaim ``maxAttempts``."""


class ExitCodeOperator(enum.StrEnum):
    """How ``onExitCodes.values`` are matched against the exit codes."""

    IN = "In"
    NOT_IN = "NotIn"


CONTAINER_NAME_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class OnExitCodes(ApiModel):
    """A rule's requirement on the attempt's exit codes (batch/v1 Job's onExitCodes)."""

    model_config = ConfigDict(
        json_schema_extra=cast(
            "JsonDict",
            {
                "x-kubernetes-validations": [
                    {
                        "rule": "self.operator != 'In' || !(0 in self.values)",
                        "message": "spec.podFailurePolicy.rules[].onExitCodes.values: 0 cannot"
                        " be used with the In operator (exit code 0 is never a failure)",
                        "fieldPath": ".values",
                        "reason": "FieldValueInvalid",
                    },
                    {
                        "rule": "self.values.isSorted()",
                        "message": "spec.podFailurePolicy.rules[].onExitCodes.values must be"
                        " sorted in increasing order",
                        "fieldPath": ".values",
                        "reason": "FieldValueInvalid",
                    },
                ]
            },
        )
    )

    container_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=63,
        pattern=CONTAINER_NAME_PATTERN,
        description="Only this container's exit code is checked; when absent, every"
        " container's (and the worker's reported one).",
    )
    operator: ExitCodeOperator = Field(
        description="In: matches when an exit code is one of values. NotIn: when an exit code"
        " is none of them. Exit code 0 is never checked."
    )
    values: list[Annotated[int, Field(ge=0, le=255)]] = Field(
        min_length=1,
        max_length=MAX_EXIT_CODE_VALUES,
        json_schema_extra={"x-kubernetes-list-type": "set"},
        description="Exit codes (0-255), sorted, without duplicates; at most 255.",
    )


class OnPodCondition(ApiModel):
    """A pattern matched against the attempt pod's conditions (batch/v1 Job's)."""

    type: str = Field(
        min_length=1,
        max_length=316,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
        r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
        description="A pod condition type, e.g. DisruptionTarget.",
    )
    status: ConditionStatus = Field(
        default=ConditionStatus.TRUE,
        description="The condition's status to match: True (the default), False or Unknown.",
    )


class FailureRule(ApiModel):
    """One rule: an action for the attempts matching exit codes or pod conditions."""

    model_config = ConfigDict(
        json_schema_extra=cast(
            "JsonDict",
            {
                "x-kubernetes-validations": [
                    {
                        "rule": "has(self.onExitCodes) != has(self.onPodConditions)",
                        "message": "each spec.podFailurePolicy.rules[] entry needs exactly one"
                        " of onExitCodes and onPodConditions",
                        "reason": "FieldValueInvalid",
                    }
                ]
            },
        )
    )

    action: FailureAction = Field(
        description="FailJob: fail the job at once. Ignore: the attempt uses no budget and a"
        " new one starts. Count: the default handling (backoffLimit for a failure,"
        " maxAttempts for a reclaim)."
    )
    on_exit_codes: OnExitCodes | None = Field(
        default=None, description="Match on the attempt's exit codes."
    )
    on_pod_conditions: list[OnPodCondition] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_FAILURE_RULES,
        description="Match when the attempt's pod has one of these conditions (at most 20).",
    )


class PodFailurePolicy(ApiModel):
    """How attempts that end without success are handled, as batch/v1 Job's."""

    rules: list[FailureRule] = Field(
        max_length=MAX_FAILURE_RULES,
        description="Checked in order for each attempt that ends with a Failed completion or"
        " without one; the first match decides (at most 20). With no match: a pod with"
        " DisruptionTarget=True (eviction, preemption, node shutdown) is not counted, any"
        " other failure counts. An attempt whose lease was lost (exit code 75 from"
        " leasehold run) is a reclaim: its exit code is not checked.",
    )


class SuccessPolicyRule(ApiModel):
    """One rule of ``spec.successPolicy`` (batch/v1 Job's SuccessPolicyRule).

    The rule is met when every index of ``succeededIndexes`` succeeded, or,
    with ``succeededCount``, when that many of them did (without
    ``succeededIndexes``: that many indexes of the job).
    """

    model_config = ConfigDict(
        json_schema_extra=cast(
            "JsonDict",
            {
                "x-kubernetes-validations": [
                    {
                        "rule": "has(self.succeededIndexes) || has(self.succeededCount)",
                        "message": "each spec.successPolicy.rules[] entry needs at least one of"
                        " succeededCount or succeededIndexes",
                        "reason": "FieldValueRequired",
                    }
                ]
            },
        )
    )

    succeeded_indexes: str | None = Field(
        default=None,
        max_length=MAX_SUCCEEDED_INDEXES_LENGTH,
        pattern=r"^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$",
        description='Indexes that must succeed, as ranges ("1,3-5,7"): increasing, not'
        " overlapping, each below spec.completions (checked by the operator, which reports"
        " a breach as Ready=False/InvalidSpec).",
    )
    succeeded_count: int | None = Field(
        default=None,
        ge=0,
        le=MAX_COMPLETIONS,
        description="How many indexes (of succeededIndexes, if given) must succeed; at most"
        " spec.completions and the number of succeededIndexes.",
    )


class SuccessPolicy(ApiModel):
    """When an Indexed job succeeds before every index ran (batch/v1 Job's successPolicy)."""

    rules: list[SuccessPolicyRule] = Field(
        min_length=1,
        max_length=MAX_SUCCESS_POLICY_RULES,
        description="The job succeeds when any rule is met (checked in order; at most 20);"
        " the unfinished indexes' leases are then stopped.",
    )


LABEL_KEY_PATTERN: Final = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$"
)
"""A label key: an optional DNS-subdomain prefix and ``/``, then a name (a qualified name)."""
_CEL_LABEL_KEY_PATTERN: Final = LABEL_KEY_PATTERN.replace("\\", "\\\\")
"""The same, its backslashes escaped for a CEL string."""
MAX_LABEL_KEY_LENGTH: Final = 317
"""A prefix of at most 253 characters, ``/``, a name of at most 63."""
LABEL_VALUE_PATTERN: Final = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
MAX_SELECTOR_TERMS: Final = 32
"""Entries in ``matchLabels``, in ``matchExpressions``, and values of one expression."""
MAX_SELECTOR_LENGTH: Final = 128 * 1024
"""The longest ``status.selector`` text: every term of a selector at its limits fits (about
88,000 characters: 32 labels and 32 expressions of 32 values, each at its longest)."""

LabelKey = Annotated[
    str, Field(min_length=1, max_length=MAX_LABEL_KEY_LENGTH, pattern=LABEL_KEY_PATTERN)
]
LabelValue = Annotated[str, Field(max_length=MAX_LABEL_VALUE_LENGTH, pattern=LABEL_VALUE_PATTERN)]


class SelectorOperator(enum.StrEnum):
    """How a ``matchExpressions`` entry relates its key to its values (metav1's)."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class LabelSelectorRequirement(ApiModel):
    """One ``matchExpressions`` entry (``metav1.LabelSelectorRequirement``)."""

    model_config = ConfigDict(
        json_schema_extra=cast(
            "JsonDict",
            {
                "x-kubernetes-validations": [
                    {
                        "rule": "(self.operator == 'In' || self.operator == 'NotIn')"
                        " == (has(self.values) && size(self.values) > 0)",
                        "message": "spec.selector.matchExpressions[].values: must be specified"
                        " when operator is In or NotIn, and empty when it is Exists or"
                        " DoesNotExist",
                        "fieldPath": ".values",
                        "reason": "FieldValueInvalid",
                    }
                ]
            },
        )
    )

    key: LabelKey = Field(description="The label key the expression applies to.")
    operator: SelectorOperator = Field(description="In, NotIn, Exists or DoesNotExist.")
    values: list[LabelValue] | None = Field(
        default=None,
        max_length=MAX_SELECTOR_TERMS,
        description="In and NotIn: the values (at least one); Exists and DoesNotExist: none.",
    )

    def matches(self, labels: dict[str, str]) -> bool:
        """Whether ``labels`` meet this requirement (``labels.Requirement.Matches``)."""
        present = self.key in labels
        if self.operator == SelectorOperator.IN:
            return present and labels[self.key] in (self.values or [])
        if self.operator == SelectorOperator.NOT_IN:
            return not present or labels[self.key] not in (self.values or [])
        if self.operator == SelectorOperator.EXISTS:
            return present
        return not present

    def term(self) -> str:
        """This requirement in the string form of a label selector (``k in (a,b)``, ``!k``)."""
        values = ",".join(sorted(set(self.values or [])))
        if self.operator == SelectorOperator.IN:
            return f"{self.key} in ({values})"
        if self.operator == SelectorOperator.NOT_IN:
            return f"{self.key} notin ({values})"
        if self.operator == SelectorOperator.EXISTS:
            return self.key
        return f"!{self.key}"


class LabelSelector(ApiModel):
    """A label query over pods (``metav1.LabelSelector``): every term must hold.

    An empty selector selects every pod, as metav1's does.
    """

    model_config = ConfigDict(
        json_schema_extra=cast(
            "JsonDict",
            {
                "x-kubernetes-validations": [
                    {
                        "rule": "!has(self.matchLabels) || self.matchLabels.all(k,"
                        f" size(k) <= {MAX_LABEL_KEY_LENGTH}"
                        f' && k.matches("{_CEL_LABEL_KEY_PATTERN}"))',
                        "message": "spec.selector.matchLabels: each key must be a label key"
                        " (an optional DNS subdomain prefix and '/', then a name of"
                        " alphanumerics, '-', '_' or '.')",
                        "fieldPath": ".matchLabels",
                        "reason": "FieldValueInvalid",
                    }
                ]
            },
        )
    )

    match_labels: dict[str, LabelValue] | None = Field(
        default=None,
        json_schema_extra={"maxProperties": MAX_SELECTOR_TERMS},
        description="Labels the pods must have with these values (at most 32).",
    )
    match_expressions: list[LabelSelectorRequirement] | None = Field(
        default=None,
        max_length=MAX_SELECTOR_TERMS,
        description="Requirements on the pods' labels (at most 32).",
    )

    def matches(self, labels: dict[str, str]) -> bool:
        """Whether a pod with ``labels`` is selected (``LabelSelectorAsSelector(...).Matches``).

        Args:
            labels: the pod's (the template's) labels.

        Returns:
            ``True`` when every ``matchLabels`` entry and every expression holds.
        """
        return all(labels.get(k) == v for k, v in (self.match_labels or {}).items()) and all(
            e.matches(labels) for e in self.match_expressions or []
        )

    def to_string(self) -> str:
        """The selector as text (``labels.Selector.String()``), as ``status.selector`` holds it.

        Returns:
            Terms sorted by key, joined by commas: ``k=v``, ``k in (a,b)``,
            ``k notin (a,b)``, ``k``, ``!k``; ``""`` for the empty selector.
        """
        terms = [(k, f"{k}={v}") for k, v in (self.match_labels or {}).items()]
        terms += [(e.key, e.term()) for e in self.match_expressions or []]
        return ",".join(term for _, term in sorted(terms, key=lambda t: t[0]))


class LeasedJobSpec(ApiModel):
    """What to run, and how long a worker may stall before it is replaced."""

    model_config = ConfigDict(
        json_schema_extra=cast("JsonDict", {"x-kubernetes-validations": _JOB_RULES})
    )

    @field_validator("params")
    @classmethod
    def _params_fit(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        """``spec.params`` is at most :data:`MAX_PARAMS_BYTES` as compact JSON."""
        if value is not None:
            size = params_size(value)
            if size > MAX_PARAMS_BYTES:
                raise ValueError(
                    f"spec.params is {size} bytes as JSON; at most {MAX_PARAMS_BYTES} are allowed"
                )
        return value

    @model_validator(mode="after")
    def _success_policy_indexes(self) -> LeasedJobSpec:
        """``succeededIndexes`` parse against ``completions``, as batch/v1 checks them.

        CEL cannot walk the intervals, so the API server checks only their
        form; the operator checks the rest here and reports a breach on the
        job (``Ready=False``, ``InvalidSpec``).
        """
        if self.success_policy is None:
            return self
        for i, rule in enumerate(self.success_policy.rules):
            if rule.succeeded_indexes is None:
                continue
            where = f"spec.successPolicy.rules[{i}]"
            try:
                intervals = parse_intervals(rule.succeeded_indexes, self.completions or 1)
            except ValueError as exc:
                raise ValueError(
                    f"{where}.succeededIndexes: error parsing succeededIndexes: {exc}"
                ) from exc
            total = interval_total(intervals)
            if rule.succeeded_count is not None and rule.succeeded_count > total:
                raise ValueError(
                    f"{where}.succeededCount: must be less than or equal to {total} (the"
                    " number of indexes in the specified succeededIndexes field)"
                )
        return self

    @model_validator(mode="after")
    def _selector_rules(self) -> LeasedJobSpec:
        """The CRD's selector rules, checked again by the operator before it acts.

        As batch/v1's ``ValidateGeneratedSelector`` and ``ValidateJobSpec``: a
        selector only with ``manualSelector: true``, and then one that selects
        the template's labels. A job stored before the CRD had these rules is
        reported (``Ready=False``, ``InvalidSpec``), never run with them broken.
        """
        manual = bool(self.manual_selector)
        if self.selector is not None and not manual:
            raise ValueError("spec.selector: `selector` not auto-generated")
        if manual and self.selector is None:
            raise ValueError("spec.selector: Required value (spec.manualSelector is true)")
        if self.selector is not None:
            meta = self.template.metadata if self.template is not None else None
            if not self.selector.matches((meta.labels if meta else None) or {}):
                raise ValueError(
                    "spec.template.metadata.labels: `selector` does not match template `labels`"
                )
        return self

    template: PodTemplate | None = Field(
        default=None,
        description="Pod to run for each attempt (push mode). Without it the job waits for"
        " a worker pool to claim its lease (pull mode).",
    )
    lease_duration_seconds: int = Field(
        default=30,
        ge=1,
        le=MAX_LEASE_DURATION_SECONDS,
        description="How long a worker may go without renewing before its lease is reclaimed."
        " Immutable: copied to the JobLease, whose duration every worker uses.",
    )
    max_attempts: int = Field(
        default=3,
        ge=1,
        le=MAX_ATTEMPTS,
        description="Attempts the job may make, not counting those retried after a worker"
        " failure (backoffLimit): the reclaim budget; each reclaim (an expired lease, a"
        " startup deadline) uses one. Immutable: with backoffLimit, copied to the JobLease as"
        " spec.maxFencingToken.",
    )
    backoff_limit: int = Field(
        default=0,
        ge=0,
        le=MAX_BACKOFF_LIMIT,
        description="Worker failures (a Failed completion, e.g. a non-zero exit) retried"
        " before the job fails, as batch/v1 Job's backoffLimit; reclaims do not count."
        " Default 0: a failure fails the job (batch Job's default is 6). Immutable.",
    )
    backoff: Backoff = Field(
        default_factory=Backoff,
        json_schema_extra={
            "default": {"initialDelaySeconds": 10, "factor": 2.0, "maxDelaySeconds": 360}
        },
        description="Exponential delay before retrying a failed attempt.",
    )
    pod_failure_policy: PodFailurePolicy | None = Field(
        default=None,
        description="Rules on exit codes and pod conditions deciding whether an attempt that"
        " ended without success fails the job, is ignored, or counts (batch/v1 Job's"
        " podFailurePolicy).",
    )
    startup_deadline_seconds: int = Field(
        default=DEFAULT_STARTUP_DEADLINE_SECONDS,
        ge=1,
        le=MAX_STARTUP_DEADLINE_SECONDS,
        description="Push mode: how long an attempt may take from its claim to its first"
        " renewal or its pod running (scheduling, image pull, init containers) before it"
        " is reclaimed as StartupDeadlineExceeded. The lease duration only counts from"
        " then. Immutable: copied to the JobLease.",
    )
    active_deadline_seconds: int | None = Field(
        default=None,
        ge=1,
        le=MAX_ACTIVE_DEADLINE_SECONDS,
        description="Fail the job when it has run this long since it was created (API server"
        " clock). May be changed: the operator's timer follows the new value.",
    )
    suspend: bool = Field(
        default=False,
        description="As batch/v1 Job's: true keeps the job from running (a queue such as Kueue"
        " admits it by setting false). A job created suspended creates no pod; suspending a"
        " running job ends its attempt fenced (the lease is released at once, so the"
        " attempt's late writes carry a stale token) and deletes its pod; resuming starts a"
        " new attempt under a higher token. Suspended attempts use neither maxAttempts nor"
        " backoffLimit.",
    )
    params: dict[str, Any] | None = Field(
        default=None,
        json_schema_extra={
            "x-kubernetes-preserve-unknown-fields": True,
            "maxProperties": MAX_PARAMS_PROPERTIES,
        },
        description="Pull mode: the job's input, any JSON object (at most 256 keys and 32 KiB"
        " as JSON), handed to the worker that claims it (LeaseHolder.params in the SDK)."
        " Copied to the JobLease. Immutable: every attempt gets the same input.",
    )
    priority: int = Field(
        default=0,
        ge=-MAX_PRIORITY,
        le=MAX_PRIORITY,
        description="Pull mode: a pool's claim_any takes the highest first (ties: the oldest"
        " job first). Between -1000000 and 1000000; default 0. Immutable (copied to the"
        " JobLease).",
    )
    pod_retention: PodRetention = Field(
        default=PodRetention.LAST,
        description="Which attempts' pods are kept. Last (default): an attempt's pod is"
        " deleted as soon as the attempt is fenced off (reclaimed, retried, suspended,"
        " stopped) and the last attempt's pod is kept for kubectl logs. None: the last one is"
        " deleted too once the job finished. All: every pod that ended is kept (a fenced-off"
        " pod still running is deleted all the same).",
    )
    pod_replacement_policy: PodReplacementPolicy | None = Field(
        default=None,
        description="As batch/v1 Job's: when the next attempt (a retry after a failure, a"
        " reclaim, an eviction) may create its pod. TerminatingOrFailed: as soon as its lease"
        " is claimed, while the earlier attempt's pod may still be terminating. Failed: only"
        " once every earlier attempt's pod is terminal (gone, or phase Succeeded or Failed),"
        " so two pods of the job (of an index) never run at once (GPUs, hostPorts). The earlier"
        " attempt is fenced either way. Unset: Failed when spec.podFailurePolicy is set, else"
        " TerminatingOrFailed; with spec.podFailurePolicy it must be Failed.",
    )
    ttl_seconds_after_finished: int | None = Field(
        default=None,
        ge=0,
        le=MAX_TTL_SECONDS_AFTER_FINISHED,
        description="As batch/v1 Job's: delete the job (and its pods) this many seconds after"
        " it finished (Succeeded or Failed, cancelled included). Unset: kept until deleted."
        " Its JobLease stays (the name's fencing domain), so a job created again under the"
        " name never reuses a token. May be changed.",
    )
    completions: int | None = Field(
        default=None,
        ge=1,
        le=MAX_COMPLETIONS,
        description="How many completions the job needs (batch/v1 Job's). Unset or 1: one"
        " lease, as always. More: one JobLease per completion (named <job>.<index>), each"
        " its own fencing domain with its own attempts. Immutable, but for an Indexed job"
        " that changes it together with spec.parallelism to the same value (batch/v1's"
        " elastic Indexed Job): the indexes removed are stopped (their workers fenced) and"
        " not counted; those added start.",
    )
    parallelism: int | None = Field(
        default=None,
        ge=1,
        le=MAX_COMPLETIONS,
        json_schema_extra={"default": 1},
        description="At most this many completions held (running) at once; default 1, as"
        " batch/v1 Job's. May change (also through the scale subresource: kubectl scale"
        " --replicas): it bounds the next claims, never stops a held one."
        " Above 1 without completions: a work queue (batch/v1's): that many worker slots,"
        " each a JobLease of its own (<job>.<slot>); the first slot that succeeds ends the"
        " job once no slot is held, and no slot starts again after it. Without completions"
        " it cannot move between 1 and above 1.",
    )
    completion_mode: CompletionMode = Field(
        default=CompletionMode.NON_INDEXED,
        json_schema_extra={"default": "NonIndexed"},
        description="NonIndexed or Indexed (each index gets JOB_COMPLETION_INDEX and"
        " LEASEHOLD_COMPLETION_INDEX, and its own fencing domain). Immutable.",
    )
    backoff_limit_per_index: int | None = Field(
        default=None,
        ge=0,
        le=MAX_BACKOFF_LIMIT,
        description="Indexed jobs: worker failures retried within each index before that"
        " index fails (batch/v1 Job's); the other indexes run on. Unset: spec.backoffLimit"
        " counts failures over the whole job. Immutable.",
    )
    max_failed_indexes: int | None = Field(
        default=None,
        ge=0,
        le=MAX_COMPLETIONS,
        description="Indexed jobs with backoffLimitPerIndex: when more indexes than this"
        " have failed, the job fails at once and its running indexes are stopped. Unset:"
        " every index runs, and the job fails at the end if any index failed.",
    )
    managed_by: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_MANAGED_BY_LENGTH,
        description="The controller that reconciles this job, as batch/v1 Job's managedBy:"
        " unset or leasehold.dev/leasedjob-controller is this operator; any other value"
        " (a domain-prefixed path, at most 63 characters, e.g. kueue.x-k8s.io/multikueue)"
        " hands the job to that controller, and this operator leaves it alone (no lease,"
        " no pods, no status, no Events). Immutable.",
    )
    success_policy: SuccessPolicy | None = Field(
        default=None,
        description="Indexed jobs: succeed early once a rule is met (batch/v1 Job's"
        " successPolicy): the job gets SuccessCriteriaMet (reason SuccessPolicy), the"
        " unfinished indexes' leases are stopped (their workers' writes refused from then"
        " on) and their pods deleted, then Complete once no pod of the job runs. Immutable.",
    )
    manual_selector: bool | None = Field(
        default=None,
        description="As batch/v1 Job's: true lets spec.selector choose the job's pods by the"
        " template's own labels; unset or false: the operator generates the selector"
        " (leasehold.dev/controller-uid=<uid>, in status.selector) and spec.selector must be"
        " unset. Either way a pod is the job's only when this LeasedJob is its controller"
        " owner: a pod the operator did not create is never adopted nor counted. Immutable.",
    )
    selector: LabelSelector | None = Field(
        default=None,
        description="With manualSelector: true, the label query over the job's pods"
        " (matchLabels, matchExpressions); it must select the template's labels. Shown as"
        " text in status.selector (the scale subresource's selector). Immutable.",
    )
    cancel: bool = Field(
        default=False,
        description="Set to true to stop the job for good: it fails with reason Cancelled and"
        " its lease is stopped at once, so the running attempt's late writes carry a stale"
        " token. Cannot be undone.",
    )


class AttemptReason(enum.StrEnum):
    """Why an attempt ended (``status.attemptHistory[].reason``)."""

    SUCCEEDED = "Succeeded"
    """The worker completed with Succeeded."""
    FAILED = "Failed"
    """The worker completed with Failed (e.g. a non-zero exit)."""
    RECLAIMED = "Reclaimed"
    """The lease was taken back (expired) or given up without a completion."""
    STARTUP_DEADLINE_EXCEEDED = "StartupDeadlineExceeded"
    """The attempt never started within ``startupDeadlineSeconds``."""
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    """The job's ``activeDeadlineSeconds`` passed while the attempt ran."""
    CANCELLED = "Cancelled"
    """The job was cancelled while the attempt ran."""
    SUSPENDED = "Suspended"
    """The job was suspended while the attempt ran (no budget used)."""
    EVICTED = "Evicted"
    """The pod was disrupted (``DisruptionTarget``: eviction, preemption, node
    shutdown); the attempt drew on no budget."""


class AttemptRecord(ApiModel):
    """One attempt (one claim, one fencing token) of a LeasedJob."""

    fencing_token: int = Field(ge=1, description="The token the attempt ran under.")
    pod_name: str = Field(
        max_length=253, description="The attempt's pod (push mode) or worker id (pull mode)."
    )
    pod_uid: str | None = Field(
        default=None, alias="podUID", max_length=64, description="The pod's UID."
    )
    node_name: str | None = Field(
        default=None, max_length=253, description="The node the pod was bound to."
    )
    start_time: datetime | None = Field(
        default=None, description="When the lease was claimed for the attempt."
    )
    end_time: datetime | None = Field(
        default=None, description="When the operator saw the attempt end; absent while it runs."
    )
    exit_code: int | None = Field(
        default=None, ge=-255, le=255, description="The worker's exit code, when known."
    )
    reason: AttemptReason | None = Field(
        default=None, description="Why the attempt ended; absent while it runs."
    )


class LeasedJobStatus(ApiModel):
    """What the operator reports of a LeasedJob."""

    phase: Phase | None = None
    observed_generation: int | None = Field(default=None, ge=0)
    conditions: list[Condition] | None = Field(
        default=None,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    lease_name: str | None = Field(default=None, max_length=253)
    holder_identity: str | None = Field(default=None, max_length=253)
    fencing_token: int | None = Field(default=None, ge=0)
    pod_name: str | None = Field(
        default=None, max_length=253, description="The pod of the latest attempt (push mode)."
    )
    attempts: int | None = Field(default=None, ge=0)
    failed: int | None = Field(
        default=None,
        ge=0,
        description="Attempts that ended with a Failed completion counted against backoffLimit.",
    )
    next_attempt_after: datetime | None = Field(
        default=None,
        description="A failed attempt is being retried: the next one starts after this time"
        " (the operator's clock; spec.backoff).",
    )
    start_time: datetime | None = None
    completion_time: datetime | None = None
    completion: CompletionRecord | None = None
    attempt_history: list[AttemptRecord] | None = Field(
        default=None,
        max_length=MAX_ATTEMPT_HISTORY,
        description="The last attempts, oldest first (at most 10).",
    )
    last_attempt_reason: AttemptReason | None = Field(
        default=None, description="Why the latest attempt ended (a printer column)."
    )
    active: int | None = Field(
        default=None,
        ge=0,
        description="Jobs with several completions (or work-queue slots): indexes whose"
        " lease is held now.",
    )
    succeeded: int | None = Field(
        default=None,
        ge=0,
        description="Jobs with several completions (or work-queue slots): indexes that succeeded.",
    )
    ready: int | None = Field(
        default=None,
        ge=0,
        description="Push mode: the job's pods that are active (not terminal, not being"
        " deleted) and have the condition Ready=True (batch/v1 Job's status.ready).",
    )
    terminating: int | None = Field(
        default=None,
        ge=0,
        description="Push mode: the job's pods being deleted (deletionTimestamp set) that are"
        " not terminal yet (batch/v1 Job's status.terminating).",
    )
    completed_indexes: str | None = Field(
        default=None,
        max_length=MAX_INDEX_LIST_LENGTH,
        description='Indexed jobs: the indexes that succeeded, as ranges ("1,3-5,7").',
    )
    failed_indexes: str | None = Field(
        default=None,
        max_length=MAX_INDEX_LIST_LENGTH,
        description='Indexed jobs: the indexes that failed for good, as ranges ("1,3-5,7").',
    )
    selector: str | None = Field(
        default=None,
        max_length=MAX_SELECTOR_LENGTH,
        description="The job's pods as a label selector in text form (batch/v1's"
        " spec.selector, as the scale subresource's labelSelectorPath needs it):"
        " leasehold.dev/controller-uid=<uid>, or spec.selector when manualSelector is true.",
    )
    workload: str | None = Field(
        default=None,
        max_length=253,
        description="Queued by Kueue: the name of the Workload the operator made for the job,"
        " kept until that Workload is deleted (so a job whose queue label was removed still"
        " has its Workload retired before it runs unqueued).",
    )
    completion_progress: str | None = Field(
        default=None,
        max_length=32,
        description='Jobs with several completions: succeeded/completions, e.g. "7/10"'
        " (the Completions printer column).",
    )


class LeasedJob(ApiModel):
    """A ``LeasedJob`` object: a job run under an expiring, fenced lease."""

    api_version: Literal["leasehold.dev/v1alpha1"] = "leasehold.dev/v1alpha1"
    kind: Literal["LeasedJob"] = "LeasedJob"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: LeasedJobSpec
    status: LeasedJobStatus | None = None
