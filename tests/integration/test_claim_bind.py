"""An attempt's claim binds its pod: the pod is created first, the claim and the bind are one write.

batch/v1 has no lease; what is mirrored here is its cost: a Job's controller
creates a pod and records it, leasehold creates the pod under the token its
claim will take and then claims the lease bound to the pod's UID in one
conditional write (docs/lifecycle.md, "A holder is a pod UID, not a name").
A claim that does not land leaves its pod without a hold for ever: the pod
is deleted at once and never starts its command; two replicas racing for
the same token bind the one pod of that token's name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import shlex
import threading
import time
from typing import Any

import pytest
from kubernetes import client, watch

from leasehold import names
from leasehold.controller.act.attempts import Attempts, Claimed
from leasehold.controller.plan.pod import build_pod
from leasehold.controller.plan.single import Action, Plan
from leasehold.controller.runtime import Actors
from leasehold.lease.api import LeasedJob, LeasedJobStatus, LeaseMode
from leasehold.lease.errors import LeaseNotFoundError, StoreError
from leasehold.lease.indexes import index_lease_name
from leasehold.lease.protocol import Completion, Rejection
from leasehold.lease.store import Accepted, HeldBy, LeaseStore, Rejected, StoredLease
from operatorproc import OperatorProcess
from podrunner import PodRunner
from tests.integration.jobs import (
    create_job,
    get_job,
    patch_spec,
    phase_is,
    pod_gone_or_going,
    run,
    status,
    wait_for,
)

G, V = names.GROUP, names.VERSION
MARK = "the-command-ran"
RAN = re.compile(MARK + r" token \d+")
"""What the command prints (``leasehold run`` logs the command line with ``$LEASEHOLD_...``)."""


def marked(seconds: float) -> str:
    """``leasehold run`` of a command that prints :data:`MARK` when it starts."""
    script = f"echo {MARK} token $LEASEHOLD_FENCING_TOKEN; sleep {seconds}"
    return f"leasehold run -- sh -c {shlex.quote(script)}"


class Watched:
    """Every version of a namespace's objects of one kind, from a watch started now.

    ``seen``: (event type, object) in order; ``times``: when each arrived
    (this process's monotonic seconds).
    """

    def __init__(self, list_fn: Any, *args: Any) -> None:
        listed: Any = list_fn(*args)
        meta = listed["metadata"] if isinstance(listed, dict) else listed.metadata
        since = meta["resourceVersion"] if isinstance(meta, dict) else meta.resource_version
        self._watch = watch.Watch()
        self.seen: list[tuple[str, Any]] = []
        self.times: list[float] = []
        stream = self._watch.stream(list_fn, *args, resource_version=since, timeout_seconds=120)
        self._thread = threading.Thread(target=self._run, args=(stream,), daemon=True)
        self._thread.start()

    def _run(self, stream: Any) -> None:
        try:
            for event in stream:
                self.times.append(time.monotonic())
                self.seen.append((event["type"], event["object"]))
        except Exception:  # the connection, closed by stop()
            return

    def stop(self) -> None:
        self._watch.stop()


def lease_versions(api: client.ApiClient, namespace: str) -> Watched:
    """The namespace's JobLease versions (bodies as dicts)."""
    custom = client.CustomObjectsApi(api)
    return Watched(custom.list_namespaced_custom_object, G, V, namespace, "jobleases")


def specs(versions: Watched, name: str) -> list[dict[str, Any]]:
    """The specs of the lease ``name``, version by version."""
    return [o["spec"] for _, o in versions.seen if o["metadata"]["name"] == name]


def lease_writes(seen: list[dict[str, Any]]) -> list[str]:
    """What each version of a lease was written by: create (held or not), claim, renew, ..."""
    kinds: list[str] = []
    for before, after in zip([{}, *seen], seen, strict=False):
        if not before:
            kinds.append("create-held" if after.get("holderIdentity") else "create")
        elif after.get("fencingToken") != before.get("fencingToken"):
            kinds.append("claim")
        elif after.get("completion") and not before.get("completion"):
            kinds.append("complete")
        elif after.get("renewTime") != before.get("renewTime"):
            kinds.append("renew")
        else:
            kinds.append("other")
    return kinds


def test_a_first_attempt_is_claimed_in_its_leases_create(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    """Two JobLease writes fewer per first attempt than create, claim, bind (issue 29).

    The pod is created first, under token 1; the lease is then created
    already held by it and bound to its UID (one write), renewed once by the
    worker's confirm renewal (``leasehold run`` waited for the lease to
    exist), and completed: three versions, where the unheld create and the
    claim made four (main before this change: create, claim, renew,
    complete). No version of it is ever held and unbound.
    """
    versions = lease_versions(api_client, namespace)
    create_job(api_client, namespace, "one", run(0.2), lease_seconds=30)
    wait_for("Succeeded", phase_is(api_client, namespace, "one", "Succeeded"), 60)
    # The operator's status writes after the completion touch the job, not the lease.
    wait_for(
        "the completion's version",
        lambda: any(s.get("completion") for s in specs(versions, "one")),
        10,
    )
    versions.stop()
    seen = specs(versions, "one")
    unbound = [s for s in seen if s.get("holderIdentity") and not s.get("holderUID")]
    assert not unbound, f"held and unbound: {unbound}"
    kinds = lease_writes(seen)
    assert kinds == ["create-held", "renew", "complete"], kinds
    created = seen[0]
    pod: Any = client.CoreV1Api(api_client).read_namespaced_pod("one-1", namespace)
    assert created["holderUID"] == pod.metadata.uid
    assert created["holderIdentity"] == "one-1"
    assert (created["fencingToken"], created.get("baseFencingToken", 0)) == (1, 0)
    assert created["acquireTime"] == created["renewTime"]  # starting, not yet renewed
    assert not created.get("suspended")
    assert status(api_client, namespace, "one")["completion"]["fencingToken"] == 1


def test_an_index_first_attempt_is_claimed_in_its_index_leases_create(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    """Each index lease of an Indexed job is created held by its index's first pod (issue 29).

    The same fold as a single job's first attempt: per index, the lease's
    versions are its held create, the worker's confirm renewal and the
    completion (an unheld create and a claim before: four). Every index's
    lease is bound to that index's pod from its first version on.
    """
    versions = lease_versions(api_client, namespace)
    create_job(
        api_client,
        namespace,
        "ix",
        run(0.2),
        lease_seconds=30,
        completions=3,
        parallelism=3,
        completionMode="Indexed",
    )
    wait_for("Succeeded", phase_is(api_client, namespace, "ix", "Succeeded"), 90)
    leases = [index_lease_name("ix", i) for i in range(3)]
    wait_for(
        "the completions' versions",
        lambda: all(any(s.get("completion") for s in specs(versions, n)) for n in leases),
        10,
    )
    versions.stop()
    core = client.CoreV1Api(api_client)
    for index, lease in enumerate(leases):
        seen = specs(versions, lease)
        kinds = lease_writes(seen)
        assert kinds == ["create-held", "renew", "complete"], (lease, kinds)
        pod: Any = core.read_namespaced_pod(f"ix-{index}-1", namespace)
        created = seen[0]
        assert (created["holderIdentity"], created["holderUID"]) == (
            f"ix-{index}-1",
            pod.metadata.uid,
        )
        assert (created["fencingToken"], created.get("baseFencingToken", 0)) == (1, 0)
        assert seen[-1]["completion"]["fencingToken"] == 1
    assert status(api_client, namespace, "ix")["completedIndexes"] == "0-2"


def _claim_plan(pod: str, token: int) -> Plan:
    return Plan(Action.CLAIM_AND_START, LeasedJobStatus(), pod_name=pod, token=token)


def test_a_lost_claims_pod_is_deleted_and_never_runs_the_command(
    worker_rbac: None,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    """The claim, judged on the lease before a suspend landed, is refused: its pod never holds.

    An operator in-process (no other reconciles): the job is suspended, its
    lease suspended at the store; the claim is planned on the version before
    that (as a reconcile that raced the suspend). The pod made for token 1 is
    deleted at once and its ``leasehold run`` never starts the command; after
    the resume the next claim takes token 1 with a new pod of the same name.
    """
    actors = Actors.connect(api_client)
    create_job(api_client, namespace, "lost", marked(0.2), lease_seconds=10, suspend=True)
    actors.jobs.reconcile(namespace, "lost")  # creates the lease, suspended
    lease = store.get(namespace, "lost")
    assert lease.record.suspended and lease.record.fencing_token == 0
    before = dataclasses.replace(lease, record=dataclasses.replace(lease.record, suspended=False))
    body = get_job(api_client, namespace, "lost")
    job = LeasedJob.model_validate(body)

    pods = Watched(client.CoreV1Api(api_client).list_namespaced_pod, namespace)
    started, claimed = Attempts(actors.ctx).claim_and_start(
        job, body, _claim_plan("lost-1", 1), before
    )
    made = wait_for(  # the watch replays from its start: the pod's ADDED comes
        "the pod seen",
        lambda: [o.metadata.uid for kind, o in pods.seen if kind == "ADDED"],
        10,
    )
    assert started is None
    assert isinstance(claimed, Rejected) and claimed.rejection is Rejection.SUSPENDED
    record = store.get(namespace, "lost").record
    assert (record.fencing_token, record.holder_identity, record.holder_uid) == (0, None, None)
    time.sleep(0.5)  # a second pod's ADDED (none may be made) would come as soon
    pods.stop()
    made = [o.metadata.uid for kind, o in pods.seen if kind == "ADDED"]
    assert len(made) == 1
    lost_uid = str(made[0])

    wait_for(
        "the lost claim's pod deleted",
        lambda: pod_gone_or_going(api_client, namespace, "lost-1"),
        10,
    )

    # Resume: the next claim takes token 1 again, for a new pod of that name
    # (once the lost one is gone: its name is taken until then).
    patch_spec(api_client, namespace, "lost", {"suspend": False})

    def held() -> str | None:
        try:
            actors.jobs.reconcile(namespace, "lost")
        except StoreError:
            return None  # the lost pod's name is still taken: again
        now = store.get(namespace, "lost").record
        return now.holder_uid if now.fencing_token == 1 else None

    bound = wait_for("token 1 claimed for a new pod", held, 60)
    assert bound != lost_uid
    wait_for(
        "the command ran once", lambda: RAN.search(local_pod_runner.log(namespace, "lost-1")), 30
    )
    # Its process, if the runner started one before the delete, wrote here.
    lost_log = local_pod_runner.pods_dir / f"{namespace}_lost-1_{lost_uid}" / "log"
    text = lost_log.read_text(errors="replace") if lost_log.exists() else ""
    assert not RAN.search(text), f"the lost claim's pod ran the command:\n{text}"
    assert actors.ctx.pod_memory.disowned(lost_uid)


def test_two_replicas_claiming_the_same_token_bind_one_pod(
    worker_rbac: None,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    """HA: two operator replicas plan the same attempt at once; only one claim lands.

    Both create pod ``race-1``: one create gets 409 and claims for the pod the
    other made (it is this job's and not being deleted); both claims bind that
    one pod, one lands, and the replica whose claim lost sees its pod bound
    and keeps it. No pod is deleted; the command runs once.
    """
    replicas = [Actors.connect(api_client), Actors.connect(api_client)]
    create_job(api_client, namespace, "race", marked(0.2), lease_seconds=10, suspend=True)
    replicas[0].jobs.reconcile(namespace, "race")  # creates the lease, suspended
    resumed = store.resume(store.get(namespace, "race"))
    assert isinstance(resumed, Accepted)
    patch_spec(api_client, namespace, "race", {"suspend": False})
    body = get_job(api_client, namespace, "race")
    job = LeasedJob.model_validate(body)
    gate = threading.Barrier(2)
    results: list[Claimed | None] = [None, None]

    def claim(i: int) -> None:
        gate.wait()
        results[i] = Attempts(replicas[i].ctx).claim_and_start(
            job, body, _claim_plan("race-1", 1), resumed.lease
        )

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert all(r is not None and r.plan is not None for r in results), results
    landed = [r for r in results if r is not None and isinstance(r.result, Accepted)]
    assert len(landed) == 1, results
    pod: Any = client.CoreV1Api(api_client).read_namespaced_pod("race-1", namespace)
    assert pod.metadata.deletion_timestamp is None
    record = store.get(namespace, "race").record
    assert (record.fencing_token, record.holder_uid) == (1, pod.metadata.uid)
    wait_for("the command ran", lambda: RAN.search(local_pod_runner.log(namespace, "race-1")), 30)
    completion = _completed_after_one_run(store, local_pod_runner, namespace, "race")
    assert completion.fencing_token == 1


def _completed_after_one_run(
    store: LeaseStore, runner: PodRunner, namespace: str, job: str
) -> Completion:
    """Wait (30 s) for the job's lease completion; its first pod ran the command once."""
    completion = wait_for("the completion", lambda: store.get(namespace, job).record.completion, 30)
    assert len(RAN.findall(runner.log(namespace, f"{job}-1"))) == 1
    return completion


def _first_pod(api_client: client.ApiClient, namespace: str, name: str) -> str:
    """Create the job's first attempt's pod as the operator builds it (token 1); its UID."""
    body = get_job(api_client, namespace, name)
    job = LeasedJob.model_validate(body)
    pod = build_pod(
        job,
        namespace=namespace,
        holder=f"{name}-1",
        token=1,
        owner_uid=str(body["metadata"]["uid"]),
        lease_duration_seconds=job.spec.lease_duration_seconds,
    )
    core: Any = client.CoreV1Api(api_client)
    return str(core.create_namespaced_pod(namespace, pod).metadata.uid)


def _push_lease(
    store: LeaseStore,
    namespace: str,
    job: str,
    job_uid: str,
    max_fencing_token: int,
    **extra: Any,
) -> StoredLease:
    """Create job ``job``'s lease as the operator would for a push-mode job of 10 s leases."""
    return store.create(
        namespace,
        job,
        job_name=job,
        lease_duration_seconds=10,
        max_fencing_token=max_fencing_token,
        job_uid=job_uid,
        mode=LeaseMode.PUSH,
        startup_deadline_seconds=600,
        labels={names.LABEL_JOB: job},
        **extra,
    )


def test_a_pod_made_before_a_restart_gets_the_lease_created_held_by_it(
    worker_rbac: None,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    """The operator stopped between the first pod's create and the lease's.

    The pod exists (this job's, token 1) and no lease; its ``leasehold run``
    waits, its confirm renewal answered 404. The next reconcile (an operator
    in-process, as after a restart: nothing cached) finds the pod its own and
    creates the lease held by that very pod: the same pod runs the command,
    once, under token 1.
    """
    create_job(api_client, namespace, "again", marked(0.2), lease_seconds=10)
    pod_uid = _first_pod(api_client, namespace, "again")
    time.sleep(1.5)  # its worker starts and finds no lease
    with pytest.raises(LeaseNotFoundError):
        store.get(namespace, "again")
    actors = Actors.connect(api_client)
    actors.jobs.reconcile(namespace, "again")
    record = store.get(namespace, "again").record
    assert (record.fencing_token, record.holder_identity, record.holder_uid) == (
        1,
        "again-1",
        pod_uid,
    )
    assert record.acquire_time is not None
    completion = _completed_after_one_run(store, local_pod_runner, namespace, "again")
    assert completion.fencing_token == 1


def _gone_or_going(api: client.ApiClient, namespace: str, name: str, uid: str) -> bool:
    """The pod of that UID is deleted or being deleted (the name may have a new pod)."""
    try:
        found: Any = client.CoreV1Api(api).read_namespaced_pod(name, namespace)
    except client.ApiException as exc:
        return bool(exc.status == 404)
    return found.metadata.uid != uid or found.metadata.deletion_timestamp is not None


def test_a_held_create_refused_because_the_lease_exists_deletes_its_pod(
    worker_rbac: None,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    """A lease the cache had not seen (an earlier incarnation's, unheld): the held create gets 409.

    The pod made for the held create never holds: it is deleted at once
    (never runs the command) and the job is planned again on the lease read;
    once that pod is gone the next claim takes token 1 for a new pod. (A
    lease of this incarnation that a claim for the pod would take keeps
    the pod: ``test_a_held_create_refused_by_a_peers_unheld_lease_...``.)
    """
    create_job(api_client, namespace, "taken", marked(0.2), lease_seconds=10)
    _push_lease(store, namespace, "taken", "00000000-0000-0000-0000-0000000000e1", 3)  # earlier
    actors = Actors.connect(api_client)
    pods = Watched(client.CoreV1Api(api_client).list_namespaced_pod, namespace)
    # Planned again on the lease read: taken over (this incarnation's now),
    # then claimed once the refused create's pod is gone (its name is taken).
    with contextlib.suppress(StoreError):
        actors.jobs.reconcile(namespace, "taken")
    made = wait_for(
        "the held create's pod seen",
        lambda: [o.metadata.uid for kind, o in pods.seen if kind == "ADDED"],
        10,
    )
    lost_uid = str(made[0])  # the first pod made: the held create's
    # Never bound to it. (If its deletion was quick, the same reconcile may
    # already have claimed token 1 for a new pod: a CI run saw both pods.)
    record = store.get(namespace, "taken").record
    assert record.holder_uid != lost_uid
    assert (record.fencing_token, record.holder_identity) in ((0, None), (1, "taken-1"))
    wait_for(
        "the refused create's pod deleted",
        lambda: _gone_or_going(api_client, namespace, "taken-1", lost_uid),
        10,
    )
    assert actors.ctx.pod_memory.disowned(lost_uid)

    def held() -> str | None:
        try:
            actors.jobs.reconcile(namespace, "taken")
        except StoreError:
            return None  # the refused create's pod is still going
        now = store.get(namespace, "taken").record
        return now.holder_uid if now.fencing_token == 1 else None

    assert wait_for("token 1 claimed for a new pod", held, 60) != lost_uid
    pods.stop()
    wait_for(
        "the command ran once", lambda: RAN.search(local_pod_runner.log(namespace, "taken-1")), 30
    )
    lost_log = local_pod_runner.pods_dir / f"{namespace}_taken-1_{lost_uid}" / "log"
    text = lost_log.read_text(errors="replace") if lost_log.exists() else ""
    assert not RAN.search(text), f"the refused create's pod ran the command:\n{text}"


def test_a_held_create_refused_for_a_lease_bound_to_its_own_pod_keeps_both(
    worker_rbac: None,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    """An earlier held create of ours landed, unseen (its answer lost): the 409 finds our pod.

    The lease exists, held by this job's pod ``<job>-1``; a reconcile that
    knows neither plans the held create again, finds the pod its own, is
    refused the create and reads the lease: bound to that very pod, so
    nothing is deleted or written, and the attempt runs on.
    """
    create_job(api_client, namespace, "mine", marked(0.2), lease_seconds=10)
    body = get_job(api_client, namespace, "mine")
    pod_uid = _first_pod(api_client, namespace, "mine")
    created = _push_lease(
        store,
        namespace,
        "mine",
        str(body["metadata"]["uid"]),
        3,
        held_by=HeldBy("mine-1", pod_uid, 1),
    )
    actors = Actors.connect(api_client)
    actors.jobs.reconcile(namespace, "mine")
    live: Any = client.CoreV1Api(api_client).read_namespaced_pod("mine-1", namespace)
    assert live.metadata.uid == pod_uid
    assert live.metadata.deletion_timestamp is None
    after = store.get(namespace, "mine")
    assert (after.record.fencing_token, after.record.holder_uid) == (1, pod_uid)
    assert after.record.acquire_time == created.record.acquire_time  # no write of ours
    _completed_after_one_run(store, local_pod_runner, namespace, "mine")


def test_a_held_create_refused_by_a_peers_unheld_lease_claims_for_the_peers_pod(
    worker_rbac: None,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    """HA hand-over: a peer created the lease unheld and made pod ``<job>-1``; its claim is next.

    Replica A (a plain create, then ``claim_and_start``: the pod first) has
    made the lease (token 0, unheld, this incarnation) and the pod; its
    claim for that pod is on its way. Replica B, whose cache has seen
    neither, plans the held create, finds the pod its own, and is refused
    (409). The lease read is exactly what a claim for that pod takes: B must
    claim for the pod (as the plain path does), not delete it, or A's claim
    lands on a deleted pod and the attempt is wasted (with ``maxAttempts: 1``
    the job fails without its command ever running).
    """
    create_job(api_client, namespace, "peer", marked(0.2), lease_seconds=10, max_attempts=1)
    body = get_job(api_client, namespace, "peer")
    _push_lease(
        store,
        namespace,
        "peer",
        str(body["metadata"]["uid"]),
        1,
        finalizers=[names.FINALIZER_DOMAIN],
    )
    pod_uid = _first_pod(api_client, namespace, "peer")  # replica A's pod, its claim in flight
    replica_b = Actors.connect(api_client)
    with contextlib.suppress(StoreError):  # judged below (the branch before the fix raised)
        replica_b.jobs.reconcile(namespace, "peer")
    live: Any = client.CoreV1Api(api_client).read_namespaced_pod("peer-1", namespace)
    assert live.metadata.uid == pod_uid
    assert live.metadata.deletion_timestamp is None, "the peer's pod was deleted"
    record = store.get(namespace, "peer").record
    assert (record.fencing_token, record.holder_uid) == (1, pod_uid)
    _completed_after_one_run(store, local_pod_runner, namespace, "peer")
