"""The lease store against a real API server: races, fencing, missing leases."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from leasehold import names
from leasehold.controller.engines.expiry import ExpiryClock
from leasehold.lease.errors import LeaseNotFoundError, StoreError, TransientStoreError
from leasehold.lease.protocol import FencingToken, Outcome, Rejection
from leasehold.lease.store import (
    Accepted,
    LeaseStore,
    Rejected,
    Result,
    StoredLease,
    reclaim_note,
)
from tests.integration.leases import claim_ok, count_requests, wait_expired

CLAIMERS = 50


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
        p.join(timeout=120)
        assert p.exitcode == 0
    kinds = Counter(kind for _, kind, _ in outcomes)
    assert kinds == {"claimed": 1, str(Rejection.LOST_RACE): CLAIMERS - 1}, kinds
    winner = next(i for i, kind, _ in outcomes if kind == "claimed")
    lease = store.get(namespace, "race")
    assert lease.record.fencing_token == 1
    assert lease.record.holder_identity == f"claimer-{winner}"
    # Every loser saw the winner's token.
    assert {token for _, _, token in outcomes} == {1}


def test_worked_example_a_late_complete_is_rejected(store: LeaseStore, namespace: str) -> None:
    """docs/fencing.md: A claims 7 and pauses; expiry; B claims 8; A's late complete is rejected."""
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


def test_a_reclaim_notes_its_token_and_reason_in_the_same_write(
    store: LeaseStore,
    api_client: client.ApiClient,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One conditional PATCH unholds the lease and notes why; the lease's own annotations stay."""
    custom = client.CustomObjectsApi(api_client)
    store.create(namespace, "job", job_name="job", lease_duration_seconds=5)
    custom.patch_namespaced_custom_object(
        names.GROUP,
        names.VERSION,
        namespace,
        names.PLURAL_JOB_LEASES,
        "job",
        {"metadata": {"annotations": {"example.com/kept": "yes"}}},
    )
    token = claim_ok(store, namespace, "job", "worker-a")
    judged = store.get(namespace, "job")
    sent = count_requests(api_client, monkeypatch)  # the store's client
    result = store.reclaim(judged, "StartupDeadlineExceeded")
    assert isinstance(result, Accepted)
    assert sent == {"PATCH": 1}
    annotations = result.lease.body["metadata"]["annotations"]
    assert annotations == {
        "example.com/kept": "yes",
        names.ANNOTATION_RECLAIMED_TOKEN: str(token),
        names.ANNOTATION_RECLAIM_REASON: "StartupDeadlineExceeded",
    }
    assert reclaim_note(store.get(namespace, "job").body) == (token, "StartupDeadlineExceeded")
    # A lease without annotations gets the map; a later reclaim replaces the note.
    store.create(namespace, "bare", job_name="bare", lease_duration_seconds=5)
    for reason in ("LeaseExpired", "StartupDeadlineExceeded"):
        token = claim_ok(store, namespace, "bare", "worker-b")
        done = store.reclaim(store.get(namespace, "bare"), reason)
        assert isinstance(done, Accepted)
        assert reclaim_note(done.lease.body) == (token, reason)
        assert done.lease.record.holder_identity is None


def test_a_refused_reclaim_notes_nothing(store: LeaseStore, namespace: str) -> None:
    store.create(namespace, "job", job_name="job", lease_duration_seconds=5)
    token = claim_ok(store, namespace, "job", "worker-a")
    judged = store.get(namespace, "job")
    assert isinstance(store.renew(namespace, "job", "worker-a", token), Accepted)
    result = store.reclaim(judged, "LeaseExpired")
    assert isinstance(result, Rejected) and result.rejection is Rejection.NOT_EXPIRED
    assert reclaim_note(store.get(namespace, "job").body) is None


def test_a_note_of_an_older_operator_on_the_status_is_read_too(
    store: LeaseStore, api_client: client.ApiClient, namespace: str
) -> None:
    """Leases an older operator reclaimed carry the note on their status: still read."""
    store.create(namespace, "job", job_name="job", lease_duration_seconds=5)
    first = claim_ok(store, namespace, "job", "worker-a")
    assert isinstance(store.reclaim(store.get(namespace, "job")), Accepted)
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object_status(
        names.GROUP,
        names.VERSION,
        namespace,
        names.PLURAL_JOB_LEASES,
        "job",
        {"status": {"lastReclaimedToken": first, "lastReclaimReason": "LeaseExpired"}},
    )
    assert reclaim_note(store.get(namespace, "job").body) == (first, "LeaseExpired")
    # A later reclaim by this operator: its annotation is the later note.
    second = claim_ok(store, namespace, "job", "worker-a")
    done = store.reclaim(store.get(namespace, "job"), "StartupDeadlineExceeded")
    assert isinstance(done, Accepted)
    assert reclaim_note(done.lease.body) == (second, "StartupDeadlineExceeded")


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


# -- claim with a known token (``observed``) ---------------------------------


def forged(lease: StoredLease, **changes: Any) -> StoredLease:
    """``lease`` as a caller with a wrong view of it would see it (same token)."""
    return dataclasses.replace(lease, record=dataclasses.replace(lease.record, **changes))


def holder_and_token(store: LeaseStore, namespace: str, name: str) -> tuple[str | None, int]:
    record = store.get(namespace, name).record
    return record.holder_identity, record.fencing_token


def test_known_token_claim_is_one_patch_without_a_read(
    store: LeaseStore,
    api_client: client.ApiClient,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    created = store.create(namespace, "job", job_name="job", lease_duration_seconds=30)
    # An unrelated write since (the operator's status): the resourceVersion
    # moves, the token does not. It must not cost a conflict.
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object_status(
        names.GROUP,
        names.VERSION,
        namespace,
        "jobleases",
        "job",
        {"status": {"observedGeneration": created.generation}},
    )
    assert store.get(namespace, "job").resource_version != created.resource_version
    counts = count_requests(api_client, monkeypatch)
    result = store.claim(namespace, "job", "worker-a", observed=created)
    assert isinstance(result, Accepted), result
    assert counts == Counter({"PATCH": 1}), counts
    assert result.token == 1
    assert result.lease.record.holder_identity == "worker-a"
    assert holder_and_token(store, namespace, "job") == ("worker-a", 1)


def test_known_token_claim_with_a_stale_token_falls_back_and_claims(
    store: LeaseStore,
    api_client: client.ApiClient,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    created = store.create(namespace, "job", job_name="job", lease_duration_seconds=30)
    # Someone else claimed and released since `created` was seen: token 0 -> 1.
    other = claim_ok(store, namespace, "job", "worker-b")
    assert isinstance(store.release(namespace, "job", "worker-b", other), Accepted)
    counts = count_requests(api_client, monkeypatch)
    result = store.claim(namespace, "job", "worker-a", observed=created)
    assert isinstance(result, Accepted), result
    # The one-write attempt was refused (token test), then a read and a write.
    assert counts == Counter({"PATCH": 2, "GET": 1}), counts
    assert result.token == 2  # judged again on the fresh read, not 0 + 1
    assert holder_and_token(store, namespace, "job") == ("worker-a", 2)


def test_known_token_claim_of_a_lease_held_now_loses_the_race(
    store: LeaseStore,
    api_client: client.ApiClient,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    created = store.create(namespace, "job", job_name="job", lease_duration_seconds=30)
    assert claim_ok(store, namespace, "job", "worker-b") == 1
    counts = count_requests(api_client, monkeypatch)
    result = store.claim(namespace, "job", "worker-a", observed=created)  # stale: unheld, 0
    assert isinstance(result, Rejected) and result.rejection is Rejection.LOST_RACE, result
    assert result.lease.record.holder_identity == "worker-b"
    assert counts == Counter({"PATCH": 1, "GET": 1}), counts
    # A view with the current token that is wrong about the holder: the
    # token test passes, and the API server's CEL rule refuses the bump.
    held = store.get(namespace, "job")
    result = store.claim(namespace, "job", "worker-a", observed=forged(held, holder_identity=None))
    assert isinstance(result, Rejected) and result.rejection is Rejection.LOST_RACE, result
    assert holder_and_token(store, namespace, "job") == ("worker-b", 1)


def test_known_token_claim_of_a_completed_lease_is_rejected(
    store: LeaseStore,
    api_client: client.ApiClient,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    created = store.create(namespace, "job", job_name="job", lease_duration_seconds=30)
    token = claim_ok(store, namespace, "job", "worker-b")
    assert isinstance(
        store.complete(namespace, "job", "worker-b", token, Outcome.SUCCEEDED), Accepted
    )
    counts = count_requests(api_client, monkeypatch)
    result = store.claim(namespace, "job", "worker-a", observed=created)
    assert isinstance(result, Rejected) and result.rejection is Rejection.COMPLETED, result
    assert counts == Counter({"PATCH": 1, "GET": 1}), counts
    # Right token, completion unknown to the caller: the CEL rule refuses it.
    done = store.get(namespace, "job")
    counts.clear()
    result = store.claim(namespace, "job", "worker-a", observed=forged(done, completion=None))
    assert isinstance(result, Rejected) and result.rejection is Rejection.COMPLETED, result
    assert counts == Counter({"PATCH": 1, "GET": 1}), counts
    after = store.get(namespace, "job")
    assert (after.record.holder_identity, after.record.fencing_token) == (None, 1)
    assert after.record.completion == done.record.completion


def test_known_token_claim_past_the_attempt_limit_is_exhausted(
    store: LeaseStore,
    api_client: client.ApiClient,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store.create(namespace, "job", job_name="job", lease_duration_seconds=30, max_fencing_token=3)
    token = claim_ok(store, namespace, "job", "worker-b")
    assert isinstance(store.release(namespace, "job", "worker-b", token), Accepted)
    seen = store.get(namespace, "job")  # unheld, token 1 of 3: claimable
    # The operator stops the job (deadline) after `seen`: the cap drops to 1.
    assert isinstance(store.stop(seen), Accepted)
    counts = count_requests(api_client, monkeypatch)
    result = store.claim(namespace, "job", "worker-a", observed=seen)
    # The token test passes (still 1); the CEL cap rule refuses token 2.
    assert isinstance(result, Rejected) and result.rejection is Rejection.EXHAUSTED, result
    assert counts == Counter({"PATCH": 1, "GET": 1}), counts
    assert holder_and_token(store, namespace, "job") == (None, 1)
    # Known to be at the cap: refused on `observed`, confirmed by one read.
    capped = store.get(namespace, "job")
    assert capped.record.max_fencing_token == FencingToken(1)
    counts.clear()
    result = store.claim(namespace, "job", "worker-a", observed=capped)
    assert isinstance(result, Rejected) and result.rejection is Rejection.EXHAUSTED, result
    assert counts == Counter({"GET": 1}), counts


def test_a_claim_the_schema_refuses_fails_fast_with_the_servers_message(
    store: LeaseStore,
    api_client: client.ApiClient,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An invalid holder name is no race: two refusals on an unchanged lease end it."""
    store.create(namespace, "job", job_name="job", lease_duration_seconds=30)
    counts = count_requests(api_client, monkeypatch)
    with pytest.raises(StoreError) as raised:
        store.claim(namespace, "job", "-not a valid holder-")
    assert not isinstance(raised.value, TransientStoreError)
    assert "holderIdentity" in str(raised.value), raised.value
    assert counts == Counter({"GET": 2, "PATCH": 1}), counts
    assert holder_and_token(store, namespace, "job") == (None, 0)
