"""The resources, as pydantic models: the single source of truth of the CRDs.

Why this package exists: ``JobLease``, ``LeasedJob`` and ``LeasedCronJob`` are
defined here, one module per kind, as kubebuilder keeps one
``api/<version>/<kind>_types.go`` per kind: a reader finds a field by its
resource's name. The CRD YAML in ``deploy/crds/`` is generated from these
models by :mod:`~leasehold.lease.api.crds` (``make crds``), and a test fails
when the checked-in YAML differs. The operator and the worker SDK parse API
bodies with the same models, so what the API server validates and what the
code expects cannot drift apart.

* :mod:`~leasehold.lease.api.common` — what several kinds share: the base
  model, conditions, the completion record, names and limits;
* :mod:`~leasehold.lease.api.joblease` — the lease record, with the CEL
  transition rules of the protocol;
* :mod:`~leasehold.lease.api.leasedjob` — what to run;
* :mod:`~leasehold.lease.api.leasedcronjob` — LeasedJobs on a schedule;
* :mod:`~leasehold.lease.api.crds` — the generator (not re-exported here).

Import the types from this package (``from leasehold.lease.api import
LeasedJob``): each is defined in one module and re-exported here, which is the
public surface. Field names follow the Kubernetes API conventions
(``holderIdentity``, ``leaseDurationSeconds``, ``observedGeneration``,
``conditions``); Python attributes are their snake_case twins (aliases are
camelCase).
"""

from leasehold.lease.api.common import (
    DNS_SUBDOMAIN_PATTERN,
    HOLDER_PATTERN,
    MAX_ATTEMPTS,
    MAX_BACKOFF_LIMIT,
    MAX_LEASE_DURATION_SECONDS,
    MAX_PRIORITY,
    MAX_STARTUP_DEADLINE_SECONDS,
    UID_PATTERN,
    ApiModel,
    CompletionRecord,
    Condition,
    ConditionStatus,
    HolderName,
    Message,
    ObjectName,
    ObjectUID,
    PodTemplateMetadata,
)
from leasehold.lease.api.joblease import (
    MAX_UNCOUNTED_ATTEMPTS,
    REARM,
    JobLease,
    JobLeaseSpec,
    JobLeaseStatus,
    LeaseMode,
)
from leasehold.lease.api.leasedcronjob import (
    MAX_CRON_NAME_LENGTH,
    MAX_HISTORY_LIMIT,
    RUN_UNCOUNTED_ROOM,
    ConcurrencyPolicy,
    LeasedCronJob,
    LeasedCronJobSpec,
    LeasedCronJobStatus,
    LeasedJobTemplate,
    LeasedJobTemplateSpec,
    RunReference,
)
from leasehold.lease.api.leasedjob import (
    CONTAINER_NAME_PATTERN,
    DEFAULT_STARTUP_DEADLINE_SECONDS,
    MAX_ACTIVE_DEADLINE_SECONDS,
    MAX_ATTEMPT_HISTORY,
    MAX_BACKOFF_DELAY_SECONDS,
    MAX_COMPLETIONS,
    MAX_EXIT_CODE_VALUES,
    MAX_FAILURE_RULES,
    MAX_INDEX_LIST_LENGTH,
    MAX_JOB_NAME_LENGTH,
    MAX_PARAMS_BYTES,
    MAX_PARAMS_PROPERTIES,
    MAX_TTL_SECONDS_AFTER_FINISHED,
    AttemptReason,
    AttemptRecord,
    Backoff,
    CompletionMode,
    ExitCodeOperator,
    FailureAction,
    FailureRule,
    LabelSelector,
    LabelSelectorRequirement,
    LeasedJob,
    LeasedJobSpec,
    LeasedJobStatus,
    OnExitCodes,
    OnPodCondition,
    Phase,
    PodFailurePolicy,
    PodReplacementPolicy,
    PodRetention,
    PodTemplate,
    SelectorOperator,
)

__all__ = [
    "CONTAINER_NAME_PATTERN",
    "DEFAULT_STARTUP_DEADLINE_SECONDS",
    "DNS_SUBDOMAIN_PATTERN",
    "HOLDER_PATTERN",
    "MAX_ACTIVE_DEADLINE_SECONDS",
    "MAX_ATTEMPTS",
    "MAX_ATTEMPT_HISTORY",
    "MAX_BACKOFF_DELAY_SECONDS",
    "MAX_BACKOFF_LIMIT",
    "MAX_COMPLETIONS",
    "MAX_CRON_NAME_LENGTH",
    "MAX_EXIT_CODE_VALUES",
    "MAX_FAILURE_RULES",
    "MAX_HISTORY_LIMIT",
    "MAX_INDEX_LIST_LENGTH",
    "MAX_JOB_NAME_LENGTH",
    "MAX_LEASE_DURATION_SECONDS",
    "MAX_PARAMS_BYTES",
    "MAX_PARAMS_PROPERTIES",
    "MAX_PRIORITY",
    "MAX_STARTUP_DEADLINE_SECONDS",
    "MAX_TTL_SECONDS_AFTER_FINISHED",
    "MAX_UNCOUNTED_ATTEMPTS",
    "REARM",
    "RUN_UNCOUNTED_ROOM",
    "UID_PATTERN",
    "ApiModel",
    "AttemptReason",
    "AttemptRecord",
    "Backoff",
    "CompletionMode",
    "CompletionRecord",
    "ConcurrencyPolicy",
    "Condition",
    "ConditionStatus",
    "ExitCodeOperator",
    "FailureAction",
    "FailureRule",
    "HolderName",
    "JobLease",
    "JobLeaseSpec",
    "JobLeaseStatus",
    "LabelSelector",
    "LabelSelectorRequirement",
    "LeaseMode",
    "LeasedCronJob",
    "LeasedCronJobSpec",
    "LeasedCronJobStatus",
    "LeasedJob",
    "LeasedJobSpec",
    "LeasedJobStatus",
    "LeasedJobTemplate",
    "LeasedJobTemplateSpec",
    "Message",
    "ObjectName",
    "ObjectUID",
    "OnExitCodes",
    "OnPodCondition",
    "Phase",
    "PodFailurePolicy",
    "PodReplacementPolicy",
    "PodRetention",
    "PodTemplate",
    "PodTemplateMetadata",
    "RunReference",
    "SelectorOperator",
]
