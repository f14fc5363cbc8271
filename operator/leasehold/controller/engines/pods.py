"""What the operator knows of attempt pods, including pods that are already gone.

Why this module exists: how an attempt ended is told by its pod (exit codes,
the ``DisruptionTarget`` condition of an eviction), but a pod being deleted
can be gone by the time its lease's release is reconciled: the kubelet
removes it right after its containers stop. The pod watch sees its last
state first; :class:`PodMemory` keeps it (per job, by fencing token) so the
reconcile can still judge the attempt. In memory only: after a restart an
attempt whose pod is gone is judged without it (counted, never excused by
mistake).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Final, NamedTuple

from leasehold import names
from leasehold.controller.plan.failure_policy import PodFacts
from leasehold.controller.plan.pod import pod_facts

KEPT_TOKENS: Final = 4
"""Pods remembered per job: the latest few tokens (older attempts were judged)."""


class PodCounts(NamedTuple):
    """A job's pods as ``status.ready`` and ``status.terminating`` count them."""

    ready: int
    terminating: int


def _counted_as(facts: PodFacts) -> tuple[bool, bool, bool]:
    """Where a pod stands in the job's counts: (ready, terminating, terminal)."""
    return facts.ready, facts.terminating, facts.terminal


class PodMemory:
    """The last state seen of each job's recent attempt pods (thread-safe).

    Fed by the pod watch (every event, the deletion's too); read by the
    reconcile for pods its list no longer returns.
    """

    def __init__(self) -> None:
        self._pods: dict[tuple[str, str, int | None], dict[int, PodFacts]] = {}
        """(namespace, job, completion index or None) -> token -> facts."""
        self._lock = threading.Lock()
        self.fed = False
        """Set by the operator's runtime: a pod watch feeds this memory (so it knows the
        pods that exist, not only those gone)."""
        self._evicted: set[tuple[str, str]] = set()
        self._disowned: set[str] = set()
        """UIDs of pods whose claim was lost: never an attempt (:meth:`disown`)."""
        self._disowned_jobs: set[tuple[str, str]] = set()
        """(namespace, job) with such a pod: :meth:`left` cannot count them (it lists)."""

    def observe(self, pod: Mapping[str, Any], *, gone: bool = False) -> bool:
        """Remember a pod's state (from a watch event's body).

        A pod no LeasedJob controls is ignored: only the operator's own
        attempt pods are ever judged or counted (no adoption, whatever the
        labels or a manual selector say). A pod seen terminal, being deleted
        or gone stays so: a later state that is not (a list's, older than an
        event kept) is ignored or merged.

        Args:
            pod: the pod as the API serves it.
            gone: the event is the pod's deletion (it no longer exists).

        Returns:
            Whether the pod's place in the job's counts changed (ready,
            terminating, terminal; a pod seen for the first time is compared
            with none of them): the job's ``status.ready``/``status.terminating`` may
            change, or a next attempt may wait for this pod
            (``podReplacementPolicy: Failed``).
        """
        parsed = pod_facts(pod)
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        job = labels.get(names.LABEL_JOB)
        if parsed is None or not job:
            return False
        token, facts = parsed
        if facts.owner_uid is None or facts.uid in self._disowned:
            # No LeasedJob controls it: made by hand (or orphaned), never an attempt.
            # Its job and token labels may copy a real attempt pod's, whose facts
            # it must not replace (a manual selector matches such pods too).
            return False
        if gone:
            facts = facts._replace(gone=True)
        raw = str(labels.get(names.LABEL_COMPLETION_INDEX, ""))
        index = int(raw) if raw.isdigit() else None  # an index's tokens are its own
        with self._lock:
            key = (str(meta.get("namespace", "")), str(job), index)
            known = self._pods.setdefault(key, {})
            before = known.get(token)
            if before is not None and before.uid == facts.uid:
                if before.terminal and not facts.terminal:
                    # An older state (a list answered before a watch event we
                    # already kept): a pod's end is never undone.
                    return False
                # Nor its deletion, for the same reason.
                facts = facts._replace(
                    deleting=facts.deleting or before.deleting, gone=facts.gone or before.gone
                )
            known[token] = facts
            for old in sorted(known)[:-KEPT_TOKENS]:
                del known[old]
                self._evicted.add((str(meta.get("namespace", "")), str(job)))
        was = _counted_as(before) if before is not None else (False, False, False)
        return was != _counted_as(facts)

    def disown(self, pod: Mapping[str, Any]) -> None:
        """A pod created for a claim that did not land: it never was an attempt.

        Its facts are dropped (if they are still its own: a later attempt
        under the same token may have replaced them) and its later events
        are ignored, so it is never counted (``status.ready``/``terminating``),
        waited for or judged as an attempt's pod. Its UID is kept for the
        operator's lifetime (a few dozen bytes per lost claim).

        Args:
            pod: the pod as created.
        """
        parsed = pod_facts(pod)
        uid = parsed[1].uid if parsed is not None else None
        if parsed is None or uid is None:
            return
        token = parsed[0]
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        raw = str(labels.get(names.LABEL_COMPLETION_INDEX, ""))
        key = (
            str(meta.get("namespace", "")),
            str(labels.get(names.LABEL_JOB, "")),
            int(raw) if raw.isdigit() else None,
        )
        with self._lock:
            self._disowned.add(uid)
            self._disowned_jobs.add(key[:2])
            known = self._pods.get(key, {})
            if token in known and known[token].uid == uid:
                del known[token]

    def disowned(self, uid: str | None) -> bool:
        """Whether the pod of ``uid`` was created for a claim that did not land (:meth:`disown`)."""
        with self._lock:
            return uid in self._disowned

    def settle(self, namespace: str, job: str, index: int | None, present: set[int]) -> None:
        """Mark gone the pods being deleted that a list no longer returned.

        A watch may miss a deletion while it lists again. Only pods seen
        being deleted are marked: one created after the list is not missing,
        and its next event would tell it anyway.

        Args:
            namespace: the job's namespace.
            job: the job's name.
            index: the completion index, or ``None``.
            present: the tokens of the pods the list returned.
        """
        with self._lock:
            known = self._pods.get((namespace, job, index), {})
            for token, facts in known.items():
                if token not in present and facts.deleting and not facts.gone:
                    known[token] = facts._replace(gone=True)

    def settle_all(self, namespace: str, job: str, *, owner_uid: str, present: set[str]) -> None:
        """Mark gone every remembered pod of a job incarnation that a fresh list did not return.

        For a decided job only (it makes no pod any more, so a pod missing
        from a list made after its last create is gone): a watch that missed
        a deletion must not keep the job waiting for it.

        Args:
            namespace: the job's namespace.
            job: the job's name.
            owner_uid: the LeasedJob incarnation whose pods the list covered.
            present: the UIDs of the pods the list returned.
        """
        with self._lock:
            for key, known in self._pods.items():
                if key[:2] != (namespace, job):
                    continue
                for token, facts in known.items():
                    if facts.owner_uid == owner_uid and facts.uid not in present:
                        known[token] = facts._replace(gone=True)

    def counts(self, namespace: str, job: str, *, owner_uid: str) -> PodCounts | None:
        """The job's ready and terminating pods, as batch/v1 Job counts them.

        Over every completion index; only the pods ``owner_uid`` (the LeasedJob
        incarnation) controls. batch/v1: ``countReadyPods`` over the active pods
        and ``countTerminatingPods`` (``pkg/controller/job/job_controller.go``).

        Args:
            namespace: the job's namespace.
            job: the job's name.
            owner_uid: the LeasedJob incarnation's UID.

        Returns:
            The counts, or ``None`` when no pod watch feeds this memory (unknown).
        """
        with self._lock:
            if not self.fed:
                return None
            pods = self._owned(namespace, job, owner_uid)
        return PodCounts(
            ready=sum(1 for p in pods if p.ready),
            terminating=sum(1 for p in pods if p.terminating),
        )

    def left(self, namespace: str, job: str, *, owner_uid: str) -> int | None:
        """How many of the job's pods are not terminal yet, as last seen (any index).

        The count :meth:`~leasehold.controller.act.attempts.Attempts.pods_left`
        lists for, read from memory: a pod being deleted counts until it is
        terminal or gone (batch/v1 waits for it before ``Complete``/``Failed``).
        Only trustworthy once a list has shown this memory every pod of the
        job (the caller lists first): a pod neither the watch nor the
        operator's own create told it of is not counted.

        Args:
            namespace: the job's namespace.
            job: the job's name.
            owner_uid: only the pods this LeasedJob incarnation controls.

        Returns:
            The count, or ``None`` when the memory cannot tell: no pod watch
            feeds it, it forgot some of the job's pods (more than
            :data:`KEPT_TOKENS` attempts of one index), or one of them was
            disowned (:meth:`disown`: its facts are dropped, but batch/v1
            would wait for it too).
        """
        with self._lock:
            job_key = (namespace, job)
            if not self.fed or job_key in self._evicted or job_key in self._disowned_jobs:
                return None
            return sum(1 for facts in self._owned(namespace, job, owner_uid) if not facts.terminal)

    def _owned(self, namespace: str, job: str, owner_uid: str) -> list[PodFacts]:
        """The remembered pods of a job incarnation, over every index (the lock is held)."""
        return [
            facts
            for key, tokens in self._pods.items()
            if key[:2] == (namespace, job)
            for facts in tokens.values()
            if facts.owner_uid == owner_uid
        ]

    def recall(
        self, namespace: str, job: str, index: int | None = None, *, owner_uid: str | None = None
    ) -> dict[int, PodFacts]:
        """The remembered pods of one job (of one completion index), by token.

        Args:
            namespace: the job's namespace.
            job: the job's name.
            index: the completion index, for a job with several completions.
            owner_uid: only the pods this LeasedJob incarnation controls
                (``None``: every pod with the job's labels).

        Returns:
            A copy: token to facts.
        """
        with self._lock:
            known = self._pods.get((namespace, job, index), {})
            return {
                token: facts
                for token, facts in known.items()
                if owner_uid is None or facts.owner_uid == owner_uid
            }

    def may_have_below(
        self, namespace: str, job: str, token: int, *, index: int | None = None
    ) -> bool:
        """Whether a pod of the job (or of one index) under a token below ``token`` may exist.

        ``True`` unless a pod watch feeds this memory (:attr:`fed`) and it
        saw no such pod (nor forgot one). A pod the watch has not delivered
        yet (an operator just started) is missed: a stale pod is fenced
        anyway, and a later reconcile deletes it.

        Args:
            namespace: the job's namespace.
            job: the job's name.
            token: the fencing token.
            index: only that completion index's pods (an index's tokens are its
                own); ``None``: every pod of the job.
        """
        with self._lock:
            if not self.fed or (namespace, job) in self._evicted:
                return True
            if index is not None:
                return any(known < token for known in self._pods.get((namespace, job, index), {}))
            return any(
                known < token
                for key, tokens in self._pods.items()
                if key[:2] == (namespace, job)
                for known in tokens
            )

    def forget(self, namespace: str, job: str) -> None:
        """The job is gone: drop its pods.

        Args:
            namespace: the job's namespace.
            job: the job's name.
        """
        with self._lock:
            for key in [k for k in self._pods if k[:2] == (namespace, job)]:
                del self._pods[key]
            self._evicted.discard((namespace, job))
            self._disowned_jobs.discard((namespace, job))
