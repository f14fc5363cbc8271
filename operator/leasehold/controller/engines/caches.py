"""The newest body seen of each LeasedJob and JobLease, so a reconcile need not GET them.

Why this module exists: a reconcile used to GET its job and its lease every
time (about four reconciles per job: eight GETs), though the operator already
receives both through its watches (Kopf's LeasedJob events, the JobLease
:class:`~leasehold.controller.engines.watching.ListWatch`) and its own writes' answers.
:class:`ObjectCache` keeps those bodies. It is an informer's store, not a
source of truth: every write the reconcile makes is still conditioned (the
status on the ``resourceVersion`` read, the lease's writes on their ``test``
ops or ``resourceVersion``), so a stale body costs one refused write and one
re-read, never a decision the API server would accept on an old version.

A cache may also keep its objects in groups (:class:`ObjectCache`'s
``group_of``): the JobLeases of one Indexed job's indexes, so a reconcile
finds its job's hundreds of index leases without a LIST and without scanning
every lease the operator watches.

Thread-safe: fed on the event loop, read in reconcile threads.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Final

MAX_TOMBSTONES: Final = 10_000
"""Deleted objects remembered (the oldest forgotten first): a write's answer
arrives moments after a deletion's event, never hours."""


def _version(body: Mapping[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("resourceVersion") or "")


def is_older(candidate: str, kept: str) -> bool:
    """Whether ``candidate`` is a version older than ``kept``.

    Resource versions are opaque; the API server's (etcd's) are integers in
    practice, and only then are they compared. Otherwise the candidate (the
    later delivered) wins.
    """
    return candidate.isdigit() and kept.isdigit() and int(candidate) < int(kept)


GroupOf = Callable[[Mapping[str, Any]], str | None]
"""The group a body belongs to within its namespace (``None``: none)."""


class ObjectCache:
    """The newest body seen of each object, by namespace and name.

    :meth:`put` keeps a body unless an object of a newer version is kept;
    :meth:`drop` forgets one (deleted, or found stale). Until the owner sets
    :attr:`watched`, :meth:`get` and :meth:`members` answer nothing: a cache
    no watch feeds (a service used without the operator's runtime, as in
    tests) would only hold the owner's own writes and miss everyone else's.

    Args:
        group_of: puts each kept body in a group within its namespace
            (:meth:`members` answers a group); ``None``: no groups. A body
            whose group changes between versions moves with it.
    """

    def __init__(self, group_of: GroupOf | None = None) -> None:
        self._bodies: dict[tuple[str, str], dict[str, Any]] = {}
        self._deleted: OrderedDict[tuple[str, str], str] = OrderedDict()
        """Objects seen deleted, by key: the deleted version (a late put at or
        below it, e.g. a write's answer delivered after the deletion, is refused)."""
        self._group_of = group_of
        self._groups: dict[tuple[str, str], set[str]] = {}
        """(namespace, group) -> the names of the kept bodies in it."""
        self._group_by_key: dict[tuple[str, str], str] = {}
        """(namespace, name) -> the group its kept body is in."""
        self._lock = threading.Lock()
        self.watched = False
        """Set by the owner once a watch feeds this cache and its first LIST was fed:
        :meth:`get` answers from then on, and a miss means there is no such object
        (or its creation's event is still on the way)."""

    def put(self, body: Mapping[str, Any]) -> None:
        """Keep a copy of ``body`` (a watch event's, or a write's answer), unless older.

        Args:
            body: the object as the API serves it (``metadata.namespace``/``name`` set).
        """
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        kept = copy.deepcopy(dict(body))
        version = _version(kept)
        with self._lock:
            current = self._bodies.get(key)
            if current is not None and is_older(version, _version(current)):
                return
            gone = self._deleted.get(key)
            if gone is not None:
                if gone == version or is_older(version, gone):
                    return
                del self._deleted[key]  # created again since
            self._bodies[key] = kept
            if self._group_of is not None:
                self._regroup(key, self._group_of(kept))

    def drop(self, namespace: str, name: str, deleted_version: str | None = None) -> None:
        """Forget an object (deleted, or its body found stale).

        Args:
            namespace: its namespace.
            name: its name.
            deleted_version: the ``resourceVersion`` its deletion was seen at, if it
                was deleted: a body at or below it is not kept again (a write's
                answer that arrives after the deletion's event).
        """
        with self._lock:
            self._bodies.pop((namespace, name), None)
            self._regroup((namespace, name), None)
            if deleted_version:
                self._deleted[(namespace, name)] = deleted_version
                self._deleted.move_to_end((namespace, name))
                while len(self._deleted) > MAX_TOMBSTONES:
                    self._deleted.popitem(last=False)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A copy of the newest body kept, or ``None``.

        Args:
            namespace: its namespace.
            name: its name.

        Returns:
            The body (the caller's to change), or ``None`` if none is kept
            (always, until :attr:`watched`).
        """
        if not self.watched:
            return None
        with self._lock:
            body = self._bodies.get((namespace, name))
        return copy.deepcopy(body) if body is not None else None

    def members(self, namespace: str, group: str) -> list[Mapping[str, Any]] | None:
        """The kept bodies of a group (``group_of``), without scanning the others.

        The bodies are the cache's own, not copies, to spare a copy of
        hundreds of bodies per call: the caller must not change them (a
        :meth:`put` replaces a kept body, never changes it in place, so one
        handed out stays as it was).

        Args:
            namespace: the group's namespace.
            group: the group, as ``group_of`` names it.

        Returns:
            The bodies (any order; empty if none), or ``None`` until :attr:`watched`.
        """
        if not self.watched:
            return None
        with self._lock:
            found = self._groups.get((namespace, group), ())
            return [self._bodies[(namespace, name)] for name in found]

    def _regroup(self, key: tuple[str, str], group: str | None) -> None:
        """Move ``key`` into ``group`` (``None``: out of every group); under the lock."""
        old = self._group_by_key.get(key)
        if old == group:
            return
        if old is not None:
            members = self._groups.get((key[0], old))
            if members is not None:
                members.discard(key[1])
                if not members:
                    del self._groups[(key[0], old)]
            del self._group_by_key[key]
        if group is not None:
            self._groups.setdefault((key[0], group), set()).add(key[1])
            self._group_by_key[key] = group
