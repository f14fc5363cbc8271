"""What the resources share: the base model, conditions, completions, names and limits.

Why this module exists: each resource has its own module (:mod:`.joblease`,
:mod:`.leasedjob`, :mod:`.leasedcronjob`), as kubebuilder keeps one
``api/<version>/<kind>_types.go`` per kind. What more than one kind uses lives
here, once: the base model (camelCase aliases, unknown fields kept), the
conditions of every status, the completion record a JobLease stores and a
LeasedJob reports, the pod-template metadata a LeasedJob and a LeasedCronJob
copy, the name patterns, and the limits a JobLease copies from its job.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Annotated, Any, Final

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from leasehold.lease.leaseops import MAX_MESSAGE_LENGTH
from leasehold.lease.protocol import Outcome

MAX_LEASE_DURATION_SECONDS: Final = 3600
"""The longest lease: an hour. Longer leases make stalls cost too much."""
MAX_ATTEMPTS: Final = 100
MAX_BACKOFF_LIMIT: Final = 100
MAX_STARTUP_DEADLINE_SECONDS: Final = 24 * 3600
MAX_LABEL_VALUE_LENGTH: Final = 63
"""A label value's longest (apimachinery ``IsValidLabelValue``)."""
MAX_PRIORITY: Final = 1_000_000
"""``spec.priority`` lies within plus or minus this."""

DNS_SUBDOMAIN_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
"""RFC 1123 subdomain, as Kubernetes object names are."""

HOLDER_PATTERN: Final = r"^[A-Za-z0-9]([-A-Za-z0-9_.:@]*[A-Za-z0-9])?$"
"""A holder identity: a pod name, or a pull-mode worker id such as ``host:1234``."""

HolderName = Annotated[str, Field(min_length=1, max_length=253, pattern=HOLDER_PATTERN)]
ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)]
Message = Annotated[str, Field(max_length=MAX_MESSAGE_LENGTH)]

UID_PATTERN: Final = r"^[0-9a-fA-F-]{1,64}$"
"""A Kubernetes object UID (a UUID)."""
ObjectUID = Annotated[str, Field(min_length=1, max_length=64, pattern=UID_PATTERN)]


class ApiModel(BaseModel):
    """Base: camelCase aliases, unknown fields kept (the API may add some)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="allow",
        use_enum_values=True,
    )

    def to_api(self) -> dict[str, Any]:
        """Serialise for the API server.

        Returns:
            A JSON-ready dict with camelCase keys, ``None`` fields left out.
        """
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class ConditionStatus(enum.StrEnum):
    """A condition's status, per the Kubernetes API conventions."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


REASON_PATTERN: Final = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
"""A condition's reason: CamelCase (``metav1.Condition``'s rule)."""


class Condition(ApiModel):
    """One condition (``metav1.Condition``): the state of one aspect.

    ``lastTransitionTime`` changes only when ``status`` flips.
    """

    type: str = Field(
        min_length=1,
        max_length=316,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
        r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
        description="Type of condition in CamelCase, e.g. Ready, Claimed, Complete, Failed.",
    )
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        pattern=REASON_PATTERN,
        description="CamelCase reason for the condition's last transition. Optional, as in"
        " batch/v1's JobCondition (a condition another client adds through /status may"
        " have none); the operator always writes one.",
    )
    message: Message = Field(default="", description="Human-readable details.")
    last_transition_time: datetime | None = Field(
        default=None,
        description="When status last changed (API server clock of the writer). Optional, as"
        " in batch/v1's JobCondition; the operator always writes one.",
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="The .metadata.generation the condition was set for."
    )


class CompletionRecord(ApiModel):
    """A completion, recorded once under the token that held the lease."""

    fencing_token: int = Field(ge=1, description="Token under which the job completed.")
    holder_identity: HolderName = Field(description="Who completed the job.")
    outcome: Outcome = Field(description="Succeeded or Failed.")
    complete_time: datetime | None = Field(
        default=None, description="When the completion was written (the writer's clock)."
    )
    message: Message | None = Field(default=None, description="Details from the worker.")
    exit_code: int | None = Field(
        default=None, ge=-255, le=255, description="Exit code of the worker's process, if any."
    )


class PodTemplateMetadata(ApiModel):
    """Labels and annotations copied onto each attempt's pod."""

    labels: dict[str, Annotated[str, Field(max_length=MAX_LABEL_VALUE_LENGTH)]] | None = Field(
        default=None,
        description="Labels; each value at most 63 characters, as the API server allows on"
        " any object (the bound also lets the selector's CEL rule be costed).",
    )
    annotations: dict[str, str] | None = None
