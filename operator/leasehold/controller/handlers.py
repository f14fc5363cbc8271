"""Kopf glue: watch LeasedJobs with Kopf, JobLeases with a plain watch; judge expiry.

Why this module exists: it is the only module that imports Kopf. Handlers
are thin: a LeasedJob event queues a reconcile of that job; a JobLease event
feeds the operator's :class:`~leasehold.lease.protocol.ExpiryClock` and queues a
reconcile when the holder, token or completion changed. All decisions live
in :mod:`leasehold.controller.reconcile`; all API calls in :mod:`leasehold.controller.service`.

JobLeases are not watched through Kopf: every renewal is an event, and
Kopf's per-object machinery (~0.9 ms CPU per event, measured in ``make
bench``) would be a core at 10k leases. A plain list-watch
(:mod:`leasehold.controller.watching`) delivers them instead, and the work it starts
pauses with Kopf's peering (:mod:`leasehold.controller.peering`). Kopf never writes to
a JobLease, so a renewal costs exactly one write — the worker's own.

Expiry (``DESIGN.md``): the operator notes on its own monotonic clock when it
first saw each spec generation of a lease, and reclaims when no change was
seen for the lease duration plus a margin. A restarted operator starts every
window afresh, so it never reclaims early.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Final

import kopf

from leasehold import names
from leasehold.controller import metrics
from leasehold.controller.runtime import Runtime

log = logging.getLogger(__name__)

PREFIX: Final = names.GROUP


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
    """Stop the watches, the expiry timers and the peering gate."""
    runtime: Runtime = memo.runtime
    for task in runtime.tasks:
        task.cancel()
    await asyncio.gather(*(asyncio.to_thread(w.stop) for w in runtime.watches))


@kopf.on.event(names.GROUP, names.VERSION, names.PLURAL_LEASED_JOBS)
async def leased_job_event(*, type: str, body: kopf.Body, memo: Any, **_: Any) -> None:
    """A LeasedJob changed: reconcile it."""
    meta = body["metadata"]
    key = f"{meta['namespace']}/{meta['name']}"
    phase = (body.get("status") or {}).get("phase")
    memo.runtime.phases.observe(key, phase, deleted=type == "DELETED")
    if type == "DELETED":
        memo.runtime.service.own_writes.forget("LeasedJob", meta["namespace"], meta["name"])
        return
    # Only a MODIFIED event can be the echo of this operator's own status
    # write; a listing (type None, e.g. after a peering pause) always reconciles.
    own = type == "MODIFIED" and memo.runtime.service.own_writes.is_own(
        "LeasedJob", meta["namespace"], meta["name"], meta.get("resourceVersion")
    )
    if not own:
        memo.runtime.queue.trigger(meta["namespace"], meta["name"])
