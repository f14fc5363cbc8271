"""The lease store against a real API server: races, fencing, missing leases."""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from leasehold.protocol import ExpiryClock, Outcome, Rejection
from leasehold.store import (
    Accepted,
    LeaseNotFoundError,
    LeaseStore,
    Rejected,
    Result,
)
from tests.integration.leases import claim_ok, wait_expired

CLAIMERS = 50


@pytest.fixture
def store(api_client: client.ApiClient) -> LeaseStore:
    return LeaseStore(api_client)


def _claimer(
    kubeconfig: str, namespace: str, index: int, barrier: Any, results: Any
) -> None:  # runs in a child process
    api = config.new_client_from_config(config_file=kubeconfig)
    store = LeaseStore(api)
    barrier.wait(timeout=120)
    result = store.claim(namespace, "race", f"claimer-{index}")
    if isinstance(result, Accepted):
        results.put((index, "claimed", result.token))
    else:
        results.put((index, str(result.rejection), result.lease.record.fencing_token))
    api.close()


def test_fifty_claimers_in_processes_exactly_one_wins(
    store: LeaseStore, crds_installed: Path, namespace: str
) -> None:
    store.create(namespace, "race", job_name="race", lease_duration_seconds=30)
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(CLAIMERS)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_claimer, args=(str(crds_installed), namespace, i, barrier, results))
        for i in range(CLAIMERS)
    ]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=180) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    kinds = Counter(kind for _, kind, _ in outcomes)
    assert kinds == {"claimed": 1, str(Rejection.LOST_RACE): CLAIMERS - 1}, kinds
    winner = next(i for i, kind, _ in outcomes if kind == "claimed")
    lease = store.get(namespace, "race")
    assert lease.record.fencing_token == 1
    assert lease.record.holder_identity == f"claimer-{winner}"
    # Every loser saw the winner's token.
    assert {token for _, _, token in outcomes} == {1}


def test_worked_example_from_the_design(store: LeaseStore, namespace: str) -> None:
    """A claims 7 and pauses; expiry; B claims 8; A's late complete is rejected."""
    store.create(namespace, "job", job_name="job", lease_duration_seconds=1)
    for i in range(6):  # tokens 1..6 come and go
        token = claim_ok(store, namespace, "job", f"warmup-{i}")
        assert isinstance(store.release(namespace, "job", f"warmup-{i}", token), Accepted)
    assert claim_ok(store, namespace, "job", "worker-a") == 7
    # A pauses: no renewals. The operator's judge sees no change for 1 s + margin.
    expiry = ExpiryClock(margin_seconds=0.5, monotonic=time.monotonic)
    judged = wait_expired(store, expiry, namespace, "job", timeout=10)
    assert isinstance(store.reclaim(judged), Accepted)
    assert claim_ok(store, namespace, "job", "worker-b") == 8
    # A resumes and tries to complete with token 7: the store rejects it.
    late = store.complete(namespace, "job", "worker-a", 7, Outcome.SUCCEEDED)
    assert isinstance(late, Rejected)
    assert late.rejection is Rejection.STALE_TOKEN
    lease = store.get(namespace, "job")
    assert (lease.record.holder_identity, lease.record.fencing_token) == ("worker-b", 8)
    assert lease.record.completion is None
    # A's renewal is rejected too.
    renewed = store.renew(namespace, "job", "worker-a", 7)
    assert isinstance(renewed, Rejected) and renewed.rejection is Rejection.STALE_TOKEN
    # B completes with 8: recorded once.
    done = store.complete(namespace, "job", "worker-b", 8, Outcome.SUCCEEDED, exit_code=0)
    assert isinstance(done, Accepted)
    again = store.complete(namespace, "job", "worker-b", 8, Outcome.FAILED)
    assert isinstance(again, Rejected) and again.rejection is Rejection.COMPLETED
    final = store.get(namespace, "job").record
    assert final.completion is not None
    assert (final.completion.fencing_token, final.completion.outcome) == (8, Outcome.SUCCEEDED)
    assert final.holder_identity is None


def test_reclaim_fails_when_a_renewal_landed_after_judging(
    store: LeaseStore, namespace: str
) -> None:
    store.create(namespace, "job", job_name="job", lease_duration_seconds=5)
    token = claim_ok(store, namespace, "job", "worker-a")
    judged = store.get(namespace, "job")
    assert isinstance(store.renew(namespace, "job", "worker-a", token), Accepted)
    result = store.reclaim(judged)
    assert isinstance(result, Rejected) and result.rejection is Rejection.NOT_EXPIRED
    assert store.get(namespace, "job").record.holder_identity == "worker-a"


def test_stale_release_retried_after_reclaim_changes_nothing(
    store: LeaseStore, namespace: str
) -> None:
    store.create(namespace, "job", job_name="job", lease_duration_seconds=30)
    first = claim_ok(store, namespace, "job", "worker-a")
    assert isinstance(store.release(namespace, "job", "worker-a", first), Accepted)
    second = claim_ok(store, namespace, "job", "worker-a")
    assert second == first + 1
    before = store.get(namespace, "job")
    # The first release's reply was lost; the client retries it.
    retried = store.release(namespace, "job", "worker-a", first)
    assert isinstance(retried, Rejected) and retried.rejection is Rejection.STALE_TOKEN
    after = store.get(namespace, "job")
    assert after.resource_version == before.resource_version
    assert (after.record.holder_identity, after.record.fencing_token) == ("worker-a", second)


def test_racing_completes_record_once(
    store: LeaseStore, api_client: client.ApiClient, namespace: str
) -> None:
    for round_ in range(5):
        name = f"job-{round_}"
        store.create(namespace, name, job_name=name, lease_duration_seconds=30)
        token = claim_ok(store, namespace, name, "worker-a")
        barrier = threading.Barrier(2)
        results: list[Result] = []

        def finish(
            outcome: Outcome,
            name: str = name,
            token: int = token,
            barrier: threading.Barrier = barrier,
            results: list[Result] = results,
        ) -> None:
            own = LeaseStore(api_client)
            barrier.wait()
            results.append(own.complete(namespace, name, "worker-a", token, outcome))

        threads = [
            threading.Thread(target=finish, args=(o,)) for o in (Outcome.SUCCEEDED, Outcome.FAILED)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        accepted = [r for r in results if isinstance(r, Accepted)]
        rejected = [r for r in results if isinstance(r, Rejected)]
        assert len(accepted) == 1 and len(rejected) == 1, results
        assert rejected[0].rejection is Rejection.COMPLETED
        completion = store.get(namespace, name).record.completion
        assert completion is not None
        assert accepted[0].lease.record.completion == completion


def test_not_holder_and_missing_lease(store: LeaseStore, namespace: str) -> None:
    store.create(namespace, "job", job_name="job", lease_duration_seconds=30)
    token = claim_ok(store, namespace, "job", "worker-a")
    result = store.renew(namespace, "job", "worker-b", token)
    assert isinstance(result, Rejected) and result.rejection is Rejection.NOT_HOLDER
    held = store.claim(namespace, "job", "worker-b")
    assert isinstance(held, Rejected) and held.rejection is Rejection.LOST_RACE
    with pytest.raises(LeaseNotFoundError, match=f"{namespace}/nope"):
        store.renew(namespace, "nope", "worker-a", 1)
    with pytest.raises(LeaseNotFoundError):
        store.claim(namespace, "nope", "worker-a")


def test_renew_is_one_write_without_a_read(store: LeaseStore, namespace: str) -> None:
    store.create(namespace, "job", job_name="job", lease_duration_seconds=30)
    token = claim_ok(store, namespace, "job", "worker-a")
    before = store.get(namespace, "job")
    result = store.renew(namespace, "job", "worker-a", token)
    assert isinstance(result, Accepted)
    assert int(result.lease.resource_version) > int(before.resource_version)
    assert result.lease.generation == before.generation + 1
