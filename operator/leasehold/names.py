"""The names of leasehold's contract, spelled once: API group, resources, labels, env.

Why this module exists: the operator writes these names, the worker SDK and
``leasehold run`` read them, the CRDs and fenced targets depend on them.
Spelled in one place, below every other part of the package (it imports
nothing), so that no two modules can disagree about a key.
"""

from __future__ import annotations

from typing import Final

GROUP: Final = "leasehold.dev"
"""The API group of the resources, and the prefix of every label and annotation."""
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"

PLURAL_LEASED_JOBS: Final = "leasedjobs"
PLURAL_JOB_LEASES: Final = "jobleases"
PLURAL_LEASED_CRON_JOBS: Final = "leasedcronjobs"

MANAGED_BY_LEASEHOLD: Final = f"{GROUP}/leasedjob-controller"
"""A LeasedJob's ``spec.managedBy`` when this operator reconciles it (also when unset);
any other value hands the job to another controller (batch/v1 Job's
``kubernetes.io/job-controller``, the hook MultiKueue uses)."""

# The pod contract: env vars the operator injects into every attempt's pod,
# read by the worker SDK (``LeaseHolder.from_env``) and ``leasehold run``.
ENV_NAMESPACE: Final = "LEASEHOLD_NAMESPACE"
ENV_JOB: Final = "LEASEHOLD_JOB"
ENV_LEASE: Final = "LEASEHOLD_LEASE"
ENV_HOLDER: Final = "LEASEHOLD_HOLDER"
ENV_FENCING_TOKEN: Final = "LEASEHOLD_FENCING_TOKEN"
ENV_LEASE_DURATION: Final = "LEASEHOLD_LEASE_DURATION_SECONDS"
ENV_POD_UID: Final = "LEASEHOLD_POD_UID"
"""The pod's own ``metadata.uid`` (downward API): the holder is a pod UID, not a name."""
ENV_COMPLETION_INDEX: Final = "LEASEHOLD_COMPLETION_INDEX"
"""Indexed jobs: the index this pod's lease serves (each index is its own fencing domain)."""
ENV_JOB_COMPLETION_INDEX: Final = "JOB_COMPLETION_INDEX"
"""The same index under batch/v1 Job's name, so programs written for Indexed Jobs run as-is."""

# Labels and annotations the operator puts on an attempt's pod.
LABEL_JOB: Final = f"{GROUP}/job"
LABEL_TOKEN: Final = f"{GROUP}/fencing-token"
LABEL_CONTROLLER_UID: Final = f"{GROUP}/controller-uid"
"""On every attempt pod: the UID of the LeasedJob incarnation that made it (its generated
selector, ``status.selector``, is ``leasehold.dev/controller-uid=<uid>``)."""
BATCH_LABEL_CONTROLLER_UID: Final = "batch.kubernetes.io/controller-uid"
"""The same UID under batch/v1 Job's label (its generated selector's key), so tools that
select a job's pods by it find an attempt's pods too."""
LABEL_COMPLETION_INDEX: Final = f"{GROUP}/completion-index"
"""Indexed jobs: on each index's JobLease and pods, the index (decimal)."""
ANNOTATION_COMPLETION_INDEX: Final = f"{GROUP}/completion-index"
BATCH_ANNOTATION_COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"
BATCH_LABEL_COMPLETION_INDEX: Final = BATCH_ANNOTATION_COMPLETION_INDEX
"""batch/v1 Job's pod label for the index (PodIndexLabel): headless Services and affinity
select on it."""
BATCH_ANNOTATION_INDEX_FAILURE_COUNT: Final = "batch.kubernetes.io/job-index-failure-count"
"""Indexed jobs with ``backoffLimitPerIndex``: the index's failures counted before this pod."""
BATCH_ANNOTATION_INDEX_IGNORED_FAILURE_COUNT: Final = (
    "batch.kubernetes.io/job-index-ignored-failure-count"
)
"""Indexed jobs with ``backoffLimitPerIndex``: the index's failures not counted (excused)
before this pod; set only when above 0, as batch/v1's."""
"""batch/v1 Job's pod annotation for the index, set too (tools that read it keep working)."""
ANNOTATION_TOKEN: Final = f"{GROUP}/fencing-token"
"""The fencing token: on an attempt's pod (for the downward API) and on fenced objects."""
ANNOTATION_FENCING_DOMAIN: Final = f"{GROUP}/fencing-domain"
"""On an object fenced by the admission policy: the fencing domain (the JobLease name)
whose tokens it compares. One object, one domain: each index of an Indexed job is its own."""
ANNOTATION_HOLDER: Final = f"{GROUP}/holder"
ANNOTATION_LEASE: Final = f"{GROUP}/lease"
ANNOTATION_RECLAIMED_TOKEN: Final = f"{GROUP}/last-reclaimed-token"
"""On a JobLease: the last fencing token the operator took back on expiry (decimal).
Written in the reclaim's own conditional write, with :data:`ANNOTATION_RECLAIM_REASON`;
workers may not change a lease's annotations (the chart's worker lease policy)."""
ANNOTATION_RECLAIM_REASON: Final = f"{GROUP}/last-reclaim-reason"
"""On a JobLease: why that token was taken back (``LeaseExpired``, ``StartupDeadlineExceeded``)."""
FINALIZER_DOMAIN: Final = f"{GROUP}/fencing-domain"
"""On every JobLease: the lease is its job name's fencing domain and outlives the
job; only the operator removes it, when the lease's namespace is deleted."""
LABEL_FENCED: Final = f"{GROUP}/fenced"
"""Label (value ``"true"``) that opts a Kubernetes object into fencing."""
LABEL_CRON_JOB: Final = f"{GROUP}/cronjob"
"""On each run of a LeasedCronJob (its LeasedJob and JobLease): the cron job's name."""
ANNOTATION_SCHEDULED_TIME: Final = f"{GROUP}/scheduled-timestamp"
"""On each run's LeasedJob: the schedule time it was made for (RFC 3339)."""
