"""Make an index's lease: its own fencing domain, at a token that never goes back.

Why this module exists: creating an index lease has cases of its own, apart
from planning and carrying out an index's steps
(:mod:`leasehold.controller.act.indexed`): a create refused because the name
exists (this index's lease, or another's), a lease under the index's legacy
name (``<job>-<index>``, stopped for good first, its token carried on), a
lease that went missing (recreated above its pods' tokens), and a cron job's
run, whose index leases are made inside the token range its cron job
reserved, read from the run's own lease (docs/schedules.md).

Blocking calls; used by :class:`~leasehold.controller.act.indexed.IndexedActor`
under the job's lock.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from leasehold import names
from leasehold.controller.act import domain
from leasehold.controller.act.attempts import Attempts
from leasehold.controller.act.context import Context
from leasehold.controller.plan import indexed
from leasehold.controller.plan.indexed import IndexStep
from leasehold.controller.plan.single import Action, JobEvent, PodFacts
from leasehold.lease.api import LeasedJob
from leasehold.lease.errors import LeaseNotFoundError, WriteRefusedError
from leasehold.lease.leaseops import stored_from_body
from leasehold.lease.protocol import lease_is_final
from leasehold.lease.store import Accepted, StoredLease, new_lease_body

log = logging.getLogger(__name__)

MAX_REPLANS = 4
"""Steps one index may take in one reconcile (create, claim, start; or reopen, claim, start)."""

NAME_TAKEN_RECHECK_SECONDS = 60.0
"""How soon to try again an index whose lease name another lease holds: that
lease is not this job's, so its deletion brings no event for this job."""


def cron_of(body: dict[str, Any]) -> str | None:
    """The LeasedCronJob whose run this job is (its controller ownerReference), or ``None``.

    A run of several completions makes its index leases inside the token
    range its cron job reserved (:meth:`IndexLeaseCreator._create_in_run`).
    """
    for ref in body["metadata"].get("ownerReferences") or []:
        if (
            ref.get("controller")
            and ref.get("kind") == "LeasedCronJob"
            and ref.get("apiVersion") == names.API_VERSION
        ):
            return str(ref.get("name"))
    return None


def index_of(lease: StoredLease) -> int | None:
    """The completion index of an index lease (its label), or ``None`` for a job's own lease."""
    raw = (lease.body.get("metadata", {}).get("labels") or {}).get(names.LABEL_COMPLETION_INDEX)
    return int(raw) if raw is not None and str(raw).isdigit() else None


def _index_lease_fields(
    job: LeasedJob, body: dict[str, Any], step: IndexStep, start: int
) -> dict[str, Any]:
    """The fields of an index's new lease (not a cron run's), starting at token ``start``.

    No ownerReference: like a job's lease, it outlives the job.
    """
    meta = body["metadata"]
    return {
        "job_name": str(meta["name"]),
        "lease_duration_seconds": job.spec.lease_duration_seconds,
        "max_fencing_token": start + indexed.index_max_fencing_token_span(job),
        "initial_fencing_token": start,
        "labels": {
            names.LABEL_JOB: str(meta["name"]),
            names.LABEL_COMPLETION_INDEX: str(step.index),
        },
        "startup_deadline_seconds": (
            job.spec.startup_deadline_seconds if job.spec.template is not None else None
        ),
        "job_uid": str(meta["uid"]),
        "mode": domain.mode(job),
        "finalizers": [names.FINALIZER_DOMAIN],
        "work": domain.work_item(job),  # params and priority: the same on every index
    }


def is_index_lease(lease: StoredLease, job_name: str, index: int) -> bool:
    """Whether ``lease`` is index ``index``'s lease of the job ``job_name`` (not a name taken)."""
    return lease.record.job_name == job_name and index_of(lease) == index


def tell_index_events(
    ctx: Context, body: dict[str, Any], index: int, events: Iterable[JobEvent]
) -> None:
    """Record an index's planned Events on its job, each message prefixed ``Index <i>:``."""
    for event in events:
        ctx.events.record(body, event.type, event.reason, f"Index {index}: {event.message}")


@dataclass(frozen=True)
class StepDone:
    """An index's step is over for this reconcile; look again after this many seconds.

    ``name_taken_by``: the index's lease name is held by this lease, which is
    not that index's (reported on the job).
    """

    requeue_after_seconds: float | None
    name_taken_by: StoredLease | None = None


class IndexLeaseCreator:
    """Create index leases (:meth:`create`) and stop legacy-named ones (:meth:`stop_legacy`).

    Args:
        ctx: the shared edges and state (the store, Events, the pod memory).
    """

    def __init__(self, ctx: Context, attempts: Attempts) -> None:
        self._ctx = ctx
        self._attempts = attempts

    def create(
        self,
        job: LeasedJob,
        body: dict[str, Any],
        step: IndexStep,
        legacy: StoredLease | None,
        pods: Mapping[int, PodFacts] | None = None,
    ) -> StoredLease | StepDone | None:
        """Create an index's lease: its own fencing domain; held by its first pod where it may be.

        It starts where :meth:`_start_token` says, so the index's tokens never
        go back. An index's plain first attempt is folded into the create
        (:meth:`_first_attempt`): the pod first, then the lease created held
        by it, one lease write instead of two. Otherwise the lease is created
        unheld; a create refused because the name exists is read back
        (:meth:`_existing`).

        Args:
            job: the LeasedJob (validated ``body``).
            body: its raw body.
            step: the index's ``CREATE_LEASE`` step.
            legacy: the index's lease under its legacy name, if one exists.
            pods: the index's attempt pods by token, where read.

        Returns:
            The index's lease (created unheld, or found to be this index's
            already: plan on it); ``None`` to look again on the next event;
            :class:`StepDone` when the index's step is over (its first attempt
            started with the lease created held; or, with the lease that holds
            the name, when that lease is not this index's).

        Raises:
            TransientStoreError: the API server failed; try again.
        """
        meta = body["metadata"]
        namespace, name = str(meta["namespace"]), str(meta["name"])
        cron = cron_of(body)
        if cron is not None:
            return self._create_in_run(job, body, step, cron)
        start = self._start_token(namespace, name, step, legacy)
        if start is None:
            return None
        fields = _index_lease_fields(job, body, step, start)
        if start == 0 and legacy is None:
            first = self._first_attempt(job, body, step, fields, pods)
            if first is not None:
                return first
        try:
            # No ownerReference: like a job's lease, it outlives the job.
            created = self._ctx.store.create(namespace, step.lease_name, **fields)
        except WriteRefusedError:
            return self._existing(namespace, name, step)
        # Into the cache (not skipped as this operator's own: its event plans on the lease).
        self._ctx.lease_cache.put(created.body)
        self._tell_carried(body, step, legacy, start)
        return created

    def _first_attempt(
        self,
        job: LeasedJob,
        body: dict[str, Any],
        step: IndexStep,
        fields: dict[str, Any],
        pods: Mapping[int, PodFacts] | None,
    ) -> StoredLease | StepDone | None:
        """Start an index's first attempt with its lease created held by its pod, if it may be so.

        The same step as a single job's first attempt
        (:meth:`Attempts.start_with_new_lease
        <leasehold.controller.act.attempts.Attempts.start_with_new_lease>`,
        checked by ``model/lifecycle.pml``'s ``S_CREATE`` on any view of the
        lease, docs/model.md): only for a lease that starts at token 0 (no
        legacy lease, no pod of the index seen: a recreated lease keeps the
        plain path), with a pod template, not suspended. The pure planner
        decides on the lease as the plain create would make it: the attempt
        starts only where it would claim that lease's first token at once.

        Returns:
            :class:`StepDone` when the attempt was started (or held back by a
            quota; or with the lease found, when it is another job's: the
            name is taken), the index's lease found instead (plan on it: the
            create was refused and the pod was deleted, or the lease is this
            index's unheld one, to claim for that pod), or ``None``: create
            the lease unheld, as before.
        """
        if job.spec.template is None or job.spec.suspend:
            return None
        namespace = str(body["metadata"]["namespace"])
        if self._ctx.lease_cache.get(namespace, step.lease_name) is not None:
            return None  # a lease of the name exists (another job's): no pod made for nothing
        prospective = stored_from_body(new_lease_body(namespace, step.lease_name, **fields))
        plan = indexed.plan_index(
            job, step.index, prospective.record, now=self._ctx.now(), pods=pods
        )
        if plan.action is not Action.CLAIM_AND_START or plan.token != 1:
            return None
        store = self._ctx.store
        made = self._attempts.start_with_new_lease(
            job,
            body,
            replace(plan, events=[]),
            prospective,
            lambda held_by: store.create(namespace, step.lease_name, **fields, held_by=held_by),
            step.index,
        )
        if made is None or (made.plan is None and made.lease is None):
            return None
        if made.plan is None:
            assert made.lease is not None
            lease = made.lease
            if not is_index_lease(lease, str(body["metadata"]["name"]), step.index):
                # Another job's lease holds the name (the pod made for it was deleted).
                return StepDone(NAME_TAKEN_RECHECK_SECONDS, name_taken_by=lease)
            return lease
        tell_index_events(self._ctx, body, step.index, made.plan.events)  # a quota's hold
        return StepDone(made.plan.requeue_after_seconds)

    def run_lease(self, namespace: str, run: str, cron: str) -> StoredLease | None:
        """A cron job's run's own lease (its token range), read from the API server.

        Returns:
            It, or ``None`` when it is missing or not that cron job's.
        """
        try:
            lease = self._ctx.store.get(namespace, run)
        except LeaseNotFoundError:
            return None
        labels = lease.body["metadata"].get("labels") or {}
        if labels.get(names.LABEL_CRON_JOB) != cron or lease.record.job_name != run:
            return None
        if lease.record.ceiling_fencing_token is None:
            return None
        return lease

    def _create_in_run(
        self, job: LeasedJob, body: dict[str, Any], step: IndexStep, cron: str
    ) -> StoredLease | StepDone | None:
        """Create an index lease of a cron job's run inside the run's token range.

        The run's own lease (made by the cron job, never claimed) holds the
        range: the index lease starts at its token (the range's base), capped
        there (closed) until this job takes it over, with its ceiling (the
        range's top, or the base if a later run closed the run already). So
        every index of run N is above every index of run N-1
        (docs/schedules.md). The take-over checks the run's lease again
        (:meth:`_closed_with_run`): an index lease made after a ``Forbid`` or
        ``Replace`` listed the run's leases is closed before it can be claimed.

        Returns:
            As :meth:`_create`; :class:`StepDone` to look again later when the
            run's lease is missing (the index does not start).
        """
        meta = body["metadata"]
        namespace, name = str(meta["namespace"]), str(meta["name"])
        run = self.run_lease(namespace, name, cron)
        if run is None:
            log.warning(
                "%s/%s: index %d not started: the run's JobLease %s (its token range,"
                " made by LeasedCronJob %s) is missing",
                namespace,
                name,
                step.index,
                name,
                cron,
            )
            return StepDone(NAME_TAKEN_RECHECK_SECONDS)
        base = run.record.fencing_token
        # A lease that went missing is made again above its pods' tokens.
        start = max(base, max(self._ctx.pod_memory.recall(namespace, name, step.index), default=0))
        ceiling = run.record.ceiling_fencing_token
        assert ceiling is not None
        try:
            created = self._ctx.store.create(
                namespace,
                step.lease_name,
                job_name=name,
                lease_duration_seconds=job.spec.lease_duration_seconds,
                max_fencing_token=start,  # closed until this job takes it over
                ceiling_fencing_token=max(ceiling, start),
                initial_fencing_token=start,
                labels={
                    names.LABEL_JOB: name,
                    names.LABEL_COMPLETION_INDEX: str(step.index),
                    names.LABEL_CRON_JOB: cron,
                },
                mode=domain.mode(job),
                finalizers=[names.FINALIZER_DOMAIN],
            )
        except WriteRefusedError:
            return self._existing(namespace, name, step)
        self._ctx.lease_cache.put(created.body)
        log.info(
            "%s/%s: index lease %s made in the run's range (%d, %d]",
            namespace,
            name,
            step.lease_name,
            start,
            ceiling,
        )
        return created

    def _start_token(
        self, namespace: str, name: str, step: IndexStep, legacy: StoredLease | None
    ) -> int | None:
        """The token a new index lease starts at: 0, or what an earlier one reached.

        The final token of the index's lease under its legacy name (stopped
        by :meth:`stop_legacy`), or above every token the index's pods were
        seen under: a lease that went missing (its finalizer forced off). The
        single-job path carries ``status.fencingToken``; an Indexed job's
        status keeps no token per index, the pod watch's memory does.

        Returns:
            The token, or ``None`` while the legacy lease may still be claimed
            (it moved): its watch event brings a reconcile.
        """
        start = 0
        if legacy is not None:
            if not lease_is_final(legacy.record):
                return None
            start = legacy.record.fencing_token
        seen = self._ctx.pod_memory.recall(namespace, name, step.index)
        return max(start, max(seen, default=0))

    def _existing(
        self, namespace: str, name: str, step: IndexStep
    ) -> StoredLease | StepDone | None:
        """The lease a refused create found under an index's name.

        Returns:
            It, when it is this index's (an earlier reconcile made it);
            :class:`StepDone` with it when it is not; ``None`` if it is gone again.
        """
        try:
            existing = self._ctx.store.get(namespace, step.lease_name)
        except LeaseNotFoundError:
            return None
        self._ctx.lease_cache.put(existing.body)
        if not is_index_lease(existing, name, step.index):
            return StepDone(NAME_TAKEN_RECHECK_SECONDS, name_taken_by=existing)
        return existing

    def _tell_carried(
        self, body: dict[str, Any], step: IndexStep, legacy: StoredLease | None, start: int
    ) -> None:
        """The Event of a lease that starts above 0: carried from a legacy name, or recreated."""
        if legacy is not None:
            self._ctx.events.record(
                body,
                "Normal",
                "LeaseRenamed",
                f"Index {step.index}: JobLease {legacy.name} (its name before index leases"
                f" were named <job>.<index>) is stopped for good; {step.lease_name} carries"
                f" on from fencing token {start}, so the index's tokens never go back.",
            )
            if start == legacy.record.fencing_token:
                return
        if start > 0:
            self._ctx.events.record(
                body,
                "Warning",
                "LeaseRecreated",
                f"The JobLease {step.lease_name} of index {step.index} was missing; recreated it"
                f" at fencing token {start} (its pods' highest) so tokens never go back.",
            )

    def stop_legacy(self, legacy: StoredLease) -> StoredLease:
        """Stop an index's legacy-named lease for good (one write, unless it is already).

        It is stopped before the index's lease is created at its token, so no
        pool or pod can claim it after its token was read: the successor's
        first claim is above every token it issued. A completion that landed
        first ends it as well. A running attempt under it is fenced off, and
        runs again under the index's new lease.

        Args:
            legacy: the index's lease under its legacy name, as read.

        Returns:
            The lease as written or read last; not final only if it kept
            changing (claims, renewals): its watch events bring a reconcile.

        Raises:
            StoreError: the API server failed or refused.
        """
        for _ in range(MAX_REPLANS):
            if lease_is_final(legacy.record):
                return legacy
            stopped = self._ctx.store.stop(legacy)
            if isinstance(stopped, Accepted):
                self._ctx.wrote_lease(stopped.lease)
                log.info(
                    "%s/%s: legacy index lease stopped at fencing token %d",
                    legacy.namespace,
                    legacy.name,
                    stopped.lease.record.fencing_token,
                )
            legacy = stopped.lease
        return legacy
