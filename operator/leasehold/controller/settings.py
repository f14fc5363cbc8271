"""One settings object for the operator (environment prefix ``LEASEHOLD_``).

Why this module exists: every knob the operator has is declared here once,
with its unit and why it exists, and read from the environment (Helm sets
them) or from command-line flags (which override). Kopf's own tuning is
applied from these in the controller's startup handler only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Self

from pydantic import Field, StringConstraints, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

NamespaceName = Annotated[
    str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
]
"""A namespace's exact name (an RFC 1123 label)."""


class OperatorSettings(BaseSettings):
    """Settings of ``leasehold operator``."""

    model_config = SettingsConfigDict(env_prefix="LEASEHOLD_", extra="ignore")

    namespaces: list[NamespaceName] = Field(default_factory=list)
    """Namespaces to watch, by exact name (no globs); empty means the whole
    cluster (``LEASEHOLD_NAMESPACES`` as a JSON list, e.g. ``["team-a","team-b"]``)."""

    expiry_margin_seconds: float = Field(default=1.0, ge=0, le=60)
    """Extra time past a lease's duration before the operator reclaims it.
    Covers the delay between a renewal landing and the operator seeing it
    (watch lag). Reclaims happen at duration + margin after the last change
    the operator saw, measured on its own monotonic clock."""

    liveness_endpoint: str = "http://0.0.0.0:8080/healthz"
    """Where Kopf serves its liveness probe (empty to disable)."""

    metrics_port: int = Field(default=9090, ge=0, le=65535)
    """Port of the Prometheus ``/metrics`` endpoint (0 disables it)."""

    standalone: bool = True
    """Run without Kopf peering (a single replica). HA installs set it false."""

    peering_name: str = "leasehold"
    """The KopfPeering object replicas coordinate through when not standalone."""

    priority: int = 0
    """This replica's peering priority (the highest active one works)."""

    peering_lifetime_seconds: int = Field(default=60, ge=15, le=3600)
    """How long a replica's peering entry counts as alive after its last
    keep-alive (Kopf's ``settings.peering.lifetime``; each replica touches its
    entry 5-10 s before this runs out). It bounds an HA take-over: a standby
    starts working this long after the active replica froze or died. Leases
    are safe either way (a reclaim is judged on the standby's own clock and
    guarded by the lease's resourceVersion); a shorter lifetime only makes the
    take-over sooner, at one more peering write per replica and lifetime."""

    reconcile_workers: int = Field(default=16, ge=1, le=256)
    """Threads running reconciles and reclaims (blocking API calls) at once.
    A burst of expiries is taken back this many at a time."""

    index_step_workers: int = Field(default=4, ge=1, le=256)
    """Threads carrying out an Indexed job's index steps at once (over all
    jobs): the indexes a burst of completions freed start together (each a pod
    create and a claim), not one after another. 1 runs them one by one in the
    reconcile's own thread. On the 2-core bench machine 1 and 4 ran 1,000
    indexes alike and 8 or 16 slower (the API server and the wrappers share
    the cores: bench/results.md); a cluster whose API server has cores of its
    own gains more from more."""

    status_write_interval_seconds: float = Field(default=1.0, ge=0, le=60)
    """The least time between two writes of a LeasedJob's status that only
    move counts (``ready``, ``active``, ``succeeded``, ...): such a change
    waits at most this long and rides with the next write that may not wait
    (the phase, a condition's status or reason, a terminal state), which is
    never held. 0 writes every change at once."""

    retry_delay_seconds: float = Field(default=2.0, gt=0, le=300)
    """Delay before a reconcile that hit a transient API error is retried."""

    log_level: str = "INFO"
    """Python logging level name."""

    webhook_port: int = Field(default=0, ge=0, le=65535)
    """Port of the validating admission webhook (HTTPS, all interfaces); 0
    serves none. It refuses at create and update what CEL cannot check: an
    unknown ``timeZone``, an unparsable ``schedule``, ``params`` over 32 KiB
    (``leasehold.controller.plan.admission``). The operator checks the same
    before it acts, so nothing depends on the webhook being reachable."""

    webhook_cert_file: Path | None = None
    """PEM certificate the webhook serves (the chart mounts its Secret's
    ``tls.crt``); re-read when it changes. Required with ``webhook_port``."""

    webhook_key_file: Path | None = None
    """PEM private key of ``webhook_cert_file`` (``tls.key``)."""

    @model_validator(mode="after")
    def _webhook_has_a_certificate(self) -> Self:
        """A webhook needs its certificate and key (the API server calls only HTTPS)."""
        if self.webhook_port and not (self.webhook_cert_file and self.webhook_key_file):
            raise ValueError(
                "webhook_port needs webhook_cert_file and webhook_key_file"
                " (LEASEHOLD_WEBHOOK_CERT_FILE, LEASEHOLD_WEBHOOK_KEY_FILE)"
            )
        return self
