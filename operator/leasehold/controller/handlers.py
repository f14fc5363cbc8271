"""Kopf glue: LeasedJob events, start-up and clean-up.

Why this module exists: it is the only module (with the entry point) that
imports Kopf, and it holds no logic worth testing on its own. A LeasedJob
event queues a reconcile of that job; start-up tunes Kopf and starts the
engines of :mod:`leasehold.controller.runtime`; clean-up stops them.
Decisions live in :mod:`leasehold.controller.plan.single`, API calls in
:mod:`leasehold.controller.act.jobs`. JobLeases are not watched through Kopf
but by a plain watch (why: :mod:`leasehold.controller.engines.watching`); expiry is
judged in :mod:`leasehold.controller.engines.expiry`. The validating admission
webhook's rules are in :mod:`leasehold.controller.plan.admission`; Kopf serves
them (``settings.admission.server``) when ``webhook_port`` is set.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final

import kopf

from leasehold import names
from leasehold.controller import metrics
from leasehold.controller.plan import admission, queueing
from leasehold.controller.runtime import Runtime
from leasehold.controller.settings import OperatorSettings

log = logging.getLogger(__name__)

EVENTS_FLUSH_SECONDS: Final = 5.0
"""How long a stopping operator waits for its queued Events to be posted."""

PREFIX: Final = names.GROUP

WEBHOOK_LEASED_JOB: Final = "validate-leasedjob"
"""The webhook's handler id for LeasedJobs, and its URL path (``/validate-leasedjob``)
in the chart's ValidatingWebhookConfiguration."""
WEBHOOK_LEASED_CRON_JOB: Final = "validate-leasedcronjob"
"""The same for LeasedCronJobs (``/validate-leasedcronjob``)."""
REFUSED: Final = 422
"""The status of a refusal: Unprocessable Entity, as batch/v1's validation answers."""


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
    """Tune Kopf (the only place that does); start the engines; serve metrics."""
    runtime: Runtime = memo.runtime
    settings.persistence.finalizer = f"{PREFIX}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=PREFIX, key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.peering.standalone = runtime.settings.standalone
    settings.peering.mandatory = not runtime.settings.standalone
    settings.peering.name = runtime.settings.peering_name
    settings.peering.priority = runtime.settings.priority
    settings.peering.lifetime = runtime.settings.peering_lifetime_seconds
    if runtime.settings.webhook_port:
        settings.admission.server = webhook_server(runtime.settings)
    await runtime.start()
    metrics.serve(runtime.settings.metrics_port)
    log.info(
        "leasehold operator started (expiry margin %.1fs, %d reconcile threads, %s)",
        runtime.settings.expiry_margin_seconds,
        runtime.settings.reconcile_workers,
        "namespaces " + ",".join(runtime.settings.namespaces)
        if runtime.settings.namespaces
        else "cluster-wide",
    )


@kopf.on.cleanup()
async def stop_tasks(memo: Any, **_: Any) -> None:
    """Stop the watches, the expiry timers and the peering gate; post the queued Events."""
    runtime: Runtime = memo.runtime
    for task in runtime.tasks:
        task.cancel()
    await asyncio.gather(*(asyncio.to_thread(w.stop) for w in runtime.watches))
    if not await asyncio.to_thread(runtime.actors.ctx.events.close, EVENTS_FLUSH_SECONDS):
        log.warning("stopping with Events not posted after %.0f s", EVENTS_FLUSH_SECONDS)


@kopf.on.event(names.GROUP, names.VERSION, names.PLURAL_LEASED_JOBS)
async def leased_job_event(*, type: str, body: kopf.Body, memo: Any, **_: Any) -> None:
    """A LeasedJob changed: reconcile it."""
    meta = body["metadata"]
    key = f"{meta['namespace']}/{meta['name']}"
    phase = (body.get("status") or {}).get("phase")
    memo.runtime.phases.observe(key, phase, deleted=type == "DELETED")
    if type == "DELETED":
        memo.runtime.actors.ctx.job_cache.drop(
            meta["namespace"], meta["name"], deleted_version=meta.get("resourceVersion")
        )
        memo.runtime.actors.ctx.own_writes.forget("LeasedJob", meta["namespace"], meta["name"])
        # Its lease outlives it (the name's fencing domain): the reconcile of
        # a job that is gone takes the lease back for good.
        memo.runtime.queue.trigger(meta["namespace"], meta["name"])
        return
    memo.runtime.actors.ctx.job_cache.put(body)  # the reconcile reads the job from here
    # Only a MODIFIED event can be the echo of this operator's own status
    # write; a listing (type None, e.g. after a peering pause) always reconciles.
    own = type == "MODIFIED" and memo.runtime.actors.ctx.own_writes.is_own(
        "LeasedJob", meta["namespace"], meta["name"], meta.get("resourceVersion")
    )
    if not own:
        memo.runtime.queue.trigger(meta["namespace"], meta["name"])


@kopf.on.event(names.GROUP, names.VERSION, names.PLURAL_LEASED_CRON_JOBS)
async def leased_cron_job_event(*, type: str, body: kopf.Body, memo: Any, **_: Any) -> None:
    """A LeasedCronJob changed: reconcile it (its runs go with it by ownerReference)."""
    if type != "DELETED":
        memo.crons.trigger(body["metadata"]["namespace"], body["metadata"]["name"])


@kopf.on.event(
    names.GROUP,
    names.VERSION,
    names.PLURAL_LEASED_JOBS,
    labels={names.LABEL_CRON_JOB: kopf.PRESENT},
)
async def cron_run_event(*, body: kopf.Body, memo: Any, **_: Any) -> None:
    """A cron job's run changed (started, ended, went): reconcile its cron job."""
    meta = body["metadata"]
    memo.crons.trigger(meta["namespace"], meta["labels"][names.LABEL_CRON_JOB])


@kopf.on.event("", "v1", "pods", labels={names.LABEL_JOB: kopf.PRESENT})
async def attempt_pod_event(*, type: str, body: kopf.Body, memo: Any, **_: Any) -> None:
    """An attempt's pod changed: once it runs, ends or goes, its lease's expiry clock starts.

    Its state is remembered (exit codes, a ``DisruptionTarget`` condition) so
    the attempt can be judged even if the pod is gone by then.

    Until then the attempt is starting (scheduling, image pull, init
    containers) and only the lease's ``startupDeadlineSeconds`` bounds it. A
    pod that ended (Succeeded, Failed) or was deleted before its first
    renewal will never renew: its attempt is judged by the lease duration
    from now, so the job is retried promptly, not after the startup bound. A
    pod seen running gets one lease duration more for its first renewal
    (docs/lifecycle.md, "Starting is not stalling").
    """
    memory = memo.runtime.actors.ctx.pod_memory  # how the attempt ended, should the pod go
    phase = (body.get("status") or {}).get("phase")
    if memory.observe(body, gone=type == "DELETED"):
        # Ready, terminating or terminal now: status.ready/terminating, and a
        # next attempt that waits for this pod (podReplacementPolicy: Failed).
        # A pod that ended ends its attempt: that reconcile goes first.
        memo.runtime.queue.trigger(
            body["metadata"]["namespace"],
            body["metadata"]["labels"][names.LABEL_JOB],
            urgent=type != "DELETED" and phase in ("Succeeded", "Failed"),
        )
    if type != "DELETED" and phase not in ("Running", "Succeeded", "Failed"):
        return
    meta = body["metadata"]
    annotations = meta.get("annotations") or {}
    lease = annotations.get(names.ANNOTATION_LEASE)
    holder = annotations.get(names.ANNOTATION_HOLDER)
    token = annotations.get(names.ANNOTATION_TOKEN, "")
    if not lease or not holder or not token.isdigit():
        return
    running = type != "DELETED" and phase == "Running"
    if memo.runtime.expiry.started(meta["namespace"], lease, holder, int(token), running=running):
        log.debug(
            "pod %s/%s %s: its lease's expiry clock started (or its start grace ended)",
            meta["namespace"],
            holder,
            "is gone" if type == "DELETED" else f"is {phase}",
        )


@kopf.on.event(queueing.GROUP, queueing.VERSION, queueing.PLURAL_WORKLOADS)
async def workload_event(*, body: kopf.Body, memo: Any, **_: Any) -> None:
    """A Kueue Workload changed (admitted, evicted, finished): reconcile the LeasedJob owning it.

    Workloads of other owners are ignored. Kopf watches the resource only
    while the cluster serves it: without Kueue this handler never runs.
    """
    meta = body["metadata"]
    for owner in meta.get("ownerReferences") or []:
        if owner.get("kind") == "LeasedJob" and owner.get("apiVersion") == names.API_VERSION:
            memo.runtime.queue.trigger(meta["namespace"], owner["name"])


def webhook_server(operator: OperatorSettings) -> kopf.WebhookServer:
    """Kopf's HTTPS server for the admission webhook, on all interfaces.

    Args:
        operator: the settings; ``webhook_port`` and the certificate files are set.

    Returns:
        The server. It serves the given certificate (never a self-signed one)
        and restarts when the files change (a renewed Secret). The
        ValidatingWebhookConfiguration is the chart's, with the CA: Kopf
        manages none (``settings.admission.managed`` stays unset).
    """
    return kopf.WebhookServer(
        addr="0.0.0.0",  # the API server calls it through a Service
        port=operator.webhook_port,
        certfile=operator.webhook_cert_file,
        pkeyfile=operator.webhook_key_file,
    )


def register_webhook() -> None:
    """Register the admission handlers (only with a server: Kopf refuses handlers without one)."""
    kopf.on.validate(
        names.GROUP,
        names.VERSION,
        names.PLURAL_LEASED_JOBS,
        id=WEBHOOK_LEASED_JOB,
        operations=("CREATE", "UPDATE"),
    )(validate_leased_job)
    kopf.on.validate(
        names.GROUP,
        names.VERSION,
        names.PLURAL_LEASED_CRON_JOBS,
        id=WEBHOOK_LEASED_CRON_JOB,
        operations=("CREATE", "UPDATE"),
    )(validate_leased_cron_job)


async def validate_leased_job(*, body: kopf.Body, **kwargs: Any) -> None:
    """Refuse a LeasedJob whose ``spec.params`` is over the limit (422, the field named)."""
    _judge("LeasedJob", admission.leased_job_errors, body, kwargs)


async def validate_leased_cron_job(*, body: kopf.Body, **kwargs: Any) -> None:
    """Refuse an unknown ``spec.timeZone``, a bad ``spec.schedule``, oversized template params."""
    _judge("LeasedCronJob", admission.leased_cron_job_errors, body, kwargs)


def _judge(
    kind: str,
    rules: Callable[[Mapping[str, Any], Mapping[str, Any] | None], list[str]],
    body: kopf.Body,
    cause: Mapping[str, Any],
) -> None:
    """Apply ``rules``; raise Kopf's AdmissionError (422) with every message, or allow.

    ``cause`` holds Kopf's other keyword arguments (``operation``; ``old``, the
    stored object on an update).

    A rule that fails unexpectedly allows the request (and logs why): the
    operator checks the object again before it acts on it, so a refusal must
    only ever come from a rule that found something wrong.
    """
    meta = body.get("metadata") or {}
    key = f"{meta.get('namespace')}/{meta.get('name') or meta.get('generateName', '')}"
    try:
        operation = cause.get("operation")
        errors = rules(body, cause.get("old") if operation == "UPDATE" else None)
    except Exception:
        log.exception("admission check of %s %s failed; allowed", kind, key)
        return
    if errors:
        log.info("refused %s of %s %s: %s", operation, kind, key, "; ".join(errors))
        raise kopf.AdmissionError("; ".join(errors), code=REFUSED)
