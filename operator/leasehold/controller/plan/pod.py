"""The attempt pod: its name, how it is built from the job's template, how it is read back.

Why this module exists: the pod is where a fencing token reaches a worker (env,
annotations for the downward API, a label to find stale attempts), and where
the operator learns how an attempt ended (exit codes, an eviction's
``DisruptionTarget``). Building is a pure ``build_pod`` (as dask-kubernetes'
``build_*_spec``), golden-file tested; reading is a pure :func:`pod_facts`.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any, Final

from leasehold import names
from leasehold.controller.plan.failure_policy import PodFacts
from leasehold.lease import api
from leasehold.lease.api import LeasedJob
from leasehold.lease.indexes import index_hostname, index_lease_name
from leasehold.names import (
    ANNOTATION_HOLDER,
    ANNOTATION_LEASE,
    ANNOTATION_TOKEN,
    LABEL_JOB,
    LABEL_TOKEN,
)

MAX_POD_NAME: Final = 253
_DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
"""A pod's ``spec.hostname`` (RFC 1123 label: at most 63 characters)."""


def lease_name(job_name: str) -> str:
    """The JobLease name of a job: the job's own name.

    Args:
        job_name: the LeasedJob's name.

    Returns:
        The lease name.
    """
    return job_name


def pod_name(job_name: str, token: int) -> str:
    """The pod (and holder) name for the attempt under ``token``.

    Args:
        job_name: the LeasedJob's name.
        token: the fencing token the attempt runs under.

    Returns:
        ``<job>-<token>``, cut so it stays a valid object name.
    """
    suffix = f"-{token}"
    return job_name[: MAX_POD_NAME - len(suffix)] + suffix


def pod_selector(job: LeasedJob) -> str:
    """The job's pods as a label selector in text form: what ``status.selector`` says.

    As batch/v1's ``generateSelector`` (``pkg/registry/batch/job/strategy.go``):
    without ``manualSelector: true`` the selector is generated from the job's UID
    (``leasehold.dev/controller-uid=<uid>``, a label every attempt pod gets);
    with it, the user's ``spec.selector``. Which pods count as the job's is never
    decided by the selector: only the pods this incarnation controls are.

    Args:
        job: the LeasedJob (its ``metadata.uid`` and selector fields).

    Returns:
        The selector, e.g. ``leasehold.dev/controller-uid=6f1c...`` or
        ``app=etl,tier in (batch)``.
    """
    if job.spec.manual_selector and job.spec.selector is not None:
        return job.spec.selector.to_string()
    return f"{names.LABEL_CONTROLLER_UID}={job.metadata.get('uid', '')}"


def build_pod(
    job: LeasedJob,
    *,
    namespace: str,
    holder: str,
    token: int,
    owner_uid: str,
    lease_duration_seconds: int,
    index: int | None = None,
    index_failures: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """Build the pod of one attempt from the job's template.

    The fencing token and the lease coordinates are injected into every
    container's env and onto the pod as annotations (for the downward API);
    the pod is owned by the job (garbage-collected with it) and labelled with
    the job and token so stale attempts can be found, and with the job's UID
    (``leasehold.dev/controller-uid``, and batch/v1's
    ``batch.kubernetes.io/controller-uid``), which the generated selector
    (:func:`pod_selector`) selects.

    Args:
        job: the LeasedJob; must have ``spec.template``.
        namespace: the job's namespace.
        holder: the pod's name, which is also the lease holder identity.
        token: the fencing token the attempt runs under.
        owner_uid: the job's ``metadata.uid``.
        lease_duration_seconds: the JobLease's duration (never the job's spec:
            the lease's duration is the one the operator judges expiry by).
        index: for a job with several completions, the completion index the
            attempt serves: its lease is that index's (``<job>.<index>``), and the
            index is injected (``JOB_COMPLETION_INDEX``,
            ``LEASEHOLD_COMPLETION_INDEX``, a label and annotations).
        index_failures: for an Indexed job with ``backoffLimitPerIndex``, the index's
            failures so far, ``(counted, excused)`` (its JobLease's ``spec.failures``
            and ``spec.uncountedAttempts``): annotated as batch/v1's
            ``job-index-failure-count`` (always) and ``job-index-ignored-failure-count``
            (when above 0), as ``addIndexFailureCountAnnotation``
            (``pkg/controller/job/indexed_job_utils.go``) does.

    Returns:
        The pod body, JSON-ready.

    Raises:
        ValueError: the job has no pod template (pull mode).
    """
    if job.spec.template is None:
        raise ValueError("a LeasedJob without spec.template (pull mode) gets no pod")
    template = job.spec.template
    job_name = str(job.metadata["name"])
    meta = template.metadata or api.PodTemplateMetadata()
    lease = lease_name(job_name) if index is None else index_lease_name(job_name, index)
    labels, annotations = _marks(meta, job_name, lease, holder, token, index)
    labels[names.LABEL_CONTROLLER_UID] = owner_uid
    labels[names.BATCH_LABEL_CONTROLLER_UID] = owner_uid
    if index is not None and index_failures is not None:
        counted, excused = index_failures
        annotations[names.BATCH_ANNOTATION_INDEX_FAILURE_COUNT] = str(counted)
        if excused > 0:
            annotations[names.BATCH_ANNOTATION_INDEX_IGNORED_FAILURE_COUNT] = str(excused)
    spec = copy.deepcopy(template.spec)
    spec["restartPolicy"] = "Never"
    if index is not None and job.spec.completion_mode == api.CompletionMode.INDEXED:
        hostname = index_hostname(job_name, index)
        if _DNS_LABEL.fullmatch(hostname):
            spec["hostname"] = hostname
    injected = _lease_env(namespace, job_name, lease, holder, token, lease_duration_seconds, index)
    injected_names = {e["name"] for e in injected}
    for container in spec.get("containers", []):
        own = [e for e in container.get("env", []) if e.get("name") not in injected_names]
        container["env"] = own + injected
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": holder,
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": names.API_VERSION,
                    "kind": "LeasedJob",
                    "name": job_name,
                    "uid": owner_uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


def _marks(
    meta: api.PodTemplateMetadata,
    job_name: str,
    lease: str,
    holder: str,
    token: int,
    index: int | None,
) -> tuple[dict[str, str], dict[str, str]]:
    """The pod's labels and annotations: the template's, with the lease's on top.

    The job and token labels find a job's stale attempts; the token, holder
    and lease annotations reach the worker through the downward API. An
    index is marked both ways, and with batch/v1 Job's annotation too.
    """
    labels = {**(meta.labels or {}), LABEL_JOB: job_name, LABEL_TOKEN: str(token)}
    annotations = {
        **(meta.annotations or {}),
        ANNOTATION_TOKEN: str(token),
        ANNOTATION_HOLDER: holder,
        ANNOTATION_LEASE: lease,
    }
    if index is not None:
        labels[names.LABEL_COMPLETION_INDEX] = str(index)
        labels[names.BATCH_LABEL_COMPLETION_INDEX] = str(index)
        annotations[names.ANNOTATION_COMPLETION_INDEX] = str(index)
        annotations[names.BATCH_ANNOTATION_COMPLETION_INDEX] = str(index)
    return labels, annotations


def _lease_env(
    namespace: str,
    job_name: str,
    lease: str,
    holder: str,
    token: int,
    lease_duration_seconds: int,
    index: int | None,
) -> list[dict[str, Any]]:
    """The env every container gets: the lease's coordinates and the fencing token.

    These replace any of the same names in the template, so a worker can
    never run under a token (or a lease) the operator did not give it.
    """
    injected: list[dict[str, Any]] = [
        {"name": names.ENV_NAMESPACE, "value": namespace},
        {"name": names.ENV_JOB, "value": job_name},
        {"name": names.ENV_LEASE, "value": lease},
        {"name": names.ENV_HOLDER, "value": holder},
        {"name": names.ENV_FENCING_TOKEN, "value": str(token)},
        {"name": names.ENV_LEASE_DURATION, "value": str(lease_duration_seconds)},
        {"name": names.ENV_POD_UID, "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
    ]
    if index is not None:
        injected += [
            {"name": names.ENV_COMPLETION_INDEX, "value": str(index)},
            {"name": names.ENV_JOB_COMPLETION_INDEX, "value": str(index)},
        ]
    return injected


def pod_facts(pod: Mapping[str, Any]) -> tuple[int, PodFacts] | None:
    """Parse an attempt pod's body (API JSON, camelCase) into its token and facts.

    Args:
        pod: the pod as the API serves it.

    Returns:
        ``(fencing token, facts)``, or ``None`` for a pod without a token label.
        The facts name the LeasedJob UID that controls the pod (``owner_uid``).
    """
    meta = pod.get("metadata") or {}
    token = str((meta.get("labels") or {}).get(names.LABEL_TOKEN, ""))
    if not token.isdigit():
        return None
    status = pod.get("status") or {}
    codes: list[tuple[str, int]] = []
    first: int | None = None
    for key in ("initContainerStatuses", "containerStatuses"):
        for state in status.get(key) or []:
            terminated = (state.get("state") or {}).get("terminated")
            if terminated is None or terminated.get("exitCode") is None:
                continue
            code = int(terminated["exitCode"])
            codes.append((str(state.get("name", "")), code))
            if key == "containerStatuses" and first is None:
                first = code
    conditions = tuple(
        (str(c.get("type", "")), str(c.get("status", ""))) for c in status.get("conditions") or []
    )
    owner = next(
        (
            str(ref["uid"])
            for ref in meta.get("ownerReferences") or []
            if ref.get("controller") and ref.get("kind") == "LeasedJob" and ref.get("uid")
        ),
        None,
    )
    return int(token), PodFacts(
        uid=meta.get("uid"),
        node_name=(pod.get("spec") or {}).get("nodeName"),
        exit_code=first,
        exit_codes=tuple(codes),
        conditions=conditions,
        owner_uid=owner,
        phase=status.get("phase"),
        deleting=meta.get("deletionTimestamp") is not None,
    )
