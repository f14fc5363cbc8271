"""The operator's service layer: carry out a reconcile plan against the API.

Why this module exists: :mod:`leasehold.controller.reconcile` decides, purely; this
module reads what the decision needs (job, lease, pods), performs the plan
(create the lease, claim, create or delete pods, stop the lease), records
Events and writes the job's status through the status subresource. Kopf
handlers call :meth:`JobService.reconcile` and :meth:`JobService.reclaim`
and hold no logic themselves.

All calls are blocking (the official client); the controller runs them in
threads. One lock per job keeps two triggers for the same job (a lease event
and an expiry, say) from interleaving in this process; across processes
every lease write is a compare-and-swap, so a second operator could not
double-claim either.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Final, NoReturn, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from leasehold import names
from leasehold.controller import indexed, reconcile
from leasehold.controller.caches import ObjectCache
from leasehold.controller.deadline import JobClocks
from leasehold.controller.expiry import ExpiryClock, ExpiryReason
from leasehold.controller.indexed_service import IndexedJobs
from leasehold.controller.pods import PodMemory, pod_facts
from leasehold.controller.reconcile import Action, JobEvent, Plan, PodFacts
from leasehold.controller.ttl import FinishClocks
from leasehold.lease import api
from leasehold.lease.api import LeasedJob, LeasedJobStatus
from leasehold.lease.errors import (
    InvalidLeaseError,
    LeaseNotFoundError,
    TransientStoreError,
    WriteRefusedError,
    api_error,
    api_message,
)
from leasehold.lease.protocol import MonotonicClock, hold_may_outlive
from leasehold.lease.store import (
    Accepted,
    LeaseStore,
    StoredLease,
    WorkItem,
    format_time,
    to_stored,
)

log = logging.getLogger(__name__)

COMPONENT: Final = "leasehold-operator"

_ENDED: Final = ("Succeeded", "Failed")
"""Phases of a pod whose containers all ended."""

QUOTA_BACKOFF_SECONDS: Final = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0)
"""Delays before retrying a pod create refused by a ResourceQuota (the last repeats)."""


@dataclass(frozen=True)
class ReclaimOutcome:
    """What :meth:`JobService.reclaim` did.

    Attributes:
        reclaimed: whether this call took the lease back.
        token: the lease's token when judged.
        holder: the holder it was taken from (or ``None``).
        reason: a short word for logs: ``Reclaimed``, ``Renewed``, ``Unheld``,
            ``Completed``, ``Missing``, ``Recreated``.
    """

    reclaimed: bool
    token: int
    holder: str | None
    reason: str


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _server_time(headers: Any) -> datetime | None:
    """The API server's clock from a response's ``Date`` header (1 s resolution)."""
    raw = headers.get("Date") if headers is not None else None
    if not raw:
        return None
    try:
        return parsedate_to_datetime(str(raw))
    except (TypeError, ValueError):
        return None


class _LeaseMoved(Exception):  # noqa: N818 - a signal to re-plan, not an error
    """The lease changed under a write (a completion landed first): plan again on it."""

    def __init__(self, lease: StoredLease) -> None:
        super().__init__(f"{lease.namespace}/{lease.name} changed")
        self.lease = lease


class OwnWrites:
    """The versions this operator wrote, so their watch events need no reconcile.

    A reconcile that writes (a claim, a reclaim, a status) has already acted
    on what it wrote; the watch event of that very version carries nothing
    new, and reconciling it again costs two reads. Any other change has
    another ``resourceVersion`` and is reconciled as always. An event that
    arrives before its write is recorded is simply reconciled (the old
    behaviour), so a race here costs reads, never a missed change.

    Thread-safe: recorded from reconcile threads, checked on the event loop.
    """

    def __init__(self) -> None:
        self._versions: dict[tuple[str, str, str], str] = {}
        self._lock = threading.Lock()

    def record(self, kind: str, namespace: str, name: str, resource_version: str) -> None:
        """Note that this process wrote ``resource_version`` of an object.

        Args:
            kind: ``JobLease`` or ``LeasedJob``.
            namespace: the object's namespace.
            name: the object's name.
            resource_version: the version the write produced.
        """
        if resource_version:
            with self._lock:
                self._versions[(kind, namespace, name)] = resource_version

    def forget(self, kind: str, namespace: str, name: str) -> None:
        """The object is gone: drop what was recorded for it.

        Args:
            kind: ``JobLease`` or ``LeasedJob``.
            namespace: the object's namespace.
            name: the object's name.
        """
        with self._lock:
            self._versions.pop((kind, namespace, name), None)

    def is_own(self, kind: str, namespace: str, name: str, resource_version: str | None) -> bool:
        """Whether this version is one this process wrote (forgets it if so).

        Args:
            kind: ``JobLease`` or ``LeasedJob``.
            namespace: the object's namespace.
            name: the object's name.
            resource_version: the version a watch event carries.

        Returns:
            ``True`` exactly once for a recorded version.
        """
        key = (kind, namespace, name)
        with self._lock:
            if resource_version and self._versions.get(key) == resource_version:
                del self._versions[key]
                return True
            return False


def _clock_key(lease: StoredLease) -> str:
    """The lease's key on the expiry judge's clock: ``namespace/name/uid``."""
    meta = lease.body.get("metadata") or {}
    return f"{lease.namespace}/{lease.name}/{meta.get('uid')}"


class JobService:
    """Reconcile LeasedJobs and reclaim their leases, with one API client.

    Args:
        api_client: a configured ``kubernetes.client.ApiClient``.
        clock: wall clock for status timestamps (for people; never judged).
        monotonic: this process's monotonic clock (deadlines).
        instance: reported as the Events' ``reportingInstance``.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        clock: Callable[[], datetime] = _utcnow,
        monotonic: MonotonicClock = time.monotonic,
        instance: str | None = None,
    ) -> None:
        self._custom = client.CustomObjectsApi(api_client)
        self._core = client.CoreV1Api(api_client)
        self._store = LeaseStore(
            api_client, field_manager="leasehold-operator", request_timeout_seconds=30.0
        )
        self._clock = clock
        self._instance = instance or socket.gethostname()
        self._locks: dict[str, threading.Lock] = {}
        self._quota_refusals: dict[str, int] = {}
        self._job_clocks = JobClocks(monotonic)
        self._finish_clocks = FinishClocks(monotonic)
        self._locks_guard = threading.Lock()
        self.own_writes = OwnWrites()
        """Versions written here (their watch events are not reconciled again)."""
        self.indexed = IndexedJobs(self)
        """The index leases of jobs with several completions."""
        self.pods = PodMemory()
        """The last state seen of attempt pods (fed by the pod watch)."""
        self.jobs = ObjectCache()
        """The newest LeasedJob bodies seen (fed by Kopf's events and the status writes)."""
        self.leases = ObjectCache()
        """The newest JobLease bodies seen (fed by the lease watch and this operator's writes)."""
        self._to_json: Callable[[Any], Any] = api_client.sanitize_for_serialization
        self.lease_clock = ExpiryClock(1.0, monotonic)
        """When each lease version was first seen: the expiry judge's clock, fed by the
        lease watch (the runtime sets its own); see :meth:`earlier_hold_wait`."""
        self._waits_told: dict[str, int] = {}

    @property
    def store(self) -> LeaseStore:
        """The lease store this service writes through."""
        return self._store

    # -- what the index leases' service (controller/indexed_service.py) uses --

    @property
    def core(self) -> client.CoreV1Api:
        """The core/v1 API (pods)."""
        return self._core

    def now(self) -> datetime:
        """The wall-clock time for status stamps (for people; never judged)."""
        return self._clock()

    def earlier_hold_wait(self, lease: StoredLease, body: dict[str, Any] | None = None) -> float:
        """Seconds to wait before making ``lease`` claimable again (0: now).

        A take-over or a resume must not let a new token be issued while the
        worker of the current one may still think it holds the lease (it
        was stopped or suspended, not judged expired: see
        :func:`~leasehold.lease.protocol.hold_may_outlive`). It waits until
        this operator has seen the lease unchanged for its
        ``leaseDurationSeconds`` plus the expiry margin, on the expiry
        judge's monotonic clock: the bound a reclaim waits. A fresh operator
        counts from its first sight, as for a reclaim.

        Args:
            lease: the lease as read, before the take-over or resume.
            body: the job, to tell the wait once in an Event (``None``: no Event).

        Returns:
            Seconds left (``0.0`` when the earlier hold surely ended or its
            window has passed).
        """
        key = _clock_key(lease)
        left = self.hold_window_left(lease)
        if left <= 0:
            self._waits_told.pop(key, None)
            return 0.0
        if lease.record.held and not lease.record.suspended:
            # A take-over of a lease its earlier incarnation's pod still holds:
            # stop it first (no renewal lands after this), then wait it out.
            stopped = self._store.stop(lease)
            if isinstance(stopped, Accepted):
                self._wrote_lease(stopped.lease)
            return self.lease_clock.remaining_if_seen(
                key, str(stopped.lease.generation), lease.record.lease_duration_seconds
            )
        if body is not None and self._waits_told.get(key) != lease.generation:
            self._waits_told[key] = lease.generation
            self.record_event(
                body,
                "Normal",
                "WaitingForEarlierHolder",
                f"The worker of fencing token {lease.record.fencing_token} may still run until"
                f" its lease window ends: the next token is issued in {left:.0f}s at the"
                " latest (the lease unchanged for leaseDurationSeconds plus the margin).",
            )
        log.info(
            "%s/%s: the holder of token %d was ended without expiry; next claim in %.1fs",
            lease.namespace,
            lease.name,
            lease.record.fencing_token,
            left,
        )
        return left

    def hold_window_left(self, lease: StoredLease) -> float:
        """Seconds until the earlier hold of ``lease`` has surely ended; no write, no Event.

        What :meth:`earlier_hold_wait` waits for, read alone (a cron job asks
        it before it prunes a replaced run's lease).

        Args:
            lease: the lease as read.

        Returns:
            ``0.0`` when the hold surely ended
            (:func:`~leasehold.lease.protocol.hold_may_outlive`), else the
            seconds left of its window on the expiry judge's clock (``<= 0``:
            passed).
        """
        if not hold_may_outlive(lease.record, reclaimed=last_reclaim_reason(lease) is not None):
            return 0.0
        return self.lease_clock.remaining_if_seen(
            _clock_key(lease), str(lease.generation), lease.record.lease_duration_seconds
        )

    def wrote_lease(self, lease: StoredLease) -> None:
        """Note a lease version this operator wrote (its watch event needs no reconcile)."""
        self._wrote_lease(lease)

    def write_status(
        self, namespace: str, name: str, body: dict[str, Any], status: LeasedJobStatus
    ) -> None:
        """Write a job's status, conditioned on the version read (see ``_write_status``)."""
        self._write_status(namespace, name, body, status)

    def release_domain_if_namespace_goes(self, lease: StoredLease) -> None:
        """Drop a deleted lease's domain finalizer once its namespace is deleted."""
        self._release_domain_if_namespace_goes(lease)

    def bind_own_pod(self, body: dict[str, Any], lease: StoredLease) -> None:
        """Bind a held, unbound push lease to its pod, if this job created that pod."""
        self._bind_own_pod(body, lease)

    def start_pod(
        self,
        job: LeasedJob,
        body: dict[str, Any],
        plan: Plan,
        token: int,
        lease: StoredLease,
        index: int | None = None,
    ) -> Plan:
        """Create the attempt's pod (of completion ``index``, if given) and bind the lease."""
        return self._start_pod(job, body, plan, token, lease, index)

    def _lock(self, namespace: str, name: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(f"{namespace}/{name}", threading.Lock())

    # -- reading --------------------------------------------------------------

    def _get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._read_job(namespace, name)[0]

    def _read_job(
        self, namespace: str, name: str, fresh: bool = False
    ) -> tuple[dict[str, Any] | None, datetime | None]:
        """The job's body and the API server's time when it answered (``Date`` header).

        From :attr:`jobs` (no server time) once this process measures the job's
        age (:class:`~leasehold.controller.deadline.JobClocks`): only the first
        sight needs the server's clock. ``fresh``: always a GET (its answer, or
        its absence, replaces what the cache held).
        """
        cached = None if fresh else self.jobs.get(namespace, name)
        if cached is not None:
            uid = str((cached.get("metadata") or {}).get("uid", ""))
            if self._job_clocks.knows(f"{namespace}/{name}", uid):
                return cached, None
        try:
            body, _, headers = self._custom.get_namespaced_custom_object_with_http_info(
                names.GROUP, names.VERSION, namespace, names.PLURAL_LEASED_JOBS, name
            )
        except ApiException as exc:
            if exc.status == 404:
                self.jobs.drop(namespace, name)
                return None, None
            raise api_error(exc, f"get LeasedJob {namespace}/{name}") from exc
        if fresh:
            # put keeps a newer version a watch event brought meanwhile: dropping
            # it first would let this older read replace it, and a reconcile
            # for that newer version would plan on this one.
            self.jobs.put(cast("dict[str, Any]", body))
        return cast("dict[str, Any]", body), _server_time(headers)

    def _elapsed(self, job: LeasedJob, server_now: datetime | None) -> float:
        """How long the job has existed (API server clocks, then this process's monotonic)."""
        meta = job.metadata
        created = meta.get("creationTimestamp")
        if not created:
            return 0.0
        return self._job_clocks.elapsed_seconds(
            f"{meta.get('namespace')}/{meta.get('name')}",
            str(meta.get("uid", "")),
            datetime.fromisoformat(str(created).replace("Z", "+00:00")),
            server_now,
        )

    def _wrote_lease(self, lease: StoredLease) -> None:
        self.own_writes.record("JobLease", lease.namespace, lease.name, lease.resource_version)
        self.leases.put(lease.body)

    def _cached_lease(self, namespace: str, name: str) -> StoredLease | None:
        """The job's lease as :attr:`leases` holds it; ``None``: a miss, not yet confirmed.

        A stale body is caught by the write it leads to (``test`` ops,
        ``resourceVersion``), which re-reads. A miss is confirmed by
        :meth:`_confirmed_lease` before anything but the lease's create is
        planned on it: the watch's first LIST may still be on its way through
        the event loop, and a job cancelled "before any attempt" must not be
        judged so while its lease exists. The create needs no such read: it
        is its own check (an existing lease answers 409, read then).
        """
        cached = self.leases.get(namespace, reconcile.lease_name(name))
        return to_stored(cached) if cached is not None else None

    def _confirmed_lease(self, namespace: str, name: str) -> StoredLease | None:
        """The job's lease read with a GET (a cache miss confirmed); ``None``: none exists."""
        try:
            return self._store.get(namespace, reconcile.lease_name(name))
        except LeaseNotFoundError:
            return None

    # -- reconcile --------------------------------------------------------------

    def reconcile(self, namespace: str, name: str) -> Plan | None:
        """Bring one LeasedJob one step closer to done, and report its status.

        Args:
            namespace: the job's namespace.
            name: the job's name.

        Returns:
            The plan that was carried out, or ``None`` if the job is gone or
            invalid (an invalid job gets a ``Ready=False`` condition and an
            Event instead).

        Raises:
            TransientStoreError: the API server failed; call again later.
            StoreError: an unexpected refusal (e.g. RBAC).
        """
        with self._lock(namespace, name):
            try:
                return self._reconcile(namespace, name, fresh=False)
            except LeaseNotFoundError as exc:
                # A write found the cached lease gone (deleted between two
                # watches): forget it, so the next try reads the truth.
                self.leases.drop(namespace, reconcile.lease_name(name))
                raise TransientStoreError(f"reconcile {namespace}/{name}: {exc}") from exc

    def _reconcile(self, namespace: str, name: str, fresh: bool) -> Plan | None:
        """:meth:`reconcile`, under the job's lock; ``fresh``: GET the job, not the cache.

        A plan made on the cached job that would act (claim, start a pod, stop,
        take over, ...) is made again on a fresh read first: a cache that
        missed the job's deletion or recreation (a paused peer, a re-list)
        must never lead to a write for an incarnation that is gone. Status
        writes need no such read: they are conditioned on the version read.
        """
        body, server_now = self._read_job(namespace, name, fresh=fresh)
        if body is None:
            self._job_clocks.forget(f"{namespace}/{name}")
            self._finish_clocks.forget(f"{namespace}/{name}")
            self.pods.forget(namespace, name)
            self._retire_lease(namespace, name)
            self.indexed.retire(namespace, name)
            return None
        try:
            job = LeasedJob.model_validate(body)
        except ValidationError as exc:
            self._report_invalid(body, exc)
            return None
        if indexed.is_multi(job):  # one lease per index: controller/indexed_service.py
            if server_now is None and not fresh:  # its plans act per index: read it
                return self._reconcile(namespace, name, fresh=True)
            plan = self.indexed.reconcile(job, body, self._elapsed(job, server_now))
            return self._after_finish(job, body, plan, server_now)
        lease = self._cached_lease(namespace, name)
        miss_read = False  # a cache miss is read (GET) at most once per reconcile
        status = job.status or LeasedJobStatus()
        for _ in range(5):
            if lease is not None:
                self._release_domain_if_namespace_goes(lease)
                if lease.record.job_name != name:  # an index lease of job <name minus -i>
                    self._report_lease_name_taken(job, body, lease)
                    return None
            holder = lease.record.holder_identity if lease else None
            record = lease.record if lease else None
            wanted = reconcile.wants_pod_facts(job, record)
            plan = reconcile.plan(
                job,
                record,
                now=self._clock(),
                pod_created_for_holder=holder is not None and status.pod_name == holder,
                elapsed_seconds=self._elapsed(job, server_now),
                last_reclaim_reason=last_reclaim_reason(lease) if lease else None,
                pods=(
                    self._pod_facts(
                        namespace,
                        name,
                        listed=record is not None and reconcile.pod_facts_judge_an_end(record),
                    )
                    if wanted
                    else None
                ),
            )
            if plan.action is not Action.NONE and server_now is None and not fresh:
                return self._reconcile(namespace, name, fresh=True)
            if lease is None and not miss_read and plan.action is not Action.CREATE_LEASE:
                miss_read = True  # the create is its own check; any other plan reads first
                lease = self._confirmed_lease(namespace, name)
                continue  # plan again on what the GET found
            try:
                plan = self._carry_out(job, body, lease, plan)
            except _LeaseMoved as moved:
                lease = moved.lease  # e.g. a completion landed before our stop: it wins
                continue  # its job name is checked at the loop's top
            break
        else:
            raise TransientStoreError(f"reconcile {namespace}/{name}: lease kept moving")
        for event in plan.events:
            self.record_event(body, event.type, event.reason, event.message)
        written = self._write_status(namespace, name, body, plan.status)
        plan = self._after_finish(job, body, plan, server_now)
        if not written and server_now is None:
            # Planned on a cached body that was stale: read it (a GET) and plan again.
            plan = replace(plan, requeue_after_seconds=0.0)
        return plan

    def _after_finish(
        self, job: LeasedJob, body: dict[str, Any], plan: Plan, server_now: datetime | None
    ) -> Plan:
        """Delete the job once its ``ttlSecondsAfterFinished`` passed, or look again then."""
        left = self._finish_clocks.seconds_left(job, body, plan.status, server_now, COMPONENT)
        if left is not None and left <= 0:
            self._delete_finished(job, body)
        elif left is not None:
            plan = replace(plan, requeue_after_seconds=left)
        return plan

    def _delete_finished(self, job: LeasedJob, body: dict[str, Any]) -> None:
        """Delete a finished job whose ``ttlSecondsAfterFinished`` passed, and its pods.

        Only this incarnation (a UID precondition); its pods are deleted here
        too, not left to the garbage collector. The JobLease stays: it is
        the name's fencing domain.
        """
        namespace, name = _ns_name(body)
        ttl = job.spec.ttl_seconds_after_finished
        self.record_event(
            body,
            "Normal",
            "TTLExpired",
            f"Deleting the job: it finished more than ttlSecondsAfterFinished={ttl}s ago"
            " (its JobLease stays, so the name's fencing tokens never repeat).",
        )
        self._delete_stale_pods(namespace, name, 2**62, owner_uid=str(body["metadata"]["uid"]))
        options = client.V1DeleteOptions(
            preconditions=client.V1Preconditions(uid=str(body["metadata"]["uid"])),
            propagation_policy="Background",
        )
        try:
            self._custom.delete_namespaced_custom_object(
                names.GROUP, names.VERSION, namespace, names.PLURAL_LEASED_JOBS, name, body=options
            )
        except ApiException as exc:
            if exc.status not in (404, 409):  # gone, or another incarnation now
                raise api_error(exc, f"delete LeasedJob {namespace}/{name}") from exc
        log.info("deleted %s/%s: ttlSecondsAfterFinished=%ss passed", namespace, name, ttl)

    def _carry_out(
        self, job: LeasedJob, body: dict[str, Any], lease: StoredLease | None, plan: Plan
    ) -> Plan:
        namespace, name = _ns_name(body)
        if plan.action is Action.STOP and lease is not None:
            # Stop first, then delete pods: whichever of this stop and a
            # worker's completion reaches the API server first wins, and the
            # status must tell the one that did.
            result = self._store.stop(lease)
            if not isinstance(result, Accepted):
                raise _LeaseMoved(result.lease)
            self._wrote_lease(result.lease)
            if plan.delete_pods_below_token:
                self._delete_pods(namespace, name, plan)
            return plan
        if plan.action is Action.SUSPEND and lease is not None:
            # As a stop: the lease first (a completion that landed first
            # stands), then the suspended attempt's pods.
            suspended = self._store.suspend(lease)
            if not isinstance(suspended, Accepted):
                raise _LeaseMoved(suspended.lease)
            self._wrote_lease(suspended.lease)
            if plan.delete_pods_below_token:
                self._delete_pods(namespace, name, plan)
            return plan
        if plan.action in (Action.RESUME, Action.TAKE_OVER_LEASE) and lease is not None:
            wait = self.earlier_hold_wait(lease, body)
            if wait > 0:
                return replace(plan, action=Action.NONE, requeue_after_seconds=wait)
        if plan.action is Action.RESUME and lease is not None:
            resumed = self._store.resume(lease)
            if isinstance(resumed, Accepted):
                self._wrote_lease(resumed.lease)
            raise _LeaseMoved(resumed.lease)  # plan again on it: the next claim
        if plan.action is Action.RETRY and lease is not None:
            reopened = self._store.reopen(lease)
            if isinstance(reopened, Accepted):
                self._wrote_lease(reopened.lease)
            raise _LeaseMoved(reopened.lease)  # plan again on it: the next claim
        if plan.action is Action.EXCUSE and lease is not None:
            # A disruption or an ignored failure: no budget used (a Failed
            # completion is reopened uncounted in the same write).
            if lease.record.completion is not None:
                excused = self._store.reopen(lease, counted=False)
            else:
                excused = self._store.excuse(lease)
            if isinstance(excused, Accepted):
                self._wrote_lease(excused.lease)
                for event in plan.events:
                    self.record_event(body, event.type, event.reason, event.message)
            raise _LeaseMoved(excused.lease)  # plan again on it: the next claim
        if plan.delete_pods_below_token:
            self._delete_pods(namespace, name, plan)
        if plan.action is Action.CREATE_LEASE:
            return self._create_lease(job, body, plan)
        if plan.action is Action.TAKE_OVER_LEASE and lease is not None:
            taken = self._store.rearm(
                lease,
                job_uid=str(body["metadata"]["uid"]),
                mode=_mode(job),
                lease_duration_seconds=job.spec.lease_duration_seconds,
                max_attempts=job.spec.max_attempts + job.spec.backoff_limit,
                startup_deadline_seconds=(
                    job.spec.startup_deadline_seconds if job.spec.template is not None else None
                ),
                suspended=job.spec.suspend,
                work=_work(job),
            )
            if isinstance(taken, Accepted):
                self._wrote_lease(taken.lease)
            # Plan again on it at once, as after a reopen: the take-over's own
            # watch event is skipped as this operator's write, so nothing else
            # would trigger the new incarnation's first claim.
            raise _LeaseMoved(taken.lease)
        if plan.action is Action.CLAIM_AND_START and lease is not None:
            assert plan.pod_name is not None
            claimed = self._store.claim(namespace, lease.name, plan.pod_name, observed=lease)
            self.leases.put(claimed.lease.body)
            if not isinstance(claimed, Accepted):
                log.info("claim for %s/%s refused: %s", namespace, plan.pod_name, claimed.rejection)
                raise TransientStoreError(f"claim {namespace}/{name}: {claimed.rejection}")
            # The claim's own watch event is NOT skipped: this reconcile's
            # status was planned before the claim (Claiming); the next one,
            # from that event, reports the job Running.
            if claimed.token != int(plan.pod_name.rsplit("-", 1)[-1]):
                # Someone claimed and released in between; the name would lie.
                # The cached claim is forgotten first: should the release's
                # answer be lost, the retry reads the lease, not our claim.
                self.leases.drop(namespace, lease.name)
                self._store.release(namespace, lease.name, plan.pod_name, claimed.token)
                raise TransientStoreError(f"claim {namespace}/{name}: token moved, retrying")
            self.record_event(
                body,
                "Normal",
                "Claimed",
                f"Lease claimed for pod {plan.pod_name} under fencing token {claimed.token}.",
            )
            return self._start_pod(job, body, plan, claimed.token, claimed.lease)
        if plan.action is Action.START_POD and lease is not None:
            assert plan.pod_name is not None
            return self._start_pod(job, body, plan, lease.record.fencing_token, lease)
        if lease is not None and job.spec.template is not None:
            self._bind_own_pod(body, lease)
        return plan

    def _bind_own_pod(self, body: dict[str, Any], lease: StoredLease) -> None:
        """Bind a held, unbound push lease to its pod, if this job created that pod.

        The bind right after the pod create can fail (a crash, an API error);
        until it lands the pod's renewals are refused as ``NOT_BOUND``. Only
        a pod whose controller ownerReference is this job's UID is bound: a
        pod of the holder's name that someone else made never is.
        """
        record = lease.record
        if record.holder_identity is None or record.holder_uid is not None:
            return
        namespace, _ = _ns_name(body)
        try:
            pod: Any = self._core.read_namespaced_pod(record.holder_identity, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return  # not created yet, or gone: the plan takes care of it
            raise api_error(exc, f"get pod {namespace}/{record.holder_identity}") from exc
        job_uid = str(body["metadata"]["uid"])
        refs = pod.metadata.owner_references or []
        if pod.metadata.deletion_timestamp is None and any(
            ref.controller and ref.uid == job_uid for ref in refs
        ):
            self._bind(
                lease, record.holder_identity, record.fencing_token, str(pod.metadata.uid), job_uid
            )

    def _create_lease(self, job: LeasedJob, body: dict[str, Any], plan: Plan) -> NoReturn:
        """Create the job's lease, then raise :class:`_LeaseMoved` to plan again on it."""
        namespace, name = _ns_name(body)
        status = job.status or LeasedJobStatus()
        carried = status.fencing_token or 0
        base = max(0, carried - (status.attempts or 0))
        # No ownerReference: the lease is the name's fencing domain and must
        # outlive this job (docs/architecture.md, "Across a job's whole life").
        try:
            created = self._store.create(
                namespace,
                reconcile.lease_name(name),
                job_name=name,
                lease_duration_seconds=job.spec.lease_duration_seconds,
                max_fencing_token=max(
                    base + job.spec.max_attempts + job.spec.backoff_limit, carried
                ),
                initial_fencing_token=carried,
                labels={names.LABEL_JOB: name},
                startup_deadline_seconds=(
                    job.spec.startup_deadline_seconds if job.spec.template is not None else None
                ),
                job_uid=str(body["metadata"]["uid"]),
                mode=_mode(job),
                finalizers=[names.FINALIZER_DOMAIN],
                suspended=job.spec.suspend,
                work=_work(job),
            )
        except WriteRefusedError as exc:
            if exc.status != 409:
                raise
            # It exists: the lease cache had not seen it yet. Plan again on it.
            current = self._store.get(namespace, reconcile.lease_name(name))
            self.leases.put(current.body)
            raise _LeaseMoved(current) from exc
        self.leases.put(created.body)
        if carried:
            self.record_event(
                body,
                "Warning",
                "LeaseRecreated",
                f"The JobLease was missing; recreated it at fencing token {carried} so tokens"
                " never go back.",
            )
        # Plan again on the lease just created, in this reconcile: its first
        # claim and pod need not wait for the lease's watch event, and the job's
        # status is written once for both steps (one status write fewer per job).
        raise _LeaseMoved(created)

    def _retire_lease(self, namespace: str, name: str) -> None:
        """The job is gone: take its lease back for good, keeping it as the domain.

        The lease outlives the job (it is the name's fencing domain), so no
        worker may hold or claim it any more: the holder is removed and the
        cap lowered to the current token. A job created again under the same
        name takes the lease over (:meth:`LeaseStore.rearm`).
        """
        lease = self._cached_lease(namespace, name) or self._confirmed_lease(namespace, name)
        if lease is None:
            return
        self._release_domain_if_namespace_goes(lease)
        record = lease.record
        cap = record.max_fencing_token
        if record.completion is not None or (
            record.holder_identity is None and cap is not None and cap <= record.fencing_token
        ):
            return
        result = self._store.stop(lease)
        if isinstance(result, Accepted):
            self._wrote_lease(result.lease)
            log.info(
                "job %s/%s is gone: lease stopped at fencing token %d",
                namespace,
                name,
                record.fencing_token,
            )
        elif result.lease.record.completion is None:
            raise TransientStoreError(f"retire lease {namespace}/{name}: changed, retrying")

    def _release_domain_if_namespace_goes(self, lease: StoredLease) -> None:
        """Drop the domain finalizer of a deleted lease once its namespace is deleted.

        Until then a deleted JobLease stays (Terminating) and keeps its token,
        so deleting it does not reset the name's fencing domain.
        """
        meta = lease.body.get("metadata") or {}
        if meta.get("deletionTimestamp") is None:
            return
        if names.FINALIZER_DOMAIN not in (meta.get("finalizers") or []):
            return
        try:
            ns: Any = self._core.read_namespace(lease.namespace)
            going = ns.metadata is not None and ns.metadata.deletion_timestamp is not None
        except ApiException as exc:
            if exc.status != 404:
                log.warning(
                    "JobLease %s/%s is being deleted but namespace %s cannot be read (%s):"
                    " keeping the fencing domain",
                    lease.namespace,
                    lease.name,
                    lease.namespace,
                    api_message(exc),
                )
                return
            going = True
        if not going:
            log.info(
                "JobLease %s/%s is being deleted; kept (finalizer %s) as the fencing domain"
                " of its job name until its namespace is deleted",
                lease.namespace,
                lease.name,
                names.FINALIZER_DOMAIN,
            )
            return
        self._store.drop_finalizer(lease.namespace, lease.name, names.FINALIZER_DOMAIN)

    def _start_pod(
        self,
        job: LeasedJob,
        body: dict[str, Any],
        plan: Plan,
        token: int,
        lease: StoredLease,
        index: int | None = None,
    ) -> Plan:
        namespace, _ = _ns_name(body)
        assert plan.pod_name is not None
        pod = reconcile.build_pod(
            job,
            namespace=namespace,
            holder=plan.pod_name,
            token=token,
            owner_uid=str(body["metadata"]["uid"]),
            lease_duration_seconds=lease.record.lease_duration_seconds,
            index=index,
        )
        status = plan.status.model_copy(
            update={
                "pod_name": plan.pod_name,
                "holder_identity": plan.pod_name,
                "fencing_token": token,
                "attempts": token - lease.record.base_fencing_token,
            }
        )
        job_uid = str(body["metadata"]["uid"])
        try:
            created: Any = self._core.create_namespaced_pod(
                namespace, cast(Any, pod), field_manager=COMPONENT
            )
        except ApiException as exc:
            if exc.status == 409:
                return self._pod_exists(body, plan, status, lease, token)
            if is_quota_refusal(exc):
                return self._pod_held_by_quota(body, plan, status, exc)
            if exc.status is not None and 400 <= exc.status < 500 and exc.status != 429:
                return self._pod_rejected(body, plan, lease, exc)
            raise api_error(exc, f"create pod {namespace}/{plan.pod_name}") from exc
        # Known at once, not only when the pod watch delivers it: a stop planned
        # before then (a cancel, a suspend) must see that this pod may exist.
        self.pods.observe(self._to_json(created))
        self._quota_refusals.pop(f"{namespace}/{_ns_name(body)[1]}", None)
        status = _with_conditions(
            job,
            status,
            ("PodCreated", "True", "Created", f"Created pod {plan.pod_name}."),
            now=self._clock(),
        )
        log.info("started pod %s/%s under fencing token %d", namespace, plan.pod_name, token)
        self.record_event(
            body, "Normal", "Started", f"Created pod {plan.pod_name} (fencing token {token})."
        )
        self._bind(lease, plan.pod_name, token, str(created.metadata.uid), job_uid)
        return replace(plan, status=status)

    def _pod_held_by_quota(
        self, body: dict[str, Any], plan: Plan, status: LeasedJobStatus, exc: ApiException
    ) -> Plan:
        """A ResourceQuota refused the pod: transient. Keep the claim, say why, retry later.

        The lease stays held by the pod's name: its expiry clock has not
        started (no renewal yet), only the startup bound runs. Each refusal
        in a row doubles the delay (:data:`QUOTA_BACKOFF_SECONDS`).
        """
        namespace, name = _ns_name(body)
        key = f"{namespace}/{name}"
        refusals = self._quota_refusals.get(key, 0)
        self._quota_refusals[key] = refusals + 1
        delay = QUOTA_BACKOFF_SECONDS[min(refusals, len(QUOTA_BACKOFF_SECONDS) - 1)]
        message = (
            f"Pod {plan.pod_name} was refused by a ResourceQuota; retrying in {delay:g}s:"
            f" {api_message(exc)}"
        )
        log.info("%s: %s", key, message)
        job = LeasedJob.model_validate(body)
        held = _with_conditions(
            job,
            status.model_copy(update={"phase": api.Phase.PENDING, "pod_name": None}),
            ("PodCreated", "False", "QuotaExceeded", message),
            ("Ready", "False", "QuotaExceeded", message),
            now=self._clock(),
        )
        events = list(plan.events)
        if refusals == 0:  # one Event per streak, not one per retry
            events.append(JobEvent("Warning", "QuotaExceeded", message))
        if plan.requeue_after_seconds is not None:
            delay = min(delay, plan.requeue_after_seconds)
        return replace(plan, status=held, events=events, requeue_after_seconds=delay)

    def _bind(
        self, lease: StoredLease, pod_name: str, token: int, pod_uid: str, job_uid: str
    ) -> None:
        """Bind the lease to the pod this operator created (its UID, not its name)."""
        bound = self._store.bind(lease.namespace, lease.name, pod_name, token, pod_uid)
        if isinstance(bound, Accepted):
            self._wrote_lease(bound.lease)
        else:
            log.info(
                "lease %s/%s not bound to pod %s (uid %s, job uid %s): %s",
                lease.namespace,
                lease.name,
                pod_name,
                pod_uid,
                job_uid,
                bound.rejection,
            )

    def _pod_exists(
        self,
        body: dict[str, Any],
        plan: Plan,
        status: LeasedJobStatus,
        lease: StoredLease,
        token: int,
    ) -> Plan:
        """The attempt's pod name is taken: adopt it only if this job created it.

        "Created by this job" is the pod's controller ownerReference naming
        this job's UID (an earlier reconcile crashed after creating it). Any
        other pod of that name (an earlier incarnation's, still terminating;
        one a user made) is not this attempt: the lease is released, so that
        pod can never renew, complete or release it, and the next attempt
        runs under the next token and pod name.
        """
        namespace, _ = _ns_name(body)
        assert plan.pod_name is not None
        job_uid = str(body["metadata"]["uid"])
        try:
            existing: Any = self._core.read_namespaced_pod(plan.pod_name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                raise TransientStoreError(
                    f"pod {namespace}/{plan.pod_name}: gone since create said 409; retrying"
                ) from exc
            raise api_error(exc, f"get pod {namespace}/{plan.pod_name}") from exc
        refs = existing.metadata.owner_references or []
        ours = any(ref.controller and ref.uid == job_uid for ref in refs)
        if ours and existing.metadata.deletion_timestamp is None:
            self._bind(lease, plan.pod_name, token, str(existing.metadata.uid), job_uid)
            return replace(plan, status=status)
        message = (
            f"Pod {plan.pod_name} exists but is not this job's (uid {existing.metadata.uid});"
            f" released fencing token {token} and moving to the next attempt."
        )
        log.warning("%s/%s: %s", namespace, body["metadata"]["name"], message)
        self._store.release(namespace, lease.name, plan.pod_name, token)
        status = plan.status.model_copy(update={"holder_identity": None})
        taken = JobEvent("Warning", "PodNameTaken", message)
        return replace(plan, status=status, events=[*plan.events, taken])

    def _pod_rejected(
        self, body: dict[str, Any], plan: Plan, lease: StoredLease, exc: ApiException
    ) -> Plan:
        """The API server refused the job's pod: a bad template. Fail the job."""
        message = f"The pod template was rejected: {api_message(exc)}"
        log.warning("%s/%s: %s", *_ns_name(body), message)
        current = self._store.get(lease.namespace, lease.name)
        self._store.stop(current)
        status = reconcile.failed_status(
            LeasedJob.model_validate(body),
            plan.status,
            "PodCreateFailed",
            message,
            now=self._clock(),
        )
        return Plan(
            Action.STOP, status, [*plan.events, JobEvent("Warning", "PodCreateFailed", message)]
        )

    def _pod_facts(self, namespace: str, name: str, *, listed: bool = True) -> dict[int, PodFacts]:
        """The job's attempt pods by fencing token (one list), with those already gone.

        A pod the list no longer returns (deleted right after its containers
        stopped, as after an eviction) is told by its last state the pod
        watch saw (:class:`~leasehold.controller.pods.PodMemory`). Without
        ``listed`` (the lease is held: the pods only fill in the attempt's pod
        UID and node), the pod watch's states alone, when a pod watch feeds them.
        """
        if not listed and self.pods.fed:
            return self.pods.recall(namespace, name)
        try:
            pods = self._core.list_namespaced_pod(
                namespace, label_selector=f"{names.LABEL_JOB}={name}"
            )
        except ApiException as exc:
            raise api_error(exc, f"list pods of {namespace}/{name}") from exc
        facts = self.pods.recall(namespace, name)
        for pod in pods.items:
            parsed = pod_facts(self._to_json(pod))
            if parsed is not None:
                facts[parsed[0]] = parsed[1]
        return facts

    def _delete_pods(self, namespace: str, name: str, plan: Plan) -> None:
        """Delete the pods the plan fenced off, but those its retention keeps.

        No list when the pod watch saw no pod below the token (a job's first
        attempt, the usual case).
        """
        if not self.pods.may_have_below(namespace, name, plan.delete_pods_below_token):
            return
        self._delete_stale_pods(
            namespace,
            name,
            plan.delete_pods_below_token,
            keep_ended=plan.keep_ended_pods,
            keep_tokens=plan.keep_pod_tokens,
        )

    def _delete_stale_pods(
        self,
        namespace: str,
        name: str,
        below_token: int,
        *,
        keep_ended: bool = False,
        keep_tokens: frozenset[int] = frozenset(),
        owner_uid: str | None = None,
    ) -> None:
        pods = self._core.list_namespaced_pod(namespace, label_selector=f"{names.LABEL_JOB}={name}")
        for pod in pods.items:
            meta = pod.metadata
            if meta is None or meta.name is None or meta.deletion_timestamp is not None:
                continue
            if keep_ended and pod.status is not None and pod.status.phase in _ENDED:
                continue  # spec.podRetention: All
            if owner_uid is not None and not any(
                ref.uid == owner_uid for ref in meta.owner_references or []
            ):
                continue  # another incarnation's pod
            try:
                token = int((meta.labels or {}).get(names.LABEL_TOKEN, "0"))
            except ValueError:
                continue
            if token >= below_token or token in keep_tokens:
                continue
            log.info("deleting stale pod %s/%s (token %d)", namespace, meta.name, token)
            try:
                # The pod's own grace period applies: its lease is already
                # gone, so anything it still does under its token is fenced.
                self._core.delete_namespaced_pod(meta.name, namespace)
            except ApiException as exc:
                if exc.status != 404:
                    raise api_error(exc, f"delete pod {namespace}/{meta.name}") from exc

    # -- expiry ------------------------------------------------------------------

    def reclaim(
        self,
        namespace: str,
        lease_name: str,
        judged_generation: int,
        observed: dict[str, Any] | None = None,
        reason: ExpiryReason = ExpiryReason.LEASE_EXPIRED,
    ) -> ReclaimOutcome:
        """Reclaim lease ``namespace``/``lease_name``, judged expired at ``judged_generation``.

        The expiry clock saw no spec change since it first saw that generation, for
        longer than the duration plus the margin. The write is conditioned on a
        ``resourceVersion`` of that generation (of ``observed``, the body as last
        watched, when given; else of a fresh read), so a renewal that landed
        meanwhile makes it fail; then it re-reads, and if the generation moved,
        nothing is reclaimed. ``reason`` says which bound the attempt went past
        (the lease duration after it started, or the startup bound before): it
        is told in the Event and in the lease's ``status.lastReclaimReason``.

        Runs under the job's lock, as its reconciles do: none of them may read
        the lease between the reclaim and its note (it would record the ended
        attempt as ``Reclaimed`` when it went past its startup bound).

        Raises:
            TransientStoreError: the API server failed; try again later.
        """
        job_name = str(((observed or {}).get("spec") or {}).get("jobName") or lease_name)
        with self._lock(namespace, job_name):
            return self._reclaim(namespace, lease_name, judged_generation, observed, reason)

    def _reclaim(
        self,
        namespace: str,
        lease_name: str,
        judged_generation: int,
        observed: dict[str, Any] | None,
        reason: ExpiryReason,
    ) -> ReclaimOutcome:
        judged_uid = ((observed or {}).get("metadata") or {}).get("uid")
        for attempt in range(8):
            try:
                lease = None
                if attempt == 0 and observed is not None:
                    with contextlib.suppress(InvalidLeaseError):
                        lease = to_stored(observed)  # the watch's copy: no read
                if lease is None:
                    lease = self._store.get(namespace, lease_name)
            except LeaseNotFoundError:
                return ReclaimOutcome(False, 0, None, "Missing")
            record = lease.record
            if judged_uid and lease.body.get("metadata", {}).get("uid") != judged_uid:
                # Deleted and recreated under the same name: the generation
                # judged belongs to another object; never reclaim this one.
                return ReclaimOutcome(False, record.fencing_token, None, "Recreated")
            if record.completion is not None:
                return ReclaimOutcome(False, record.fencing_token, None, "Completed")
            if lease.generation != judged_generation:
                return ReclaimOutcome(
                    False, record.fencing_token, record.holder_identity, "Renewed"
                )
            if record.holder_identity is None:
                return ReclaimOutcome(False, record.fencing_token, None, "Unheld")
            result = self._store.reclaim(lease)
            if isinstance(result, Accepted):
                self._wrote_lease(result.lease)
                log.info(
                    "reclaimed %s/%s from %s (token %d): no renewal seen for %ds + margin",
                    namespace,
                    lease_name,
                    record.holder_identity,
                    record.fencing_token,
                    record.lease_duration_seconds,
                )
                self._note_reclaim(result.lease, reason)
                job = _owner_job(lease)
                if job is not None:
                    self.record_event(job, "Warning", *_reclaim_event(lease, reason))
                return ReclaimOutcome(
                    True, record.fencing_token, record.holder_identity, "Reclaimed"
                )
            # 409: something changed; re-read and judge again.
        raise TransientStoreError(f"reclaim {namespace}/{lease_name}: kept conflicting")

    def _note_reclaim(self, lease: StoredLease, reason: ExpiryReason) -> None:
        """Record on the lease's status which token was taken back, and why.

        The job's next reconcile reads it to say why the attempt ended. A
        failure is logged only: the reclaim itself stands.
        """
        patch = {
            "status": {
                "lastReclaimedToken": lease.record.fencing_token,
                "lastReclaimReason": str(reason),
            }
        }
        try:
            written: Any = self._custom.patch_namespaced_custom_object_status(
                names.GROUP,
                names.VERSION,
                lease.namespace,
                names.PLURAL_JOB_LEASES,
                lease.name,
                patch,
                field_manager=COMPONENT,
            )
        except ApiException as exc:
            log.warning(
                "could not note the reclaim on %s/%s: %s",
                lease.namespace,
                lease.name,
                api_message(exc),
            )
            return
        version = (written.get("metadata") or {}).get("resourceVersion")
        self.own_writes.record("JobLease", lease.namespace, lease.name, str(version or ""))
        if isinstance(written, dict):
            # Its watch event is skipped as our own: the reconcile the reclaim
            # triggers must read the reason from the cache.
            self.leases.put(written)

    # -- reporting -----------------------------------------------------------------

    def _write_status(
        self, namespace: str, name: str, body: dict[str, Any], status: LeasedJobStatus
    ) -> bool:
        """Write the status unless unchanged; ``False`` if refused (the body read was stale)."""
        new = status.model_dump(mode="json", by_alias=True, exclude_none=True)
        old = body.get("status") or {}
        if new == old:
            return True
        # Conditioned on the version the reconcile read: a change in between
        # (409) has its own watch event, whose reconcile writes the status.
        # So a written version holds nothing this reconcile has not seen,
        # and its own watch event can be skipped (OwnWrites).
        read_version = (body.get("metadata") or {}).get("resourceVersion")
        patch: dict[str, Any] = {"status": {**{k: None for k in old if k not in new}, **new}}
        if read_version:
            patch["metadata"] = {"resourceVersion": read_version}
        try:
            written: Any = self._custom.patch_namespaced_custom_object_status(
                names.GROUP,
                names.VERSION,
                namespace,
                names.PLURAL_LEASED_JOBS,
                name,
                patch,
                field_manager=COMPONENT,
            )
        except ApiException as exc:
            if exc.status == 404:
                # Gone (a cached body outlived it): forget it; the requeue's GET retires it.
                self.jobs.drop(namespace, name)
                return False
            if exc.status == 409:
                log.debug(
                    "status of %s/%s: changed since read; its event reconciles", namespace, name
                )
                self.jobs.drop(namespace, name)
                return False
            raise api_error(exc, f"patch status of LeasedJob {namespace}/{name}") from exc
        if read_version:
            version = (written.get("metadata") or {}).get("resourceVersion")
            self.own_writes.record("LeasedJob", namespace, name, str(version or ""))
        if isinstance(written, dict):
            self.jobs.put(written)  # the next reconcile plans on what was written
        return True

    def _report_lease_name_taken(
        self, job: LeasedJob, body: dict[str, Any], lease: StoredLease
    ) -> None:
        """The job's lease name is another job's lease (an index of an Indexed job): wait.

        Taking it over would take that index's fencing domain from a live job.
        """
        namespace, name = _ns_name(body)
        message = (
            f"JobLease {name} belongs to job {lease.record.job_name} (one of its indexes);"
            " this job cannot run under that name: rename it."
        )
        log.warning("%s/%s: %s", namespace, name, message)
        status = _with_conditions(
            job,
            job.status or LeasedJobStatus(),
            ("Ready", "False", "LeaseNameTaken", message),
            now=self._clock(),
        )
        if status != job.status:
            self.record_event(body, "Warning", "LeaseNameTaken", message)
        self._write_status(namespace, name, body, status)

    def _report_invalid(self, body: dict[str, Any], exc: ValidationError) -> None:
        namespace, name = _ns_name(body)
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        message = f"Invalid LeasedJob: {where}: {first['msg']}"
        log.warning("%s/%s: %s", namespace, name, message)
        self.record_event(body, "Warning", "InvalidSpec", message)
        generation = body.get("metadata", {}).get("generation")
        conditions = reconcile.set_condition(
            [],
            "Ready",
            api.ConditionStatus.FALSE,
            "InvalidSpec",
            message,
            now=self._clock(),
            generation=generation,
        )
        status = LeasedJobStatus(conditions=conditions, observed_generation=generation)
        self._write_status(namespace, name, body, status)

    def record_event(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """Record a core/v1 Event about ``obj``; failures are logged, not raised.

        Args:
            obj: the involved object's body (needs apiVersion, kind, metadata).
            type_: ``Normal`` or ``Warning``.
            reason: CamelCase reason.
            message: what happened, for people.
        """
        meta = obj.get("metadata", {})
        now = self._clock()
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "generateName": f"{meta.get('name', 'x')}.",
                "namespace": meta.get("namespace"),
            },
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "uid": meta.get("uid"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": COMPONENT},
            "reportingComponent": f"{names.GROUP}/operator",
            "reportingInstance": self._instance[:128],
            "firstTimestamp": format_time(now).split(".")[0] + "Z",
            "lastTimestamp": format_time(now).split(".")[0] + "Z",
            "count": 1,
        }
        try:
            self._core.create_namespaced_event(str(meta.get("namespace")), cast(Any, event))
        except ApiException as exc:
            log.warning(
                "could not record Event %s on %s: %s", reason, meta.get("name"), api_message(exc)
            )


def is_quota_refusal(exc: ApiException) -> bool:
    """Whether the API server refused a create because a ResourceQuota is used up.

    Such a ``403 Forbidden`` is transient (pods finish, quotas are raised),
    unlike a refusal of the pod itself.

    Args:
        exc: the client's exception.

    Returns:
        ``True`` for a 403 whose message says ``exceeded quota``.
    """
    return exc.status == 403 and "exceeded quota" in api_message(exc)


def _with_conditions(
    job: LeasedJob,
    status: LeasedJobStatus,
    *conds: tuple[str, str, str, str],
    now: datetime,
) -> LeasedJobStatus:
    """``status`` with conditions ``(type, status, reason, message)`` set."""
    generation = job.metadata.get("generation")
    conditions = list(status.conditions or [])
    for type_, cstatus, reason, message in conds:
        conditions = reconcile.set_condition(
            conditions,
            type_,
            api.ConditionStatus(cstatus),
            reason,
            message,
            now=now,
            generation=int(generation) if generation is not None else None,
        )
    return status.model_copy(update={"conditions": conditions})


def _ns_name(body: dict[str, Any]) -> tuple[str, str]:
    meta = body["metadata"]
    return str(meta["namespace"]), str(meta["name"])


def _reclaim_event(lease: StoredLease, reason: ExpiryReason) -> tuple[str, str]:
    """The ``(reason, message)`` of the Event recorded on a reclaimed job."""
    record = lease.record
    startup = lease.body.get("spec", {}).get("startupDeadlineSeconds")
    if reason is ExpiryReason.STARTUP_DEADLINE_EXCEEDED:
        return (
            str(reason),
            f"Attempt {record.fencing_token} ({record.holder_identity}) did not start within"
            f" startupDeadlineSeconds={startup}: no renewal and no running pod; took back"
            f" fencing token {record.fencing_token}.",
        )
    return (
        "Reclaimed",
        f"Lease expired: no renewal from {record.holder_identity} for"
        f" {record.lease_duration_seconds}s; took back fencing token {record.fencing_token}.",
    )


def last_reclaim_reason(lease: StoredLease) -> str | None:
    """Why the lease's current token was taken back, if it was (its status says).

    Args:
        lease: the stored lease.

    Returns:
        ``LeaseExpired``, ``StartupDeadlineExceeded``, or ``None`` when the
        current token was not reclaimed (or the note is missing).
    """
    status = lease.body.get("status") or {}
    if status.get("lastReclaimedToken") != lease.record.fencing_token:
        return None
    reason = status.get("lastReclaimReason")
    return str(reason) if reason else None


def _owner_job(lease: StoredLease) -> dict[str, Any] | None:
    """The LeasedJob incarnation the lease serves (``spec.jobUID``), without a read.

    Enough to record an Event about the job (apiVersion, kind, name, uid).
    """
    if lease.record.job_uid is None:
        return None
    return {
        "apiVersion": names.API_VERSION,
        "kind": "LeasedJob",
        "metadata": {
            "name": lease.record.job_name,
            "namespace": lease.namespace,
            "uid": lease.record.job_uid,
        },
    }


def _mode(job: LeasedJob) -> api.LeaseMode:
    """Push when the job has a pod template (the operator claims), else pull."""
    return api.LeaseMode.PUSH if job.spec.template is not None else api.LeaseMode.PULL


def _work(job: LeasedJob) -> WorkItem:
    """What the job's lease carries for a pull-mode claimer: params, priority, creation."""
    created = job.metadata.get("creationTimestamp")
    return WorkItem(
        params=job.spec.params,
        priority=job.spec.priority,
        job_created=(
            datetime.fromisoformat(str(created).replace("Z", "+00:00")) if created else None
        ),
    )
