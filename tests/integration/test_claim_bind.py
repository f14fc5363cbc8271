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

import dataclasses
import re
import shlex
import threading
import time
from typing import Any

from kubernetes import client, watch

from leasehold import names
from leasehold.controller.act.attempts import Attempts, Claimed
from leasehold.controller.plan.single import Action, Plan
from leasehold.controller.runtime import Actors
from leasehold.lease.api import LeasedJob, LeasedJobStatus
from leasehold.lease.errors import StoreError
from leasehold.lease.protocol import Rejection
from leasehold.lease.store import Accepted, LeaseStore, Rejected
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


def test_an_attempt_claims_and_binds_its_pod_in_one_lease_write(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    namespace: str,
) -> None:
    """One JobLease write fewer per attempt than claim-then-bind.

    The lease of a one-attempt job is written: create, claim (bound to the
    pod in the same write), the worker's first renewal, its completion. No
    version of it is ever held and unbound.
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
    kinds: list[str] = []
    for before, after in zip([{}, *seen], seen, strict=False):
        if not before:
            kinds.append("create")
        elif after.get("fencingToken") != before.get("fencingToken"):
            kinds.append("claim")
        elif after.get("completion") and not before.get("completion"):
            kinds.append("complete")
        elif after.get("renewTime") != before.get("renewTime"):
            kinds.append("renew")
        else:
            kinds.append("other")
    assert kinds[:2] == ["create", "claim"] and kinds[-1] == "complete", kinds
    assert set(kinds[2:-1]) <= {"renew"}, kinds  # no bind, nor any other write
    claim = seen[kinds.index("claim")]
    pod: Any = client.CoreV1Api(api_client).read_namespaced_pod("one-1", namespace)
    assert claim["holderUID"] == pod.metadata.uid
    assert status(api_client, namespace, "one")["completion"]["fencingToken"] == 1


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
    time.sleep(0.5)  # the pod watch's events
    pods.stop()
    assert started is None
    assert isinstance(claimed, Rejected) and claimed.rejection is Rejection.SUSPENDED
    record = store.get(namespace, "lost").record
    assert (record.fencing_token, record.holder_identity, record.holder_uid) == (0, None, None)

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
    wait_for(
        "the completion",
        lambda: store.get(namespace, "race").record.completion is not None,
        30,
    )
    assert store.get(namespace, "race").record.completion.fencing_token == 1  # type: ignore[union-attr]
    assert len(RAN.findall(local_pod_runner.log(namespace, "race-1"))) == 1
