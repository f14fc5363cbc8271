"""Indexed LeasedJobs on a real control plane: one JobLease (fencing domain) per index.

Each operator test runs its own operator; pods run as local processes (the
pod runner), whose ``leasehold run`` wrappers renew against the real API
server. The fenced target is a real PostgreSQL.
"""

from __future__ import annotations

import re
import secrets
import shlex
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from kubernetes import client, config
from psycopg import sql
from psycopg.conninfo import make_conninfo

from leasehold import names, worker
from leasehold.fencing import StaleToken
from leasehold.fencing.postgres import fence, install
from leasehold.lease.indexes import index_lease_name
from leasehold.lease.protocol import Outcome, Rejection
from leasehold.lease.store import Accepted, LeaseStore, Rejected, Result
from leasehold.worker.holder import LeaseHolder
from operatorproc import OperatorProcess
from podrunner import PodRunner
from tests.integration.jobs import (
    G,
    V,
    condition,
    condition_true,
    create_job,
    events,
    phase_is,
    status,
    wait_for,
)

CLAIMERS_PER_INDEX = 50
"""Racing claimers per index (threads, each with its own ApiClient)."""
RACED_INDEXES = 4
RACE_ROUNDS = 3


def sh(script: str) -> str:
    return f"leasehold run -- sh -c {shlex.quote(script)}"


def get_uid(api: client.ApiClient, namespace: str, name: str) -> str:
    body: Any = client.CustomObjectsApi(api).get_namespaced_custom_object(
        G, V, namespace, names.PLURAL_LEASED_JOBS, name
    )
    return str(body["metadata"]["uid"])


def failed_reason(api: client.ApiClient, namespace: str, name: str) -> str:
    return str(condition(status(api, namespace, name), "Failed")["reason"])


def test_indexed_job_runs_each_index_under_its_own_lease(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    create_job(
        api_client,
        namespace,
        "idx",
        sh("echo index $JOB_COMPLETION_INDEX $LEASEHOLD_COMPLETION_INDEX; sleep 0.5"),
        lease_seconds=10,  # several pods start at once on 2 busy cores
        completions=4,
        parallelism=2,
        completionMode="Indexed",
    )
    most_active = 0

    def finished() -> bool:
        nonlocal most_active
        st = status(api_client, namespace, "idx")
        held = [
            lease
            for lease in store.list_leases(namespace, label_selector=f"{names.LABEL_JOB}=idx")
            if lease.record.holder_identity is not None
        ]
        most_active = max(most_active, len(held))
        return st.get("phase") == "Succeeded"

    wait_for("Succeeded", finished, 90)
    assert 1 <= most_active <= 2  # parallelism
    st = status(api_client, namespace, "idx")
    assert st["completedIndexes"] == "0-3"
    assert "failedIndexes" not in st
    assert (st["succeeded"], st["active"], st["completionProgress"]) == (4, 0, "4/4")
    assert condition(st, "Complete")["status"] == "True"
    assert condition(st, "Complete")["observedGeneration"] == 1
    uid = get_uid(api_client, namespace, "idx")
    for index in range(4):
        lease = store.get(namespace, index_lease_name("idx", index))
        assert lease.record.job_name == "idx"
        assert lease.record.completion is not None
        assert lease.record.completion.outcome == Outcome.SUCCEEDED
        assert lease.record.fencing_token == 1  # each index is its own fencing domain
        assert (lease.record.job_uid, lease.record.base_fencing_token) == (uid, 0)
        assert names.FINALIZER_DOMAIN in lease.body["metadata"]["finalizers"]
        assert not lease.body["metadata"].get("ownerReferences")
        log = local_pod_runner.log(namespace, f"idx-{index}-1")
        assert f"index {index} {index}" in log
        # podRetention Last: each index's last pod is kept (ended), for `kubectl logs`.
        pod: Any = client.CoreV1Api(api_client).read_namespaced_pod(f"idx-{index}-1", namespace)
        assert pod.metadata.deletion_timestamp is None and pod.status.phase == "Succeeded"
    events(api_client, namespace, "idx", until=["Completed"])
    # The lease outlives the job, stopped: no pod or pool can take an index again.
    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
        G, V, namespace, names.PLURAL_LEASED_JOBS, "idx"
    )
    time.sleep(1.0)
    assert store.get(namespace, "idx.0").record.fencing_token == 1


def test_per_index_budgets_fail_only_their_indexes(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    # Indexes 1, 3 and 4 always fail; each is retried once (backoffLimitPerIndex=1).
    script = 'case "$JOB_COMPLETION_INDEX" in 1|3|4) exit 3;; esac; exit 0'
    create_job(
        api_client,
        namespace,
        "budget",
        sh(script),
        lease_seconds=10,
        completions=6,
        parallelism=3,
        completionMode="Indexed",
        backoffLimitPerIndex=1,
        backoff={"initialDelaySeconds": 0, "factor": 1, "maxDelaySeconds": 0},
    )
    wait_for("Failed", phase_is(api_client, namespace, "budget", "Failed"), 120)
    st = status(api_client, namespace, "budget")
    assert st["completedIndexes"] == "0,2,5"
    assert st["failedIndexes"] == "1,3,4"  # batch/v1 writes a pair as two numbers
    assert (st["succeeded"], st["failed"], st["completionProgress"]) == (3, 6, "3/6")
    assert failed_reason(api_client, namespace, "budget") == "FailedIndexes"
    for index in (1, 3, 4):
        record = store.get(namespace, f"budget.{index}").record
        assert record.failures == 1  # retried once, then failed for good
        assert record.completion is not None and record.completion.fencing_token == 2
    for index in (0, 2, 5):
        assert store.get(namespace, f"budget.{index}").record.fencing_token == 1


def test_max_failed_indexes_fails_the_job_and_starts_no_more_indexes(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    script = '[ "$JOB_COMPLETION_INDEX" = 1 ] && exit 1; exit 0'
    create_job(
        api_client,
        namespace,
        "maxf",
        sh(script),
        lease_seconds=10,
        completions=5,
        parallelism=1,
        completionMode="Indexed",
        backoffLimitPerIndex=0,
        maxFailedIndexes=0,
    )
    wait_for("Failed", phase_is(api_client, namespace, "maxf", "Failed"), 90)
    st = status(api_client, namespace, "maxf")
    assert (st["completedIndexes"], st["failedIndexes"]) == ("0", "1")
    assert failed_reason(api_client, namespace, "maxf") == "MaxFailedIndexesExceeded"
    leases = store.list_leases(namespace, label_selector=f"{names.LABEL_JOB}=maxf")
    assert sorted(lease.name for lease in leases) == ["maxf.0", "maxf.1"]


def test_the_crd_refuses_inconsistent_index_specs(
    api_client: client.ApiClient, crds_installed: Path, namespace: str
) -> None:
    for spec, message in (
        ({"completionMode": "Indexed"}, "needs spec.completions"),
        ({"completions": 2, "backoffLimitPerIndex": 1}, "needs spec.completionMode: Indexed"),
        (
            {"completions": 2, "completionMode": "Indexed", "maxFailedIndexes": 1},
            "spec.maxFailedIndexes needs spec.backoffLimitPerIndex",
        ),
    ):
        with pytest.raises(client.ApiException) as refused:
            create_job(api_client, namespace, "bad", sh("true"), **spec)
        assert refused.value.status == 422
        assert message in str(refused.value.body)
    create_job(api_client, namespace, "ok", sh("true"), completions=2, completionMode="Indexed")
    # Suspend, params and priority apply to every index (tests/integration/test_indexed_suspend.py).
    create_job(
        api_client,
        namespace,
        "ok-too",
        sh("true"),
        completions=2,
        completionMode="Indexed",
        suspend=True,
        params={"shards": [0, 1]},
        priority=5,
    )
    with pytest.raises(client.ApiException) as refused:
        client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
            G, V, namespace, names.PLURAL_LEASED_JOBS, "ok", {"spec": {"completions": 3}}
        )
    assert "can only be modified in tandem with spec.parallelism" in str(refused.value.body)


def test_a_finished_indexed_job_is_deleted_after_its_ttl_and_its_leases_stay(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    create_job(
        api_client,
        namespace,
        "idx-ttl",
        sh("true"),
        lease_seconds=10,
        completions=2,
        parallelism=2,
        completionMode="Indexed",
        ttlSecondsAfterFinished=2,
    )
    custom = client.CustomObjectsApi(api_client)

    def gone() -> bool:
        try:
            custom.get_namespaced_custom_object(
                G, V, namespace, names.PLURAL_LEASED_JOBS, "idx-ttl"
            )
        except client.ApiException as exc:
            return bool(exc.status == 404)
        return False

    wait_for("the finished job deleted by its TTL", gone, 120)
    for index in range(2):  # each index's fencing domain outlives the job
        lease = store.get(namespace, index_lease_name("idx-ttl", index))
        assert lease.record.completion is not None
        assert lease.record.fencing_token == 1


# --------------------------------------------------------------------------
# One winner per index under racing claimers


def _race(
    namespace: str,
    index: int,
    who: str,
    api: client.ApiClient,
    barrier: threading.Barrier,
    outcomes: list[tuple[int, str, Result]],
) -> None:  # one claimer thread: read, wait for all, claim on what it read
    mine = LeaseStore(api)
    lease_name = index_lease_name("pool", index)
    observed = mine.get(namespace, lease_name)
    barrier.wait(timeout=120)
    outcomes.append((index, who, mine.claim(namespace, lease_name, who, observed=observed)))


def test_one_winner_per_index_under_racing_claimers(
    operator: OperatorProcess,
    api_client: client.ApiClient,
    store: LeaseStore,
    crds_installed: Path,
    namespace: str,
) -> None:
    """50 claimer threads per index (each its own ApiClient), 4 indexes, 3 rounds.

    Every claimer reads its index's lease, waits at one barrier, then claims on
    what it read: all PATCHes of a round carry the same resourceVersion, so the
    API server's optimistic concurrency picks one winner per index. The winner
    releases; the next round races for the next token.
    """
    create_job(
        api_client,
        namespace,
        "pool",
        None,
        lease_seconds=900,
        max_attempts=RACE_ROUNDS + 1,
        completions=RACED_INDEXES,
        parallelism=RACED_INDEXES,
        completionMode="Indexed",
    )
    selector = f"{names.LABEL_JOB}=pool"
    wait_for(
        "the index leases",
        lambda: len(store.list_leases(namespace, label_selector=selector)) == RACED_INDEXES,
        30,
    )
    claimers = [
        (index, f"claimer-{index}-{n}", config.new_client_from_config(str(crds_installed)))
        for index in range(RACED_INDEXES)
        for n in range(CLAIMERS_PER_INDEX)
    ]
    tokens: dict[int, list[int]] = {index: [] for index in range(RACED_INDEXES)}
    try:
        for round_ in range(RACE_ROUNDS):
            barrier = threading.Barrier(len(claimers))
            outcomes: list[tuple[int, str, Result]] = []

            threads = [
                threading.Thread(target=_race, args=(namespace, *claimer, barrier, outcomes))
                for claimer in claimers
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=180)
            assert len(outcomes) == len(claimers)  # no claimer raised
            for index in range(RACED_INDEXES):
                lease_name = index_lease_name("pool", index)
                mine = [(who, result) for i, who, result in outcomes if i == index]
                won = [(who, result) for who, result in mine if isinstance(result, Accepted)]
                assert len(won) == 1, (round_, index, won)
                winner, result = won[0]
                assert isinstance(result, Accepted) and winner.startswith(f"claimer-{index}-")
                lost = Counter(
                    result.rejection for _, result in mine if isinstance(result, Rejected)
                )
                assert lost == {Rejection.LOST_RACE: CLAIMERS_PER_INDEX - 1}, lost
                record = store.get(namespace, lease_name).record
                assert (record.holder_identity, record.fencing_token) == (winner, result.token)
                tokens[index].append(result.token)
                if round_ < RACE_ROUNDS - 1:
                    let_go = store.release(namespace, lease_name, winner, result.token)
                else:
                    let_go = store.complete(
                        namespace, lease_name, winner, result.token, Outcome.SUCCEEDED
                    )
                assert isinstance(let_go, Accepted), let_go
    finally:
        for _, _, api in claimers:
            api.close()
    # Each index's tokens strictly increase, one per round: no round had two winners.
    assert tokens == {index: list(range(1, RACE_ROUNDS + 1)) for index in range(RACED_INDEXES)}
    wait_for("Succeeded", phase_is(api_client, namespace, "pool", "Succeeded"), 30)
    assert status(api_client, namespace, "pool")["completedIndexes"] == f"0-{RACED_INDEXES - 1}"


# --------------------------------------------------------------------------
# A frozen index is replaced while the others run on; its zombie is refused


WORKER = """
import os, sys, time
import psycopg
from leasehold.fencing.postgres import fence
from leasehold.worker.holder import LeaseHolder

index = int(os.environ["JOB_COMPLETION_INDEX"])
token = int(os.environ["LEASEHOLD_FENCING_TOKEN"])
print("started", index, token, flush=True)
gate = os.path.join(os.environ["GATE_DIR"], f"go-{index}-{token}")
while not os.path.exists(gate):
    time.sleep(0.1)
holder = LeaseHolder.from_env(store=object())  # not started: for the fence's keys only
with psycopg.connect(os.environ["PG_DSN"]) as conn:
    with conn.transaction():
        fence(conn, holder.fence_resource("account/shared"), token, holder.effect_key("write"))
        conn.execute(
            "INSERT INTO writes VALUES (%s, %s)", (index, token)
        )
print("wrote", index, token, flush=True)
"""


@pytest.fixture
def pg(postgres_dsn: str, request: pytest.FixtureRequest) -> Iterator[str]:
    base = re.sub(r"[^a-z0-9]+", "_", request.node.name.lower())[:40]
    schema = f"{base}_{secrets.token_hex(3)}"
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    dsn = make_conninfo(postgres_dsn, options=f"-c search_path={schema}")
    with psycopg.connect(dsn) as conn:
        install(conn)
        conn.execute("CREATE TABLE writes (index int, token int)")
    yield dsn
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def test_a_frozen_index_is_replaced_while_the_others_run_on_and_its_zombie_is_refused(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
    pg: str,
    tmp_path: Path,
) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    duration = 6
    body = {
        "apiVersion": names.API_VERSION,
        "kind": "LeasedJob",
        "metadata": {"name": "fz"},
        "spec": {
            "leaseDurationSeconds": duration,
            "maxAttempts": 3,
            "completions": 3,
            "parallelism": 3,
            "completionMode": "Indexed",
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "worker",
                            "image": "local",
                            "command": ["sh", "-c", f"leasehold run -- {sys.executable} {script}"],
                            "env": [
                                {"name": "GATE_DIR", "value": str(tmp_path)},
                                {"name": "PG_DSN", "value": pg},
                            ],
                        }
                    ]
                }
            },
        },
    }
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        G, V, namespace, names.PLURAL_LEASED_JOBS, body
    )
    for index in range(3):
        local_pod_runner.wait_for_pid(namespace, f"fz-{index}-1", timeout=60)
    wait_for(
        "every index renewing",
        lambda: all("started" in local_pod_runner.log(namespace, f"fz-{i}-1") for i in range(3)),
        30,
    )
    time.sleep(1.0)  # a renewal or two
    local_pod_runner.pause(namespace, "fz-1-1")  # SIGSTOP: the wrapper and its child

    def replaced() -> bool:
        record = store.get(namespace, "fz.1").record
        return record.fencing_token == 2 and record.holder_identity == "fz-1-2"

    wait_for("index 1 taken back and claimed for fz-1-2", replaced, duration * 4 + 30)
    # Only index 1 was taken back: the others still hold their first token.
    for index in (0, 2):
        record = store.get(namespace, f"fz.{index}").record
        assert (record.holder_identity, record.fencing_token) == (f"fz-{index}-1", 1)
    st = status(api_client, namespace, "fz")
    assert st["phase"] == "Running"
    # The others run to completion while index 1's replacement waits.
    for index in (0, 2):
        (tmp_path / f"go-{index}-1").touch()
    wait_for(
        "indexes 0 and 2 done",
        lambda: status(api_client, namespace, "fz").get("completedIndexes") == "0,2",
        60,
    )
    # The zombie (index 1, token 1) completes late: the store refuses it.
    late = store.complete(namespace, "fz.1", "fz-1-1", 1, Outcome.SUCCEEDED)
    assert isinstance(late, Rejected) and late.rejection is Rejection.STALE_TOKEN
    # Index 1's new attempt writes under token 2 and completes.
    local_pod_runner.wait_for_pid(namespace, "fz-1-2", timeout=60)
    (tmp_path / "go-1-2").touch()
    # Decided (SuccessCriteriaMet) once index 1 completed; Complete waits for
    # the zombie's pod, still frozen, to terminate.
    wait_for(
        "SuccessCriteriaMet",
        lambda: condition_true(api_client, namespace, "fz", "SuccessCriteriaMet"),
        60,
    )
    st = status(api_client, namespace, "fz")
    assert (st["completedIndexes"], st["completionProgress"]) == ("0-2", "3/3")
    # The zombie's fenced write (its own index, its old token) is refused by the target.
    zombie = LeaseHolder(
        store, namespace, "fz.1", "fz-1-1", 1, duration, job_name="fz", completion_index=1
    )
    late_write = "INSERT INTO writes SELECT 1, 1 WHERE EXISTS (SELECT 1 FROM leasehold_fenced)"
    with psycopg.connect(pg, autocommit=True) as conn, pytest.raises(StaleToken) as stale:
        fence(
            conn,
            zombie.fence_resource("account/shared"),
            1,
            zombie.effect_key("write"),
            effect=late_write,
        )
    assert (stale.value.token, stale.value.current) == (1, 2)
    with psycopg.connect(pg) as conn:
        rows = sorted(conn.execute("SELECT index, token FROM writes").fetchall())
        assert rows == [(0, 1), (1, 2), (2, 1)]
        fences: dict[str, int] = dict(
            conn.execute("SELECT resource_key, highest_token FROM leasehold_fence")
        )
        assert fences == {
            "account/shared#index-0": 1,
            "account/shared#index-1": 2,
            "account/shared#index-2": 1,
        }
    # The frozen worker itself, let go, never writes: its lease is gone.
    local_pod_runner.resume(namespace, "fz-1-1")
    time.sleep(1.0)
    with psycopg.connect(pg) as conn:
        assert conn.execute("SELECT count(*) FROM writes").fetchone() == (3,)
    wait_for("Succeeded", phase_is(api_client, namespace, "fz", "Succeeded"), 60)


def test_a_job_named_like_an_index_has_a_lease_of_its_own(
    operator: OperatorProcess,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    """Job ``clash-0`` and index 0 of job ``clash``: two leases, neither in the other's way.

    Index leases were ``<job>-<index>``, and ``clash-0`` was told LeaseNameTaken
    (issue 27, cases 3 and 4); they are ``<job>.<index>`` now.
    """
    create_job(api_client, namespace, "clash", None, completions=2, parallelism=2)
    wait_for("index lease clash.0", lambda: store.list_leases(namespace), 30)
    uid = get_uid(api_client, namespace, "clash")
    create_job(api_client, namespace, "clash-0", None)
    leases = f"{names.LABEL_JOB} in (clash,clash-0)"

    def both() -> dict[str, str]:
        found = store.list_leases(namespace, label_selector=leases)
        return {le.name: le.record.job_name for le in found if le.name in ("clash-0", "clash.0")}

    wait_for("leases clash-0 and clash.0", lambda: len(both()) == 2, 30)
    assert both() == {"clash-0": "clash-0", "clash.0": "clash"}
    assert store.get(namespace, "clash.0").record.job_uid == uid
    conditions = status(api_client, namespace, "clash-0").get("conditions", [])
    assert all(c["reason"] != "LeaseNameTaken" for c in conditions)
    # NonIndexed with completions: per-slot leases, no index ranges in the status.
    st = wait_for(
        "the status counted",
        lambda: (lambda s: s if "completionProgress" in s else None)(
            status(api_client, namespace, "clash")
        ),
        30,
    )
    assert "completedIndexes" not in st
    assert st["completionProgress"] == "0/2"


def test_a_pool_claims_the_indexes_of_a_pull_job_each_addressable(
    operator: OperatorProcess,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
    worker_rbac: None,
) -> None:
    payloads = {index: f"payload-{index}" for index in range(4)}
    create_job(
        api_client,
        namespace,
        "pulled",
        None,
        lease_seconds=30,
        completions=4,
        parallelism=2,
        completionMode="Indexed",
    )
    worked: list[tuple[int, int, str]] = []
    selector = f"{names.LABEL_JOB}=pulled"

    def work_one() -> bool:
        holder = worker.claim_any(namespace, "pool-a", selector, store=store)
        if holder is None:
            return False
        index = holder.completion_index
        assert index is not None
        assert holder.lease_name == index_lease_name("pulled", index)
        assert holder.effect_key("w") == f"{namespace}/pulled/index-{index}/1/w"
        worked.append((index, int(holder.token), payloads[index]))
        holder.complete(Outcome.SUCCEEDED)
        holder.close()
        return len(worked) == 4

    wait_for("every index worked by the pool", work_one, 60)
    assert sorted(index for index, _, _ in worked) == [0, 1, 2, 3]
    assert {token for _, token, _ in worked} == {1}
    wait_for("Succeeded", phase_is(api_client, namespace, "pulled", "Succeeded"), 30)
    assert status(api_client, namespace, "pulled")["completedIndexes"] == "0-3"


def test_deleting_an_indexed_job_stops_its_held_index_leases_for_good(
    operator: OperatorProcess,
    api_client: client.ApiClient,
    store: LeaseStore,
    namespace: str,
) -> None:
    create_job(api_client, namespace, "gone", None, lease_seconds=300, completions=2, parallelism=2)
    selector = f"{names.LABEL_JOB}=gone"
    wait_for(
        "2 index leases",
        lambda: len(store.list_leases(namespace, label_selector=selector)) == 2,
        30,
    )
    claimed = store.claim(namespace, "gone.0", "w-0")
    assert isinstance(claimed, Accepted) and claimed.token == 1
    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
        G, V, namespace, names.PLURAL_LEASED_JOBS, "gone"
    )

    def stopped() -> bool:
        record = store.get(namespace, "gone.0").record
        return record.holder_identity is None and record.max_fencing_token == 1

    wait_for("index 0's lease stopped", stopped, 30)
    late = store.complete(namespace, "gone.0", "w-0", 1, Outcome.SUCCEEDED)
    assert isinstance(late, Rejected)
    assert isinstance(store.claim(namespace, "gone.1", "w-1"), Rejected)  # capped at 0
    assert names.FINALIZER_DOMAIN in store.get(namespace, "gone.1").body["metadata"]["finalizers"]
