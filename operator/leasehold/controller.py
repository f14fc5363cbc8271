"""Kopf glue: watch LeasedJobs with Kopf, JobLeases with a plain watch; judge expiry.

Why this module exists: it is the only module that imports Kopf. Handlers
are thin: a LeasedJob event queues a reconcile of that job; a JobLease event
feeds the operator's :class:`~leasehold.protocol.ExpiryClock` and queues a
reconcile when the holder, token or completion changed. All decisions live
in :mod:`leasehold.reconcile`; all API calls in :mod:`leasehold.service`.

JobLeases are not watched through Kopf: every renewal is an event, and
Kopf's per-object machinery (~0.9 ms CPU per event, measured in ``make
bench``) would be a core at 10k leases. A plain list-watch
(:mod:`leasehold.watching`) delivers them instead, and the work it starts
pauses with Kopf's peering (:mod:`leasehold.peering`). Kopf never writes to
a JobLease, so a renewal costs exactly one write — the worker's own.

Expiry (``DESIGN.md``): the operator notes on its own monotonic clock when it
first saw each spec generation of a lease, and reclaims when no change was
seen for the lease duration plus a margin. A restarted operator starts every
window afresh, so it never reclaims early.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import kopf
from kubernetes import client

from leasehold import metrics, models
from leasehold.peering import ActivityGate
from leasehold.protocol import ExpiryClock
from leasehold.service import JobService
from leasehold.settings import OperatorSettings
from leasehold.store import StoreError, TransientStoreError
from leasehold.watching import EventType, ListWatch, Target, WatchEvent

log = logging.getLogger(__name__)

PREFIX = "leasehold.dev"


class WorkQueue:
    """Run at most one reconcile per job at a time, coalescing triggers.

    A trigger while the job's reconcile runs marks it dirty: it runs once
    more afterwards. Transient failures are retried after a delay.

    Args:
        work: the blocking function to run in a thread: ``work(namespace, name)``.
        retry_delay_seconds: delay before retrying after a transient error.
    """

    def __init__(self, work: Callable[[str, str], object], retry_delay_seconds: float) -> None:
        self._work = work
        self._delay = retry_delay_seconds
        self._running: set[tuple[str, str]] = set()
        self._dirty: set[tuple[str, str]] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def trigger(self, namespace: str, name: str) -> None:
        """Queue a reconcile of ``namespace/name`` (must run in the event loop)."""
        key = (namespace, name)
        if key in self._running:
            self._dirty.add(key)
            return
        self._running.add(key)
        task = asyncio.get_running_loop().create_task(self._run(key))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, key: tuple[str, str]) -> None:
        try:
            while True:
                self._dirty.discard(key)
                try:
                    await asyncio.to_thread(self._work, *key)
                except TransientStoreError as exc:
                    log.info("reconcile %s/%s will be retried: %s", *key, exc)
                    await asyncio.sleep(self._delay)
                    self._dirty.add(key)
                except StoreError as exc:
                    log.error("reconcile %s/%s failed: %s", *key, exc)
                    await asyncio.sleep(self._delay * 5)
                    self._dirty.add(key)
                except Exception:
                    log.exception("reconcile %s/%s crashed; retrying later", *key)
                    await asyncio.sleep(self._delay * 5)
                    self._dirty.add(key)
                if key not in self._dirty:
                    return
        finally:
            self._running.discard(key)


@dataclass(order=True)
class _Due:
    at: float
    key: str = field(compare=False)
    generation: int = field(compare=False)


@dataclass(frozen=True)
class LeaseChange:
    """What one JobLease watch event changed.

    Attributes:
        before: ``(holder, token, completion, cap)`` seen last, ``None`` at first sight.
        after: the same now (``None`` when the lease was deleted).
        generation_changed: the spec changed since the last event.
    """

    before: tuple[Any, ...] | None
    after: tuple[Any, ...] | None
    generation_changed: bool

    @property
    def needs_reconcile(self) -> bool:
        """Holder, token, completion or cap changed (or first sight, or gone)."""
        return self.before != self.after


@dataclass
class _Watched:
    namespace: str
    name: str
    job_name: str
    generation: int
    duration_seconds: int
    held: bool
    signature: tuple[Any, ...]
    body: dict[str, Any]


class ExpiryWatch:
    """Schedules expiry checks of held leases and reclaims the expired ones.

    Args:
        clock: the operator's expiry judge.
        on_expired: coroutine run for an expired lease:
            ``on_expired(namespace, lease_name, job_name, generation, body)``
            (``body``: the lease as last watched).
        monotonic: the monotonic clock (the same one ``clock`` uses).
        gate: reclaims wait while it is closed (a peer replica is active);
            ``None``: never wait.
    """

    def __init__(
        self,
        clock: ExpiryClock,
        on_expired: Callable[[str, str, str, int, dict[str, Any]], Awaitable[None]],
        monotonic: Callable[[], float] = time.monotonic,
        gate: ActivityGate | None = None,
    ) -> None:
        self._clock = clock
        self._on_expired = on_expired
        self._monotonic = monotonic
        self._gate = gate
        self._heap: list[_Due] = []
        self._watched: dict[str, _Watched] = {}
        self._wake = asyncio.Event()
        self._reclaiming: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._parked: dict[str, _Due] = {}
        if gate is not None:
            gate.on_open(self._unpark)

    def _unpark(self) -> None:
        """The gate opened: judge the leases that came due while it was closed, now."""
        now = self._monotonic()
        for due in self._parked.values():
            self._push(_Due(now, due.key, due.generation))
        self._parked.clear()

    def observe(self, body: dict[str, Any], deleted: bool = False) -> LeaseChange:
        """Note a JobLease watch event.

        Args:
            body: the JobLease body from the event.
            deleted: whether the event was a deletion.

        Returns:
            What changed since the last event of this lease.
        """
        meta = body.get("metadata", {})
        spec = body.get("spec", {})
        key = f"{meta.get('namespace')}/{meta.get('name')}/{meta.get('uid')}"
        if deleted:
            self._clock.forget(key)
            gone = self._watched.pop(key, None)
            return LeaseChange(gone.signature if gone else None, None, False)
        generation = int(meta.get("generation", 0))
        signature = (
            spec.get("holderIdentity"),
            spec.get("fencingToken"),
            spec.get("completion"),
            spec.get("maxFencingToken"),
        )
        held = spec.get("holderIdentity") is not None and spec.get("completion") is None
        old = self._watched.get(key)
        self._watched[key] = _Watched(
            namespace=str(meta.get("namespace")),
            name=str(meta.get("name")),
            job_name=str(spec.get("jobName", meta.get("name"))),
            generation=generation,
            duration_seconds=int(spec.get("leaseDurationSeconds", 30)),
            held=held,
            signature=signature,
            body=body,
        )
        first_seen = self._clock.observe(key, str(generation))
        if held:
            due = first_seen + self._watched[key].duration_seconds + self._clock.margin_seconds
            self._push(_Due(due, key, generation))
        return LeaseChange(
            old.signature if old else None,
            signature,
            old is None or old.generation != generation,
        )

    async def run(self) -> None:
        """Check leases as they come due; runs until cancelled."""
        while True:
            self._wake.clear()
            if not self._heap:
                await self._wake.wait()
                continue
            due = self._heap[0]
            delay = due.at - self._monotonic()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=delay)
                continue
            heapq.heappop(self._heap)
            watched = self._watched.get(due.key)
            if watched is None or not watched.held or watched.generation != due.generation:
                continue  # renewed, released, completed or deleted since
            remaining = self._clock.remaining_seconds(
                due.key, str(due.generation), watched.duration_seconds
            )
            if remaining > 0:
                heapq.heappush(
                    self._heap, _Due(self._monotonic() + remaining, due.key, due.generation)
                )
                continue
            if self._gate is not None and not self._gate.is_open:
                # A peer works: park it (one entry per lease) and judge it
                # again when this replica takes over; the loop keeps popping,
                # so renewals' stale entries never pile up meanwhile.
                self._parked[due.key] = due
                continue
            if due.key in self._reclaiming:
                # A reclaim of this lease is still on its way: look again soon.
                heapq.heappush(self._heap, _Due(self._monotonic() + 1.0, due.key, due.generation))
                continue
            metrics.EXPIRATIONS.inc()
            # Reclaims run side by side: a burst of expiries is taken back at
            # the pace of the reclaim threads, not one API round trip each.
            self._reclaiming.add(due.key)
            task = asyncio.get_running_loop().create_task(self._reclaim(due, watched))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _reclaim(self, due: _Due, watched: _Watched) -> None:
        try:
            await self._on_expired(
                watched.namespace, watched.name, watched.job_name, due.generation, watched.body
            )
        except Exception:
            log.exception("reclaim of %s failed; will retry", due.key)
            self._push(_Due(self._monotonic() + 1.0, due.key, due.generation))
        finally:
            self._reclaiming.discard(due.key)

    def _push(self, due: _Due) -> None:
        earliest = not self._heap or due.at < self._heap[0].at
        heapq.heappush(self._heap, due)
        if earliest:  # the loop sleeps until the earliest entry; wake it only if that moved
            self._wake.set()


ApiClientFactory = Callable[[], client.ApiClient]
"""Builds a new API client (each watch owns one: it holds a connection for minutes)."""


@dataclass
class Runtime:
    """What the handlers share, passed to Kopf as ``memo``.

    Attributes:
        settings: the operator's settings.
        service: the service layer (blocking API calls).
        queue: the reconcile work queue.
        expiry: the expiry watch.
        gate: open while this replica may work (Kopf's peering rule).
        new_api_client: builds the watches' API clients.
        phases: LeasedJobs by phase, for the metrics.
        tasks: background tasks started at startup (cancelled at cleanup).
        watches: the plain watches started at startup (stopped at cleanup).
        deferred: jobs (namespace, name) whose leases changed while the gate
            was closed; reconciled when it opens.
    """

    settings: OperatorSettings
    service: JobService
    queue: WorkQueue
    expiry: ExpiryWatch
    gate: ActivityGate
    new_api_client: ApiClientFactory
    phases: metrics.JobPhases = field(default_factory=metrics.JobPhases)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    watches: list[ListWatch] = field(default_factory=list)
    deferred: set[tuple[str, str]] = field(default_factory=set)

    def on_lease_event(self, event: WatchEvent) -> None:
        """A JobLease changed: feed the expiry clock; reconcile its job on a real change.

        Called on the event loop for every JobLease watch event. The first
        LIST's leases are not reconciled here: Kopf delivers every LeasedJob
        at start-up too, and each job's reconcile reads its lease. Nothing is
        triggered while a peer replica is the active one.

        Args:
            event: the watch event.
        """
        body = event.body
        change = self.expiry.observe(body, deleted=event.type is EventType.DELETED)
        if change.after is None:
            metrics.lease_forgotten(change.before)
        else:
            metrics.observe_lease_change(
                change.before,
                change.after,
                change.generation_changed,
                body.get("spec", {}).get("renewTime"),
            )
        meta = body["metadata"]
        if event.type is EventType.DELETED:
            self.service.own_writes.forget("JobLease", meta["namespace"], meta["name"])
        if not change.needs_reconcile:
            return
        if event.initial and change.before is None:
            return
        if event.type is EventType.MODIFIED and self.service.own_writes.is_own(
            "JobLease", meta["namespace"], meta["name"], meta.get("resourceVersion")
        ):
            return  # this operator's own reclaim/stop: already acted on
        job_name = body.get("spec", {}).get("jobName") or meta["name"]
        if not self.gate.is_open:
            # A peer works now; if this replica takes over, it looks at this job.
            self.deferred.add((meta["namespace"], job_name))
            return
        self.queue.trigger(meta["namespace"], job_name)

    def reconcile_deferred(self) -> None:
        """The gate opened: reconcile the jobs whose leases changed while it was closed."""
        pending, self.deferred = self.deferred, set()
        for namespace, name in sorted(pending):
            self.queue.trigger(namespace, name)


def build_runtime(
    settings: OperatorSettings,
    service: JobService,
    new_api_client: ApiClientFactory,
    identity: str,
) -> Runtime:
    """Wire the service, queue, peering gate and expiry watch together.

    Args:
        settings: the operator's settings.
        service: the service layer.
        new_api_client: builds an API client for each watch.
        identity: this replica's peering identity (the one Kopf is given).

    Returns:
        The runtime to pass to Kopf as ``memo``.
    """
    queue = WorkQueue(service.reconcile, settings.retry_delay_seconds)
    gate = ActivityGate(
        identity, settings.priority, settings.peering_name, standalone=settings.standalone
    )

    # Reclaims get threads of their own: in a burst of expiries they must not
    # wait behind the reconciles that the same burst triggers.
    reclaimers = ThreadPoolExecutor(settings.reconcile_workers, thread_name_prefix="reclaim")

    async def on_expired(
        namespace: str, lease_name: str, job_name: str, generation: int, body: dict[str, Any]
    ) -> None:
        outcome = await asyncio.get_running_loop().run_in_executor(
            reclaimers, service.reclaim, namespace, lease_name, generation, body
        )
        if outcome.reclaimed:
            metrics.RECLAIMS.inc()
        log.debug("expiry of %s/%s: %s", namespace, lease_name, outcome.reason)
        queue.trigger(namespace, job_name)

    clock = ExpiryClock(settings.expiry_margin_seconds, time.monotonic)
    expiry = ExpiryWatch(clock, on_expired, gate=gate)
    runtime = Runtime(settings, service, queue, expiry, gate, new_api_client)
    gate.on_open(runtime.reconcile_deferred)
    return runtime


def _watch_targets(settings: OperatorSettings) -> tuple[list[Target], list[Target]]:
    """The JobLease watches and the peering-object watches this operator needs."""
    namespaces: list[str | None] = list(settings.namespaces) or [None]
    leases = [Target(models.GROUP, models.VERSION, "jobleases", ns) for ns in namespaces]
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


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
    """Tune Kopf (the only place that does); start the lease watch and expiry timers."""
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
    loop = asyncio.get_running_loop()
    # Reconciles and reclaims are blocking API calls run in threads; a burst
    # of expiries needs more than asyncio's default min(32, cores + 4).
    loop.set_default_executor(
        ThreadPoolExecutor(runtime.settings.reconcile_workers, thread_name_prefix="reconcile")
    )
    lease_targets, peering_targets = _watch_targets(runtime.settings)
    for target in peering_targets:
        runtime.gate.expect(target.namespace or "")
        runtime.watches.append(
            ListWatch(runtime.new_api_client(), target, runtime.gate.observe, loop)
        )
    for target in lease_targets:
        runtime.watches.append(
            ListWatch(runtime.new_api_client(), target, runtime.on_lease_event, loop)
        )
    for watch in runtime.watches:
        watch.start()
    runtime.tasks.append(loop.create_task(runtime.expiry.run()))
    runtime.tasks.append(loop.create_task(runtime.gate.run()))
    # Kopf starts its LeasedJob watch after this handler: every job's first
    # reconcile must come after the leases' first LIST was fed to the expiry
    # timers, or a lease that changed in between would be taken for
    # first sight (not reconciled) while its job's reconcile read it earlier.
    for watch in runtime.watches:
        waited = 0.0
        while not watch.synced.is_set():  # polled, not a timed wait: see leasehold.waits
            await asyncio.sleep(0.05)
            waited += 0.05
            if waited >= 30.0:
                log.warning("still waiting for the first LIST of %s", watch.target.describe())
                waited = 0.0
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


@kopf.on.event(models.GROUP, models.VERSION, "leasedjobs")
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
