"""The operator's engines wired together: what the Kopf handlers share.

Why this module exists: the handlers stay thin. :class:`Actors` wires the
actors to the edges and state they share; :class:`Runtime` owns the work
queue, the expiry timers, the lease and peering watches and the peering
gate; :func:`build_runtime` wires them; :meth:`Runtime.start` starts them.
Plain asyncio and threads: no Kopf, so its tests register no handler.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from leasehold import names
from leasehold.controller import metrics
from leasehold.controller.act.attempts import Attempts
from leasehold.controller.act.context import COMPONENT, Context
from leasehold.controller.act.holds import HoldWaits
from leasehold.controller.act.indexed import DEFAULT_STEP_WORKERS
from leasehold.controller.act.jobs import JobActor
from leasehold.controller.act.queue import QueueActor
from leasehold.controller.act.reclaim import Reclaimer
from leasehold.controller.engines.expiry import ExpiryClock, ExpiryReason, ExpiryWatch
from leasehold.controller.engines.peering import ActivityGate
from leasehold.controller.engines.queue import WorkQueue
from leasehold.controller.engines.watching import EventType, ListWatch, Target, WatchEvent
from leasehold.controller.engines.writes import STATUS_WRITE_INTERVAL_SECONDS, StatusWriteClock
from leasehold.controller.kube.events import EventRecorder
from leasehold.controller.kube.objects import CustomObjects
from leasehold.controller.kube.pods import Pods
from leasehold.controller.kube.workloads import Workloads
from leasehold.controller.settings import OperatorSettings
from leasehold.lease.protocol import MonotonicClock
from leasehold.lease.store import LeaseStore

log = logging.getLogger(__name__)


ApiClientFactory = Callable[[], client.ApiClient]
"""Builds a new API client (each watch owns one: it holds a connection for minutes)."""


def connect(
    api_client: client.ApiClient,
    *,
    clock: Callable[[], datetime] | None = None,
    monotonic: MonotonicClock = time.monotonic,
    instance: str | None = None,
    status_write_interval_seconds: float = STATUS_WRITE_INTERVAL_SECONDS,
) -> Context:
    """The shared edges and state of an operator that talks to the API through ``api_client``.

    Args:
        api_client: a configured ``kubernetes.client.ApiClient``.
        clock: wall clock for status stamps and Events (default: UTC now).
        monotonic: this process's monotonic clock.
        instance: the Events' ``reportingInstance`` (default: the host name).
        status_write_interval_seconds: how long a status change of counts
            alone may wait (``OperatorSettings.status_write_interval_seconds``).

    Returns:
        A new context with empty caches.
    """
    wall = clock or (lambda: datetime.now(UTC))
    return Context(
        store=LeaseStore(api_client, field_manager=COMPONENT, request_timeout_seconds=30.0),
        pods=Pods(api_client, COMPONENT),
        jobs=CustomObjects(api_client, names.PLURAL_LEASED_JOBS, "LeasedJob", COMPONENT),
        events=EventRecorder(
            api_client,
            component=COMPONENT,
            instance=instance or socket.gethostname(),
            clock=wall,
            on_dropped=metrics.EVENTS_DROPPED.inc,
        ),
        clock=wall,
        monotonic=monotonic,
        lease_clock=ExpiryClock(1.0, monotonic),
        status_clock=StatusWriteClock(status_write_interval_seconds),
    )


def cron_objects(api_client: client.ApiClient) -> tuple[CustomObjects, CustomObjects]:
    """The LeasedCronJobs and LeasedJobs a cron actor reads and writes, through ``api_client``.

    Args:
        api_client: the cron actor's own client (its calls do not wait for the jobs' pool).

    Returns:
        ``(cron jobs, jobs)``.
    """
    return (
        CustomObjects(api_client, names.PLURAL_LEASED_CRON_JOBS, "LeasedCronJob", COMPONENT),
        CustomObjects(api_client, names.PLURAL_LEASED_JOBS, "LeasedJob", COMPONENT),
    )


@dataclass(frozen=True)
class Actors:
    """The actors, wired to the edges and state they share.

    Attributes:
        ctx: the shared edges and state (caches, own writes, pod memory, ...).
        jobs: reconciles LeasedJobs (single and indexed).
        reclaimer: takes back leases judged expired.
        holds: the waits before a new token while an earlier holder may run.
    """

    ctx: Context
    jobs: JobActor
    reclaimer: Reclaimer
    holds: HoldWaits

    @classmethod
    def connect(
        cls,
        api_client: client.ApiClient,
        *,
        step_workers: int = DEFAULT_STEP_WORKERS,
        **context: Any,
    ) -> Actors:
        """Actors that talk to the API through ``api_client``.

        Args:
            api_client: a configured ``kubernetes.client.ApiClient``.
            step_workers: index steps of Indexed jobs run at once
                (``OperatorSettings.index_step_workers``).
            **context: passed to :func:`connect` (``clock``, ``monotonic``,
                ``instance``, ``status_write_interval_seconds``).

        Returns:
            New actors with empty caches.
        """
        ctx = connect(api_client, **context)
        holds = HoldWaits(ctx)
        queue = QueueActor(ctx, Workloads(api_client, COMPONENT))
        jobs = JobActor(ctx, holds, Attempts(ctx), queue, step_workers=step_workers)
        return cls(ctx, jobs, Reclaimer(ctx), holds)


@dataclass
class Runtime:
    """What the handlers share, passed to Kopf as ``memo``.

    Attributes:
        settings: the operator's settings.
        actors: the actors (blocking API calls) and the state they share.
        queue: the reconcile work queue.
        expiry: the expiry watch.
        gate: open while this replica may work (Kopf's peering rule).
        new_api_client: builds the watches' API clients.
        phases: LeasedJobs by phase, for the metrics.
        tasks: background tasks started at startup (cancelled at cleanup).
        watches: the plain watches started at startup (stopped at cleanup).
    """

    settings: OperatorSettings
    actors: Actors
    queue: WorkQueue
    expiry: ExpiryWatch
    gate: ActivityGate
    new_api_client: ApiClientFactory
    phases: metrics.JobPhases = field(default_factory=metrics.JobPhases)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    watches: list[ListWatch] = field(default_factory=list)

    def on_lease_event(self, event: WatchEvent) -> None:
        """A JobLease changed: feed the expiry clock; reconcile its job on a real change.

        Called on the event loop for every JobLease watch event. The first LIST's
        leases are not reconciled here: Kopf delivers every LeasedJob at start-up
        too, and each job's reconcile reads its lease. Nothing is triggered while a
        peer replica is the active one.
        """
        body = event.body
        if event.type is EventType.DELETED:
            meta = body["metadata"]
            self.actors.ctx.lease_cache.drop(
                meta["namespace"], meta["name"], deleted_version=meta.get("resourceVersion")
            )
        else:
            self.actors.ctx.lease_cache.put(body)  # a reconcile reads its lease from here
        change = self.expiry.observe(body, deleted=event.type is EventType.DELETED)
        if change.after is None:
            metrics.lease_forgotten(change.before)
        else:
            metrics.observe_lease_change(
                change.before,
                change.after,
                change.generation_changed,
                body.get("spec", {}).get("renewTime"),
                created=event.type is EventType.ADDED and not event.initial,
            )
        meta = body["metadata"]
        if event.type is EventType.DELETED:
            self.actors.ctx.own_writes.forget("JobLease", meta["namespace"], meta["name"])
        if not change.needs_reconcile:
            return
        if event.initial and change.before is None:
            return
        if event.type is EventType.MODIFIED and self.actors.ctx.own_writes.is_own(
            "JobLease", meta["namespace"], meta["name"], meta.get("resourceVersion")
        ):
            return  # this operator's own reclaim/stop: already acted on
        job_name = body.get("spec", {}).get("jobName") or meta["name"]
        # While a peer works, the queue parks it; if this replica takes over, it runs then.
        # A completion or an ended attempt goes before the starts that wait.
        self.queue.trigger(meta["namespace"], job_name, urgent=change.ends_attempt)

    async def start(self) -> None:
        """Start the watches, the expiry timers and the peering gate, in this loop.

        Returns once every watch has delivered its first LIST: Kopf starts its
        LeasedJob watch after the startup handler that awaits this, and every
        job's first reconcile must come after the leases' first LIST was fed
        to the expiry timers, or a lease that changed in between would be
        taken for first sight (not reconciled) while its job's reconcile read
        it earlier.
        """
        loop = asyncio.get_running_loop()
        # Reconciles and reclaims are blocking API calls run in threads; a burst
        # of expiries needs more than asyncio's default min(32, cores + 4).
        loop.set_default_executor(
            ThreadPoolExecutor(self.settings.reconcile_workers, thread_name_prefix="reconcile")
        )
        lease_targets, peering_targets = _watch_targets(self.settings)
        for target in peering_targets:
            self.gate.expect(target.namespace or "")
            self.watches.append(ListWatch(self.new_api_client(), target, self.gate.observe, loop))
        for target in lease_targets:
            self.watches.append(ListWatch(self.new_api_client(), target, self.on_lease_event, loop))
        for watch in self.watches:
            watch.start()
        self.tasks.append(loop.create_task(self.expiry.run()))
        self.tasks.append(loop.create_task(self.gate.run()))
        for watch in self.watches:
            waited = 0.0
            while not watch.synced.is_set():  # polled, not a timed wait: see leasehold.lease.waits
                await asyncio.sleep(0.05)
                waited += 0.05
                if waited >= 30.0:
                    log.warning("still waiting for the first LIST of %s", watch.target.describe())
                    waited = 0.0
        # Every lease was listed: reconciles read leases from the cache, and jobs
        # (fed by Kopf's events) and pods (Kopf's pod watch) likewise.
        self.actors.ctx.lease_cache.watched = True
        self.actors.ctx.job_cache.watched = True
        self.actors.ctx.pod_memory.fed = True


def build_runtime(
    settings: OperatorSettings,
    actors: Actors,
    new_api_client: ApiClientFactory,
    identity: str,
) -> Runtime:
    """Wire the actors, queue, peering gate and expiry watch together.

    Args:
        settings: the operator's settings.
        actors: the actors.
        new_api_client: builds an API client for each watch.
        identity: this replica's peering identity (the one Kopf is given).

    Returns:
        The runtime to pass to Kopf as ``memo``.
    """

    def reconcile(namespace: str, name: str) -> float | None:
        plan = actors.jobs.reconcile(namespace, name)
        return plan.requeue_after_seconds if plan is not None else None

    gate = ActivityGate(
        identity, settings.priority, settings.peering_name, standalone=settings.standalone
    )
    # Every reconcile (a job's event, a lease's change, a backoff, deadline, TTL
    # or quota timer) waits while a peer is the active replica: parked, then run
    # when this one takes over. As many run at once as there are threads for
    # them, those that finish something first.
    queue = WorkQueue(
        reconcile,
        settings.retry_delay_seconds,
        may_work=lambda: gate.is_open,
        workers=settings.reconcile_workers,
    )

    # Reclaims get threads of their own: in a burst of expiries they must not
    # wait behind the reconciles that the same burst triggers.
    reclaimers = ThreadPoolExecutor(settings.reconcile_workers, thread_name_prefix="reclaim")

    async def on_expired(
        namespace: str,
        lease_name: str,
        job_name: str,
        generation: int,
        body: dict[str, Any],
        reason: ExpiryReason,
    ) -> None:
        metrics.EXPIRATIONS.inc()  # judged expired: a reclaim is on its way
        outcome = await asyncio.get_running_loop().run_in_executor(
            reclaimers, actors.reclaimer.reclaim, namespace, lease_name, generation, body, reason
        )
        if outcome.reclaimed:
            metrics.RECLAIMS.inc()
        log.debug("expiry of %s/%s: %s", namespace, lease_name, outcome.reason)
        queue.trigger(namespace, job_name, urgent=True)  # an attempt ended

    clock = ExpiryClock(settings.expiry_margin_seconds, time.monotonic)
    actors.ctx.lease_clock = clock  # a take-over or resume waits out an earlier hold on it
    expiry = ExpiryWatch(clock, on_expired, gate=gate)
    runtime = Runtime(settings, actors, queue, expiry, gate, new_api_client)
    gate.on_open(queue.resume_parked)
    return runtime


def _watch_targets(settings: OperatorSettings) -> tuple[list[Target], list[Target]]:
    """The JobLease watches and the peering-object watches this operator needs."""
    namespaces: list[str | None] = list(settings.namespaces) or [None]
    leases = [Target(names.GROUP, names.VERSION, names.PLURAL_JOB_LEASES, ns) for ns in namespaces]
    if settings.standalone:
        return leases, []
    by_name = f"metadata.name={settings.peering_name}"
    if settings.namespaces:
        peerings = [
            Target("kopf.dev", "v1", "kopfpeerings", ns, field_selector=by_name)
            for ns in settings.namespaces
        ]
    else:
        peerings = [
            Target("kopf.dev", "v1", "clusterkopfpeerings", None, True, field_selector=by_name)
        ]
    return leases, peerings


# --------------------------------------------------------------------------
# Handlers
