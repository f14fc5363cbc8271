"""The fence rule and the in-memory fence: order by token, refuse duplicates."""

from __future__ import annotations

import random
import threading
from collections import Counter

import pytest

from leasehold.fencing import (
    Admitted,
    DuplicateEffect,
    FenceError,
    MemoryFence,
    StaleToken,
    admits,
    idempotency_key,
)
from leasehold.fencing.revocation import revocation


@pytest.mark.parametrize(
    ("highest", "token", "expected"),
    [
        (None, 0, True),
        (None, 7, True),
        (7, 8, True),
        (7, 7, True),  # the same holder writes again under its token
        (8, 7, False),
        (8, 0, False),
    ],
)
def test_admits(highest: int | None, token: int, expected: bool) -> None:
    assert admits(highest, token) is expected


def test_idempotency_key_names_job_token_and_step() -> None:
    assert idempotency_key("default/payout", 8, "charge-card") == "default/payout/8/charge-card"
    # Another attempt of the same step is another effect.
    assert idempotency_key("default/payout", 9, "charge-card") != idempotency_key(
        "default/payout", 8, "charge-card"
    )


def test_memory_fence_orders_by_token() -> None:
    fence = MemoryFence()
    assert fence.highest("acct") is None
    assert fence.admit("acct", 7) == Admitted("acct", 7, None)
    assert fence.admit("acct", 8) == Admitted("acct", 8, 7)
    with pytest.raises(StaleToken) as caught:
        fence.admit("acct", 7)
    assert (caught.value.resource, caught.value.token, caught.value.current) == ("acct", 7, 8)
    assert "stale fencing token 7" in str(caught.value)
    assert isinstance(caught.value, FenceError)
    assert fence.highest("acct") == 8
    assert fence.admit("acct", 8) == Admitted("acct", 8, 8)
    # Resources are fenced independently.
    assert fence.admit("other", 1) == Admitted("other", 1, None)
    assert fence.highest("acct") == 8


def test_memory_fence_refuses_a_duplicate_effect() -> None:
    fence = MemoryFence()
    key = idempotency_key("ns/job", 8, "pay")
    fence.admit("acct", 8, key)
    with pytest.raises(DuplicateEffect) as caught:
        fence.admit("acct", 8, key)
    assert caught.value.idempotency_key == key
    assert isinstance(caught.value, FenceError)
    fence.admit("acct", 8, idempotency_key("ns/job", 8, "refund"))


def test_memory_fence_stale_is_checked_before_the_key_and_consumes_nothing() -> None:
    fence = MemoryFence()
    fence.admit("acct", 8)
    with pytest.raises(StaleToken):
        fence.admit("acct", 7, "k")
    # The refused effect did not use its key up, nor move the fence.
    assert fence.highest("acct") == 8
    assert fence.admit("acct", 9, "k") == Admitted("acct", 9, 8)
    with pytest.raises(DuplicateEffect):
        fence.admit("acct", 10, "k")
    assert fence.highest("acct") == 9  # a duplicate does not move the fence


def test_memory_fence_threads_admit_a_non_decreasing_chain() -> None:
    """40 threads x 50 admits with random tokens: the admits form one chain.

    Each admit reports the highest before it (``previous``). The fence is a
    correct serial order exactly when the admits link up: one starts from
    nothing, every other starts from the token of another admit, and no admit
    starts from a higher token than its own. A lost update (two admits
    reading the same highest) breaks the chain.
    """
    fence = MemoryFence()
    rng = random.Random(4)
    plans = [[rng.randint(1, 30) for _ in range(50)] for _ in range(40)]
    barrier = threading.Barrier(len(plans))
    admitted: list[Admitted] = []
    stale: list[StaleToken] = []
    lock = threading.Lock()

    def write(tokens: list[int]) -> None:
        barrier.wait()
        for token in tokens:
            try:
                result = fence.admit("acct", token)
            except StaleToken as exc:
                with lock:
                    stale.append(exc)
            else:
                with lock:
                    admitted.append(result)

    threads = [threading.Thread(target=write, args=(plan,)) for plan in plans]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert len(admitted) + len(stale) == sum(len(p) for p in plans)
    assert stale, "no write was refused: the test did not exercise the fence"
    assert all(exc.token < exc.current for exc in stale)
    assert all(a.previous is None or a.previous <= a.token for a in admitted)
    assert [a.previous for a in admitted].count(None) == 1
    highest = fence.highest("acct")
    assert highest == max(t for plan in plans for t in plan)
    # Chain: the "previous" values are exactly the admitted tokens but the last.
    previous = Counter(a.previous for a in admitted if a.previous is not None)
    tokens = Counter(a.token for a in admitted)
    tokens[highest] -= 1
    assert previous == +tokens


def test_revocation_refuses_what_is_not_a_token_or_a_lease() -> None:
    with pytest.raises(ValueError, match="non-negative int"):
        revocation({"spec": {"fencingToken": 1}}, -1)
    with pytest.raises(ValueError, match="no spec"):
        revocation({"kind": "ConfigMap"}, 1)
    with pytest.raises(ValueError, match="not an integer"):
        revocation({"spec": {"fencingToken": "7"}}, 1)
