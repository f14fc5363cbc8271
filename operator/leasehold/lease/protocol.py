"""The lease rules, pure: decisions on a lease record, with no I/O.

Why this module exists: every lease operation is decided here, on plain
values, so the rules can be tested exhaustively (hypothesis stateful tests)
without a cluster. The store (:mod:`leasehold.lease.store`) asks these
functions what an operation does and writes the result as one
compare-and-swap; the CRD's CEL rules enforce the same table on the server
(``docs/architecture.md``, "The protocol").

==========  ==============================================  =============================
operation   succeeds only if                                effect
==========  ==============================================  =============================
claim       lease is unheld, not completed, not exhausted,  holder := claimant, token + 1,
            not suspended (and, if pinned, at token - 1     bound to the claimant's pod
            of the same incarnation)                        UID if given
renew       holder AND token match the caller's             renew time moves on
complete    holder AND token match                          completion recorded once
release     holder AND token match                          unheld, token kept
reclaim     no change observed for the duration + margin    unheld, token kept
reopen      the completion is Failed (operator, to retry)   completion moved to last
                                                            failure, failures + 1
excuse      unheld, token not excused yet, cap below the    uncounted + 1, cap + 1
            ceiling (operator)
suspend     not completed (operator: the job's suspend)     unheld, token kept, no claim
                                                            until resumed; if it was held,
                                                            suspensions + 1, cap + 1 (below
                                                            the ceiling)
==========  ==============================================  =============================

Every decision takes the lease ``record`` as read from the store and, where
they apply, the caller's ``holder`` identity and fencing ``token`` and the
wall-clock ``now`` (recorded for people, never judged). It returns
:class:`Allowed` with the record after the operation, or :class:`Denied` with
the :class:`Rejection`.

The fencing token is the lease's generation: it goes up by exactly one at
every claim and never otherwise (Kleppmann, "How to do distributed locking",
2016; Gray & Cheriton, "Leases", SOSP 1989, for expiring leases). No
Kubernetes or Kopf import here (an import-linter contract checks it).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Final, NewType

HolderIdentity = NewType("HolderIdentity", str)
"""Who holds a lease: in push mode the pod's name, in pull mode a worker id."""

FencingToken = NewType("FencingToken", int)
"""The lease's generation: +1 at every claim, never lower, never skipped."""

Clock = Callable[[], datetime]
"""A wall clock returning an aware :class:`datetime` (injected for tests)."""


class Outcome(enum.StrEnum):
    """How a job ended, as recorded in its lease's completion."""

    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


@dataclass(frozen=True)
class Completion:
    """A completion recorded on a lease, exactly once.

    Attributes:
        fencing_token: the token under which the job completed.
        holder_identity: who completed it.
        outcome: succeeded or failed.
        complete_time: when the completing worker asked (its wall clock; for
            people, not for decisions).
        message: free text from the worker (e.g. "exit code 3").
        exit_code: the worker's exit code, when it has one.
    """

    fencing_token: FencingToken
    holder_identity: HolderIdentity
    outcome: Outcome
    complete_time: datetime
    message: str = ""
    exit_code: int | None = None


@dataclass(frozen=True)
class LeaseRecord:
    """The state of one lease, as the protocol sees it.

    Attributes:
        job_name: the LeasedJob this lease belongs to.
        holder_identity: the current holder, or ``None`` when unheld.
        fencing_token: the current token; ``0`` before the first claim.
        lease_duration_seconds: how long a holder may go without renewing.
        acquire_time: when the current holder claimed (wall clock, for people).
        renew_time: when the current holder last renewed (wall clock, for
            people; expiry is never judged from it).
        completion: the recorded completion, or ``None``.
        max_fencing_token: no claim may take the token past this (the job's
            attempt limit); ``None`` for no limit.
        holder_uid: the UID of the holder's pod, once bound; ``None`` when
            unbound (not yet, or a holder that is no pod).
        job_uid: the UID of the job incarnation the lease serves.
        base_fencing_token: the token when that incarnation took the lease.
        failures: how many Failed completions were reopened to be retried.
        last_failure: the last Failed completion reopened, if any.
        suspended: the job is suspended: unheld, and no claim is possible.
        suspensions: attempts ended by a suspension (each raised the cap by one).
        uncounted_attempts: attempts excused from every budget (a disruption,
            a failure a rule ignores); each raised the cap by one.
        last_uncounted_token: the token of the last one excused.
        ceiling_fencing_token: no write may raise the cap past this (a
            schedule's run: the top of its reserved range, lowered to the
            token when the run is closed); ``None`` for no ceiling.
    """

    job_name: str
    holder_identity: HolderIdentity | None
    fencing_token: FencingToken
    lease_duration_seconds: int
    acquire_time: datetime | None = None
    renew_time: datetime | None = None
    completion: Completion | None = None
    max_fencing_token: FencingToken | None = None
    holder_uid: str | None = None
    job_uid: str | None = None
    base_fencing_token: FencingToken = FencingToken(0)
    failures: int = 0
    last_failure: Completion | None = None
    suspended: bool = False
    suspensions: int = 0
    uncounted_attempts: int = 0
    last_uncounted_token: FencingToken | None = None
    ceiling_fencing_token: FencingToken | None = None

    @property
    def held(self) -> bool:
        """Whether someone holds the lease now."""
        return self.holder_identity is not None


class Rejection(enum.StrEnum):
    """Why an operation was refused. Each says what the caller should do."""

    LOST_RACE = "LostRace"
    """Claim refused: someone else holds the lease (another claimant won)."""
    NOT_HOLDER = "NotHolder"
    """The caller is not the holder (lease released, reclaimed or re-claimed)."""
    STALE_TOKEN = "StaleToken"
    """The caller's token is not the lease's current token: it was fenced off."""
    COMPLETED = "Completed"
    """The lease's job was already completed; nothing more can happen on it."""
    EXHAUSTED = "Exhausted"
    """Claim refused: the token reached ``max_fencing_token`` (attempts used up)."""
    NOT_EXPIRED = "NotExpired"
    """Reclaim refused: the lease changed within its duration, or is unheld."""
    SUSPENDED = "Suspended"
    """Claim refused: the lease's job is suspended (``spec.suspend``); wait for a resume."""
    NOT_BOUND = "NotBound"
    """A pod's write refused: the lease is not yet claimed for this pod (push
    mode: the operator creates the pod first, under the token its claim will
    take, then claims the lease bound to the pod's UID in one write), or is
    unbound (a lease claimed by an earlier version, bound right after).
    Not a loss: retry within the lease window."""


@dataclass(frozen=True)
class Allowed:
    """An operation the rules allow, with the record it produces.

    Attributes:
        record: the lease record after the operation.
    """

    record: LeaseRecord


@dataclass(frozen=True)
class Denied:
    """An operation the rules deny.

    Attributes:
        rejection: why.
        record: the record it was judged against (unchanged).
    """

    rejection: Rejection
    record: LeaseRecord


Decision = Allowed | Denied
"""What the rules say about one operation (the store's results are ``Accepted``/``Rejected``)."""


def check_holder(
    record: LeaseRecord,
    holder: HolderIdentity,
    token: FencingToken,
    holder_uid: str | None = None,
) -> Rejection | None:
    """The rule shared by renew, complete and release: holder AND token must match.

    The order of checks gives the most useful reason: a completed lease says so;
    a token mismatch beats a holder mismatch, since a worker with an old token
    must learn that it was fenced off. A caller that is a pod passes its
    ``holder_uid``: a lease bound to another pod UID (the same name, replaced)
    is not the caller's (``NOT_HOLDER``), and an unbound one is not yet
    (``NOT_BOUND``). A pod never binds a lease by renewing it: a pull claim
    binds the claimant in the claim itself, and a push lease is bound by the
    operator to the pod it created (its claim binds the pod's UID in the same
    write: :func:`claim`), so a pod of the same name that the operator did
    not create can never make the lease its own (docs/lifecycle.md, "A holder
    is a pod UID, not a name"). A pod whose token is above the lease's was
    created for a claim that has not landed (yet, or ever): ``NOT_BOUND``,
    never a hold.

    Returns:
        ``None`` when ``holder`` holds ``record`` under ``token``, else why not.
    """
    if record.completion is not None:
        return Rejection.COMPLETED
    if holder_uid is not None and token > record.fencing_token:
        return Rejection.NOT_BOUND  # its claim has not landed: the pod waits
    if token != record.fencing_token:
        return Rejection.STALE_TOKEN
    if record.holder_identity != holder:
        return Rejection.NOT_HOLDER
    if holder_uid is not None and record.holder_uid is None:
        return Rejection.NOT_BOUND
    if holder_uid is not None and record.holder_uid != holder_uid:
        return Rejection.NOT_HOLDER
    return None


def bind(
    record: LeaseRecord, holder: HolderIdentity, token: FencingToken, holder_uid: str
) -> Decision:
    """Decide the operator's bind of a held push lease to the pod it created.

    Only for a lease an earlier version claimed unbound (it bound after the
    pod create): the operator's claims now bind in the claim (:func:`claim`).
    Allowed when ``holder`` holds ``record`` under ``token`` and the lease is
    unbound or bound to ``holder_uid`` already (a bind is never a change).

    Returns:
        :class:`Allowed` with holder_uid := ``holder_uid``, or :class:`Denied`
        with ``COMPLETED``, ``STALE_TOKEN`` or ``NOT_HOLDER``.
    """
    rejection = check_holder(record, holder, token)
    if rejection is None and record.holder_uid not in (None, holder_uid):
        rejection = Rejection.NOT_HOLDER
    if rejection is not None:
        return Denied(rejection, record)
    return Allowed(dataclasses.replace(record, holder_uid=holder_uid))


def claim(
    record: LeaseRecord,
    claimant: HolderIdentity,
    now: datetime,
    *,
    holder_uid: str | None = None,
    token: FencingToken | None = None,
    job_uid: str | None = None,
) -> Decision:
    """Decide a claim by ``claimant``: take an unheld lease and bump its token.

    The operator creates an attempt's pod before it claims for it, under the
    token the claim will take (``token``: the pod's name and env carry it),
    and claims bound to the pod's UID (``holder_uid``) in the same write: a
    claim and a bind in one. Such a claim is for that one token and that one
    job incarnation (``job_uid``): a lease that moved on (another claim
    landed, or a take-over by a new incarnation) is ``LOST_RACE``, and the
    pod made for it never holds (:func:`check_holder` refuses its UID). A
    pull worker's claim binds its own pod's UID the same way.

    Args:
        record: the lease as read.
        claimant: the holder identity (push mode: the pod's name).
        now: the wall clock, recorded for people.
        holder_uid: the claimant's pod UID, bound in the claim; ``None``: unbound.
        token: the token the claim must take (``record``'s + 1), if it must.
        job_uid: the incarnation the lease must serve (``spec.jobUID``), if given.

    Returns:
        :class:`Allowed` with holder := claimant, holder_uid := ``holder_uid``
        and token := token + 1, or :class:`Denied` with ``COMPLETED``,
        ``LOST_RACE``, ``SUSPENDED`` or ``EXHAUSTED``.
    """
    if record.completion is not None:
        return Denied(Rejection.COMPLETED, record)
    moved = token is not None and token != record.fencing_token + 1
    if record.held or moved or (job_uid is not None and record.job_uid != job_uid):
        return Denied(Rejection.LOST_RACE, record)
    if record.suspended:
        return Denied(Rejection.SUSPENDED, record)
    if record.max_fencing_token is not None and record.fencing_token >= record.max_fencing_token:
        return Denied(Rejection.EXHAUSTED, record)
    return Allowed(
        dataclasses.replace(
            record,
            holder_identity=claimant,
            holder_uid=holder_uid,
            fencing_token=FencingToken(record.fencing_token + 1),
            acquire_time=now,
            renew_time=now,
        )
    )


def renew(
    record: LeaseRecord,
    holder: HolderIdentity,
    token: FencingToken,
    now: datetime,
    *,
    holder_uid: str | None = None,
) -> Decision:
    """Decide a renewal: the holder is alive; the renew time moves on to ``now``.

    Denied with the reason from :func:`check_holder` (``holder_uid`` too).
    """
    rejection = check_holder(record, holder, token, holder_uid)
    if rejection is not None:
        return Denied(rejection, record)
    return Allowed(dataclasses.replace(record, renew_time=now))


def complete(
    record: LeaseRecord,
    holder: HolderIdentity,
    token: FencingToken,
    outcome: Outcome,
    now: datetime,
    *,
    message: str = "",
    exit_code: int | None = None,
    holder_uid: str | None = None,
) -> Decision:
    """Decide a completion: record ``{token, outcome}`` once; the lease ends.

    The lease is left unheld with its token kept, and can never be claimed
    again. ``message`` and ``exit_code`` are recorded with it. Denied with the
    reason from :func:`check_holder` (``holder_uid`` too).
    """
    rejection = check_holder(record, holder, token, holder_uid)
    if rejection is not None:
        return Denied(rejection, record)
    completion = Completion(
        fencing_token=token,
        holder_identity=holder,
        outcome=outcome,
        complete_time=now,
        message=message,
        exit_code=exit_code,
    )
    return Allowed(
        dataclasses.replace(record, holder_identity=None, holder_uid=None, completion=completion)
    )


def release(
    record: LeaseRecord,
    holder: HolderIdentity,
    token: FencingToken,
    *,
    holder_uid: str | None = None,
) -> Decision:
    """Decide a release: the holder gives the lease up; the token is kept.

    Denied with the reason from :func:`check_holder` (``holder_uid`` too); a
    release retried after the same holder re-claimed (token + 1) is
    ``STALE_TOKEN`` and changes nothing.
    """
    rejection = check_holder(record, holder, token, holder_uid)
    if rejection is not None:
        return Denied(rejection, record)
    return Allowed(dataclasses.replace(record, holder_identity=None, holder_uid=None))


def reclaim(record: LeaseRecord, *, expired: bool) -> Decision:
    """Decide a reclaim of a lease whose holder stopped renewing: unheld, token kept.

    ``expired`` is the operator's judgement for this exact version of the lease,
    made on its own monotonic clock
    (:class:`leasehold.controller.engines.expiry.ExpiryClock`), never here from
    wall-clock times written by workers. Denied with ``COMPLETED``, or
    ``NOT_EXPIRED`` (also for an unheld lease: nothing to take back).
    """
    if record.completion is not None:
        return Denied(Rejection.COMPLETED, record)
    if not record.held or not expired:
        return Denied(Rejection.NOT_EXPIRED, record)
    return Allowed(dataclasses.replace(record, holder_identity=None, holder_uid=None))


START_GRACE_MAX_SECONDS: Final = 60.0
"""The start grace's cap (:func:`start_grace_seconds`), in seconds."""


def start_grace_seconds(lease_duration_seconds: float) -> float:
    """How much longer an attempt whose pod runs may take to its first renewal, in seconds.

    A push-mode pod seen running has started its container, not its
    ``leasehold run``: an interpreter, its imports and the confirm renewal
    still come, and on a busy node they took 17 s (0.3 s idle). Until that
    first renewal is accepted nothing has started that a take-over would
    fence, so the operator lets the first renewal come up to this much later
    than a lease duration after the pod runs, and the worker's start-up
    tries go on as long. One lease duration, at most
    :data:`START_GRACE_MAX_SECONDS`: a long lease's attempt that hangs
    before its first renewal is not held for another hour
    (docs/lifecycle.md, "Starting is not stalling").

    Args:
        lease_duration_seconds: the lease's ``leaseDurationSeconds``.

    Returns:
        ``min(lease_duration_seconds, START_GRACE_MAX_SECONDS)``, never negative.
    """
    return max(0.0, min(float(lease_duration_seconds), START_GRACE_MAX_SECONDS))


def hold_may_outlive(record: LeaseRecord, *, reclaimed: bool) -> bool:
    """Whether the worker of the lease's current token may still believe it holds it.

    Asked before the operator makes a lease claimable again by a write of its
    own that ended (or ends) a hold without the worker's word and without
    judging it expired: a take-over by a new incarnation
    (:func:`~leasehold.lease.store.LeaseStore.rearm`, after the old one was
    stopped or while it still holds) and a resume after a suspension that
    ended a held attempt. Such a worker keeps producing effects until its
    local deadline (``leaseDurationSeconds`` from the start of its last
    renewal, less its margin), so the next token must not be issued before
    the operator has seen the lease unchanged for that long: the earliest
    reclaim's bound (docs/architecture.md, "How expiry is judged"). The Spin
    model found the gap (invariant 5: a take-over's next claim while the
    stopped worker could still write).

    Args:
        record: the lease as it is now (before the take-over, or suspended).
        reclaimed: the current token's hold was reclaimed (judged expired).

    Returns:
        ``False`` when the current token's hold surely ended: never claimed,
        completed or reclaimed; else ``True`` (held, stopped, released or
        suspended: its worker may not know yet).
    """
    if record.fencing_token == 0 or record.acquire_time is None:
        return False  # never held (a cron run's lease made ahead of it)
    # Held, stopped, or suspended: a suspended lease may have ended a hold
    # (``last_uncounted_token`` marks it since the CRD requires it, but a lease
    # suspended before that, or stopped then suspended, carries no mark), so
    # it is waited out too. The wait ends once the lease went unchanged for
    # its window, which a lease suspended for a while already has.
    return record.completion is None and not reclaimed


def reopen(record: LeaseRecord, *, counted: bool = True) -> Decision:
    """Decide a reopen: the operator retries a job whose worker failed.

    The Failed completion moves to ``last_failure`` and ``failures`` goes up
    by one; the lease is left unheld at the same token, so the next claim
    bumps it and the failed worker's late writes are stale. A failure that is
    not ``counted`` (a rule ignores it) is excused instead (:func:`excuse`):
    ``failures`` stays. A Succeeded completion is final: denied with
    ``COMPLETED``; a lease without a completion: denied with ``NOT_EXPIRED``
    (nothing to reopen).
    """
    done = record.completion
    if done is None:
        return Denied(Rejection.NOT_EXPIRED, record)
    if done.outcome != Outcome.FAILED:
        return Denied(Rejection.COMPLETED, record)
    moved = dataclasses.replace(record, completion=None, last_failure=done)
    if not counted:
        return excuse(moved)
    return Allowed(dataclasses.replace(moved, failures=record.failures + 1))


def excuse(record: LeaseRecord) -> Decision:
    """Decide an excuse: the attempt under the current token used no budget.

    For an attempt that ended by a disruption (an eviction) or a failure a
    rule ignores: ``uncounted_attempts`` goes up by one and the cap by one, so
    one more claim is possible; once per token (``last_uncounted_token``).
    Denied with ``NOT_EXPIRED`` for a held lease, one without a cap, or a token
    already excused; ``COMPLETED`` for a completed one; ``EXHAUSTED`` when
    the cap is at the ceiling (:func:`cap_may_rise`: the attempt counts).
    """
    if record.completion is not None:
        return Denied(Rejection.COMPLETED, record)
    cap = record.max_fencing_token
    last = record.last_uncounted_token
    if record.held or cap is None or (last is not None and last >= record.fencing_token):
        return Denied(Rejection.NOT_EXPIRED, record)
    if not cap_may_rise(record):
        return Denied(Rejection.EXHAUSTED, record)
    return Allowed(
        dataclasses.replace(
            record,
            uncounted_attempts=record.uncounted_attempts + 1,
            last_uncounted_token=record.fencing_token,
            max_fencing_token=FencingToken(cap + 1),
        )
    )


def suspend(record: LeaseRecord) -> Decision:
    """Decide a suspend: the operator stops the job's attempts until it is resumed.

    The lease becomes unheld at the same token (the running attempt's late
    writes are then refused, and its token never comes back); a held lease
    counts one suspension and its cap rises by one, so the attempt it ended
    uses no budget, and its token becomes ``last_uncounted_token`` (so no
    :func:`excuse` raises the cap for the same attempt a second time). A cap
    at the ceiling stays (:func:`cap_may_rise`): that attempt counts. Denied
    with ``COMPLETED``: a completion that landed first stands.
    """
    if record.completion is not None:
        return Denied(Rejection.COMPLETED, record)
    held = record.held
    cap = record.max_fencing_token
    rises = held and cap is not None and cap_may_rise(record)
    return Allowed(
        dataclasses.replace(
            record,
            holder_identity=None,
            holder_uid=None,
            suspended=True,
            suspensions=record.suspensions + (1 if held else 0),
            max_fencing_token=FencingToken(cap + 1) if rises and cap is not None else cap,
            # The ended attempt is now uncounted: no excuse may raise the cap for it again.
            last_uncounted_token=record.fencing_token if held else record.last_uncounted_token,
        )
    )


def cap_may_rise(record: LeaseRecord) -> bool:
    """Whether an excuse or a suspension may raise the lease's cap by one.

    Only a capped lease has a budget to spare, and never past its ceiling
    (``spec.ceilingFencingToken``: the CRD refuses it), so a schedule's
    closed run can never claim again and a run's tokens stay in its range.

    Args:
        record: the lease.

    Returns:
        ``True`` if ``max_fencing_token + 1`` is allowed.
    """
    cap = record.max_fencing_token
    if cap is None:
        return False
    ceiling = record.ceiling_fencing_token
    return ceiling is None or cap < ceiling


def lease_is_closed(record: LeaseRecord) -> bool:
    """Whether the store refuses every claim on the lease for ever: its ceiling is at its token.

    Unlike a cap at the token (which an excuse, a suspension or a new
    incarnation may raise), a ceiling never rises: the CRD refuses it. A
    schedule's ``Forbid`` or ``Replace`` closes an earlier run so (the holder,
    if any, may still finish its attempt under its token).

    Args:
        record: the lease.

    Returns:
        ``True`` if no claim can ever take it again, whoever writes.
    """
    ceiling = record.ceiling_fencing_token
    return ceiling is not None and ceiling <= record.fencing_token


MonotonicClock = Callable[[], float]
"""Seconds from an arbitrary origin that never go backwards (``time.monotonic``)."""


def lease_is_final(record: LeaseRecord) -> bool:
    """Whether no claim can ever take the lease again: completed, or unheld and capped.

    A lease stopped for good (its job gone, its deadline passed, a schedule's
    earlier run closed and ended) is one; the operator stops only leases
    that are not.

    Args:
        record: the lease.

    Returns:
        ``True`` if no claim can ever take it again.
    """
    if record.completion is not None:
        return True
    cap = record.max_fencing_token
    return record.holder_identity is None and cap is not None and cap <= record.fencing_token
