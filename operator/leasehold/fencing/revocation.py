"""Revoked tokens: what a target that can read the JobLease learns from it.

Why this module exists: a fence refuses an old token once a newer one has
reached it. After a job's last attempt (it completed, or the operator stopped
it at its deadline or attempt limit) no newer token ever comes, so a write
held on the wire under the last token would still pass the fence. A target
that can read the lease closes that gap: it asks :func:`revocation` whether
the writer's token is still the lease's live token, and refuses the write if
not.

The lease says a token is revoked when:

* the lease is gone (the job was deleted) — :attr:`RevocationReason.DELETED`;
* a completion is recorded (the job is finished) — ``COMPLETED``;
* a later claim took the lease (``spec.fencingToken`` is higher) — ``SUPERSEDED``;
* the operator stopped the job (unheld, ``spec.maxFencingToken`` at the
  token: no claim can follow) — ``STOPPED``;
* the lease is unheld under that token (taken back on expiry, or released
  by its holder; a claim always moves to a higher token, so an unheld token
  never comes back) — ``UNHELD``;
* the token is higher than any the lease issued — ``UNKNOWN``.

Reading the lease is a check, not a lock: a write that passed the check just
before the token was revoked still lands (as with ``holder.check()`` on the
worker's side). Use it together with a fence, which orders what lands.

The lease is read as JSON (the ``JobLease`` object, with any client:
``kubectl get joblease -o json``, the Kubernetes client's
``get_namespaced_custom_object``, plain HTTP on :func:`lease_api_path`), so
this module needs no Kubernetes client. A revoked token stays revoked: a
target may remember it (:class:`RevokedTokens`) and skip later reads.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from leasehold.fencing import FenceError
from leasehold.names import GROUP, PLURAL_JOB_LEASES, VERSION


class RevocationReason(enum.StrEnum):
    """Why a token may no longer write."""

    DELETED = "Deleted"
    """The lease does not exist (any more)."""
    COMPLETED = "Completed"
    """The job's completion is recorded: no effect belongs after it."""
    SUPERSEDED = "Superseded"
    """A later claim holds (or held) the lease under a higher token."""
    STOPPED = "Stopped"
    """The operator stopped the job (deadline, attempts used up); nothing follows."""
    UNHELD = "Unheld"
    """Nobody holds the lease under this token: reclaimed on expiry or released."""
    UNKNOWN = "Unknown"
    """The lease never issued this token."""


@dataclass(frozen=True)
class Revocation:
    """A token the lease no longer backs.

    Attributes:
        token: the token asked about.
        reason: why it is revoked.
        current: the lease's ``spec.fencingToken`` (``None`` when it is gone).
    """

    token: int
    reason: RevocationReason
    current: int | None

    def __str__(self) -> str:
        now = "the lease is gone" if self.current is None else f"lease token {self.current}"
        return f"fencing token {self.token} is revoked ({self.reason}; {now})"


class TokenRevoked(FenceError):  # noqa: N818 - names the outcome, like StaleToken
    """The effect's token is revoked by its lease.

    Attributes:
        revocation: what the lease said.
    """

    def __init__(self, revocation: Revocation) -> None:
        super().__init__(str(revocation))
        self.revocation = revocation


def lease_api_path(namespace: str, lease_name: str) -> str:
    """The API server path to GET a JobLease (the LeasedJob's name is the lease's).

    Args:
        namespace: the job's namespace.
        lease_name: the lease's name.

    Returns:
        e.g. ``/apis/leasehold.dev/v1alpha1/namespaces/default/jobleases/payout``.
    """
    return (
        f"/apis/{GROUP}/{VERSION}/namespaces/{quote(namespace, safe='')}"
        f"/{PLURAL_JOB_LEASES}/{quote(lease_name, safe='')}"
    )


def _int(value: Any, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"JobLease {what} is not an integer: {value!r}")
    return value


def revocation(lease: Mapping[str, Any] | None, token: int) -> Revocation | None:
    """Whether ``lease`` still backs writes under ``token``.

    Args:
        lease: the JobLease object as JSON (``None`` when it was not found).
        token: the writer's fencing token.

    Returns:
        ``None`` while the token is the lease's live token (held, not
        completed); else the :class:`Revocation`.

    Raises:
        ValueError: ``token`` is not a non-negative int, or ``lease`` is not a
            JobLease (no ``spec.fencingToken``).
    """
    if isinstance(token, bool) or not isinstance(token, int) or token < 0:
        raise ValueError(f"a fencing token is a non-negative int, got {token!r}")
    if lease is None:
        return Revocation(token, RevocationReason.DELETED, None)
    spec = lease.get("spec")
    if not isinstance(spec, Mapping):
        raise ValueError("not a JobLease: no spec")
    current = _int(spec.get("fencingToken", 0), "spec.fencingToken")
    assert current is not None
    cap = _int(spec.get("maxFencingToken"), "spec.maxFencingToken")
    reason: RevocationReason | None = None
    if token > current:
        reason = RevocationReason.UNKNOWN
    elif spec.get("completion") is not None:
        reason = RevocationReason.COMPLETED
    elif token < current:
        reason = RevocationReason.SUPERSEDED
    elif spec.get("holderIdentity"):
        reason = None
    elif cap is not None and cap <= current:
        reason = RevocationReason.STOPPED
    else:
        reason = RevocationReason.UNHELD
    return None if reason is None else Revocation(token, reason, current)


def check_not_revoked(lease: Mapping[str, Any] | None, token: int) -> None:
    """Refuse a token the lease no longer backs.

    Args:
        lease: the JobLease object as JSON (``None`` when it was not found).
        token: the writer's fencing token.

    Raises:
        TokenRevoked: :func:`revocation` found it revoked.
        ValueError: as :func:`revocation`.
    """
    revoked = revocation(lease, token)
    if revoked is not None:
        raise TokenRevoked(revoked)


class RevokedTokens:
    """Remembers revoked tokens per lease, so a target reads each lease less.

    A revoked token never comes back, and every token below a revoked one is
    revoked too, so one number per lease is enough: the highest token known
    revoked. A token at or below it is refused without a read. This relies
    on tokens of a job name never repeating (a deleted and recreated job
    goes on above the old tokens).

    Args:
        read_lease: ``(namespace, lease_name) -> JobLease JSON or None``
            (``None`` when not found), e.g. a wrapper around the Kubernetes
            client's ``get_namespaced_custom_object`` that maps 404 to ``None``.
            Its errors propagate.

    Thread-safe; the reads happen outside the lock.
    """

    def __init__(self, read_lease: Callable[[str, str], Mapping[str, Any] | None]) -> None:
        self._read = read_lease
        self._lock = threading.Lock()
        self._revoked: dict[tuple[str, str], Revocation] = {}

    def check(self, namespace: str, lease_name: str, token: int) -> None:
        """Refuse ``token`` when the lease revoked it; read the lease unless known.

        Args:
            namespace: the lease's namespace.
            lease_name: the lease's name.
            token: the writer's fencing token.

        Raises:
            TokenRevoked: the token is revoked.
            ValueError: as :func:`revocation`.
        """
        key = (namespace, lease_name)
        with self._lock:
            known = self._revoked.get(key)
        if known is not None and token <= known.token:
            raise TokenRevoked(known if token == known.token else _below(known, token))
        revoked = revocation(self._read(namespace, lease_name), token)
        if revoked is None:
            return
        if revoked.reason is not RevocationReason.UNKNOWN:
            with self._lock:
                previous = self._revoked.get(key)
                if previous is None or previous.token < revoked.token:
                    self._revoked[key] = revoked
        raise TokenRevoked(revoked)


def _below(known: Revocation, token: int) -> Revocation:
    """A token below a revoked one: superseded, unless the whole job ended."""
    final = (RevocationReason.DELETED, RevocationReason.COMPLETED, RevocationReason.STOPPED)
    reason = known.reason if known.reason in final else RevocationReason.SUPERSEDED
    return Revocation(token, reason, known.current)
