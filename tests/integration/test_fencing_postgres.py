"""The PostgreSQL fence against a real server: late writes, races, duplicates.

Every test gets its own schema (``search_path``) on the session's server, so
tests do not see each other's tables even on a shared server
(``LEASEHOLD_TEST_POSTGRES_DSN``).
"""

from __future__ import annotations

import itertools
import random
import re
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from kubernetes import client
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from faultproxy import TcpProxy
from leasehold.controller.engines.expiry import ExpiryClock
from leasehold.fencing import Admitted, DuplicateEffect, StaleToken, idempotency_key
from leasehold.fencing.postgres import FENCE_SQL, fence, install, sql_params
from leasehold.lease.protocol import Outcome, Rejection
from leasehold.lease.store import Accepted, LeaseStore, Rejected
from tests.integration.leases import claim_ok, wait_expired

WRITERS = 20
WRITES_PER_WRITER = 5

SET_VALUE = (
    "UPDATE account SET value = %(value)s "
    "WHERE key = %(key)s AND EXISTS (SELECT 1 FROM leasehold_fenced)"
)


@pytest.fixture
def pg(postgres_dsn: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A DSN whose ``search_path`` is a fresh schema with the fence's tables."""
    base = re.sub(r"[^a-z0-9]+", "_", request.node.name.lower())[:40]
    schema = f"{base}_{secrets.token_hex(3)}"
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    dsn = make_conninfo(postgres_dsn, options=f"-c search_path={schema}")
    with psycopg.connect(dsn) as conn:
        install(conn)
        install(conn)  # idempotent
    yield dsn
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def _one(conn: psycopg.Connection[Any], query: str, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def _create_account(dsn: str, key: str) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TABLE account (key text PRIMARY KEY, value text NOT NULL)")
        conn.execute("INSERT INTO account VALUES (%s, 'initial')", (key,))


# --------------------------------------------------------------------------
# The worked example of docs/fencing.md, with a real delayed request


def test_worked_example_a_delayed_write_arrives_after_b_and_is_rejected(
    api_client: client.ApiClient, namespace: str, pg: str
) -> None:
    """A's write (token 7) is held on the wire until B (token 8) has written.

    A claims token 7 and sends "fence + UPDATE" through a proxy that holds it;
    A stops renewing, the lease is reclaimed, B claims token 8, writes 'B' and
    commits; then the proxy delivers A's write, which is rejected.
    """
    store = LeaseStore(api_client)
    job = f"{namespace}/payout"
    store.create(
        namespace, "payout", job_name="payout", lease_duration_seconds=1, initial_fencing_token=6
    )
    assert claim_ok(store, namespace, "payout", "worker-a") == 7
    _create_account(pg, "acct-42")
    resource = "account/acct-42"
    target = conninfo_to_dict(pg)
    if str(target.get("host", "")).startswith("/"):
        pytest.fail("the delayed-write test needs a TCP DSN (host and port) to put a proxy in")

    with TcpProxy(
        str(target.get("host", "127.0.0.1")), int(str(target.get("port", 5432)))
    ) as proxy:
        a_conn = psycopg.connect(make_conninfo(pg, host="127.0.0.1", port=proxy.port))
        a_conn.execute("SELECT 1")  # A's transaction is open (BEGIN went through)
        a_pid = a_conn.info.backend_pid
        proxy.hold()
        time.sleep(0.2)  # hold() takes effect on the proxy's loop
        outcome: list[Admitted | BaseException] = []

        def write_a() -> None:  # fence + UPDATE in one statement, on the wire
            try:
                admitted = fence(
                    a_conn,
                    resource,
                    7,
                    idempotency_key(job, 7, "set-value"),
                    effect=SET_VALUE,
                    params={"value": "A", "key": "acct-42"},
                )
                a_conn.commit()
                outcome.append(admitted)
            except BaseException as exc:
                a_conn.rollback()
                outcome.append(exc)

        writer_a = threading.Thread(target=write_a)
        writer_a.start()

        # A is paused (no renewals): the operator's judge reclaims; B claims 8.
        expiry = ExpiryClock(margin_seconds=0.5, monotonic=time.monotonic)
        judged = wait_expired(store, expiry, namespace, "payout", timeout=15)
        assert isinstance(store.reclaim(judged), Accepted)
        assert claim_ok(store, namespace, "payout", "worker-b") == 8
        with psycopg.connect(pg) as b_conn:
            with b_conn.transaction():
                fence(b_conn, resource, 8, idempotency_key(job, 8, "set-value"))
                b_conn.execute("UPDATE account SET value = 'B' WHERE key = 'acct-42'")
            # A's statement has not reached the server: its last query is still SELECT 1.
            state, query = b_conn.execute(
                "SELECT state, query FROM pg_stat_activity WHERE pid = %s", (a_pid,)
            ).fetchone() or (None, None)
            assert (state, query) == ("idle in transaction", "SELECT 1")
        assert writer_a.is_alive() and not outcome

        proxy.release()
        writer_a.join(timeout=30)
        assert not writer_a.is_alive()
        a_conn.close()

    assert len(outcome) == 1
    rejected = outcome[0]
    assert isinstance(rejected, StaleToken), rejected
    assert (rejected.resource, rejected.token, rejected.current) == (resource, 7, 8)
    with psycopg.connect(pg) as conn:
        assert _one(conn, "SELECT value FROM account WHERE key = 'acct-42'") == "B"
        assert _one(conn, "SELECT highest_token FROM leasehold_fence") == 8
        assert conn.execute("SELECT idempotency_key FROM leasehold_effect").fetchall() == [
            (idempotency_key(job, 8, "set-value"),)
        ]
    # The store fences A off too: its late completion is rejected.
    late = store.complete(namespace, "payout", "worker-a", 7, Outcome.SUCCEEDED)
    assert isinstance(late, Rejected) and late.rejection is Rejection.STALE_TOKEN


# --------------------------------------------------------------------------
# Concurrent writers


def test_concurrent_writers_commit_in_token_order(pg: str) -> None:
    """20 writers, interleaved random tokens, one key: accepted tokens never go down."""
    with psycopg.connect(pg) as conn:
        conn.execute(
            "CREATE TABLE history ("
            " id bigserial PRIMARY KEY, resource_key text NOT NULL,"
            " token bigint NOT NULL, writer int NOT NULL)"
        )
    rng = random.Random(20)
    plans = [[rng.randint(1, 10) for _ in range(WRITES_PER_WRITER)] for _ in range(WRITERS)]
    barrier = threading.Barrier(WRITERS)
    lock = threading.Lock()
    accepted: list[Admitted] = []
    stale: list[StaleToken] = []
    errors: list[BaseException] = []

    def writer(index: int, tokens: list[int]) -> None:
        try:
            with psycopg.connect(pg) as conn:
                barrier.wait(timeout=30)
                for token in tokens:
                    try:
                        with conn.transaction():
                            admitted = fence(conn, "counter/1", token)
                            conn.execute(
                                "INSERT INTO history (resource_key, token, writer)"
                                " VALUES ('counter/1', %s, %s)",
                                (token, index),
                            )
                            time.sleep(0.002)  # hold the lock: others queue on it
                    except StaleToken as exc:
                        with lock:
                            stale.append(exc)
                    else:
                        with lock:
                            accepted.append(admitted)
        except BaseException as exc:
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i, p)) for i, p in enumerate(plans)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert len(accepted) + len(stale) == WRITERS * WRITES_PER_WRITER

    with psycopg.connect(pg) as conn:
        history = [t for (t,) in conn.execute("SELECT token FROM history ORDER BY id")]
        highest = _one(conn, "SELECT highest_token FROM leasehold_fence")
    assert len(history) == len(accepted)
    decreases = [(a, b) for a, b in itertools.pairwise(history) if b < a]
    assert not decreases, f"accepted tokens went down: {decreases} in {history}"
    assert stale, "no write was rejected: the writers did not interleave"
    assert all(exc.token < exc.current for exc in stale)
    assert highest == history[-1] == max(t for plan in plans for t in plan)


# --------------------------------------------------------------------------
# Idempotency


def test_the_same_idempotency_key_applies_once(pg: str) -> None:
    key = idempotency_key("ns/payout", 8, "charge-card")
    with psycopg.connect(pg) as conn:
        conn.execute("CREATE TABLE charge (id bigserial PRIMARY KEY, amount int NOT NULL)")
        conn.commit()

        def charge() -> Admitted:
            with conn.transaction():
                admitted = fence(conn, "card/7", 8, key)
                conn.execute("INSERT INTO charge (amount) VALUES (100)")
            return admitted

        assert charge() == Admitted("card/7", 8, None)
        with pytest.raises(DuplicateEffect) as caught:
            charge()  # a retry after a lost reply
        assert caught.value.idempotency_key == key
        assert _one(conn, "SELECT count(*) FROM charge") == 1
        assert conn.execute(
            "SELECT resource_key, fencing_token FROM leasehold_effect WHERE idempotency_key = %s",
            (key,),
        ).fetchall() == [("card/7", 8)]
        conn.commit()


def test_racing_duplicates_apply_once(pg: str) -> None:
    """Ten connections send the same effect at once: one applies, nine are duplicates."""
    key = idempotency_key("ns/payout", 3, "charge-card")
    with psycopg.connect(pg) as conn:
        conn.execute("CREATE TABLE charge (id bigserial PRIMARY KEY, amount int NOT NULL)")
    barrier = threading.Barrier(10)
    results: list[Admitted | BaseException] = []

    def charge() -> None:
        with psycopg.connect(pg) as conn:
            barrier.wait(timeout=30)
            try:
                with conn.transaction():
                    admitted = fence(conn, "card/7", 3, key)
                    conn.execute("INSERT INTO charge (amount) VALUES (100)")
                    time.sleep(0.05)  # the others wait on the key meanwhile
                results.append(admitted)
            except BaseException as exc:
                results.append(exc)

    threads = [threading.Thread(target=charge) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    kinds = sorted(type(r).__name__ for r in results)
    assert kinds == ["Admitted"] + ["DuplicateEffect"] * 9, results
    with psycopg.connect(pg) as conn:
        assert _one(conn, "SELECT count(*) FROM charge") == 1


# --------------------------------------------------------------------------
# The API's other paths


def test_fence_reports_the_previous_token_and_the_stale_one(pg: str) -> None:
    with psycopg.connect(pg) as conn, conn.cursor() as cur:
        with conn.transaction():
            assert fence(cur, "r", 5) == Admitted("r", 5, None)  # a cursor works too
        with conn.transaction():
            assert fence(conn, "r", 5) == Admitted("r", 5, 5)
        with conn.transaction():
            assert fence(conn, "r", 9) == Admitted("r", 9, 5)
        with pytest.raises(StaleToken) as caught, conn.transaction():
            fence(conn, "r", 4)
        assert (caught.value.token, caught.value.current) == (4, 9)
        # A duplicate rolled back does not move the fence.
        with conn.transaction():
            fence(conn, "r", 9, "k")
        with pytest.raises(DuplicateEffect), conn.transaction():
            fence(conn, "r", 12, "k")
        assert _one(conn, "SELECT highest_token FROM leasehold_fence WHERE resource_key = 'r'") == 9


def test_effect_in_the_fence_statement_runs_only_when_admitted(pg: str) -> None:
    _create_account(pg, "k")
    with psycopg.connect(pg) as conn:
        with conn.transaction():
            fence(conn, "account/k", 8, effect=SET_VALUE, params={"value": "B", "key": "k"})
        with pytest.raises(StaleToken), conn.transaction():
            fence(conn, "account/k", 7, effect=SET_VALUE, params={"value": "A", "key": "k"})
        with conn.transaction():
            fence(conn, "account/k", 8, "d", effect=SET_VALUE, params={"value": "C", "key": "k"})
        with pytest.raises(DuplicateEffect), conn.transaction():
            fence(conn, "account/k", 8, "d", effect=SET_VALUE, params={"value": "D", "key": "k"})
        assert _one(conn, "SELECT value FROM account") == "C"
        with pytest.raises(StaleToken), conn.transaction():
            fence(conn, "account/k", 7, effect=SET_VALUE, params={"value": "A", "key": "k"})
        assert _one(conn, "SELECT value FROM account") == "C"
        with pytest.raises(ValueError, match="leasehold_fenced"):
            fence(conn, "account/k", 9, effect="UPDATE account SET value = 'X'")
        with pytest.raises(ValueError, match="starting with"):
            fence(conn, "account/k", 9, effect=SET_VALUE, params={"leasehold_token": 1})


def test_the_pasted_pattern_gates_the_users_own_statement(pg: str) -> None:
    _create_account(pg, "k")
    statement = FENCE_SQL + SET_VALUE
    with psycopg.connect(pg) as conn:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(statement, {**sql_params(8, "account/k"), "value": "B", "key": "k"})
            assert cur.rowcount == 1
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(statement, {**sql_params(7, "account/k"), "value": "A", "key": "k"})
            assert cur.rowcount == 0  # fenced off
        assert _one(conn, "SELECT value FROM account") == "B"
    with pytest.raises(ValueError, match="non-negative"):
        sql_params(-1, "account/k")


def test_fence_refuses_to_guard_nothing(pg: str) -> None:
    """On an autocommit connection outside a transaction the lock would end at once."""
    _create_account(pg, "k")
    with psycopg.connect(pg, autocommit=True) as conn:
        with pytest.raises(ValueError, match="autocommit"):
            fence(conn, "account/k", 1)
        with conn.transaction():
            fence(conn, "account/k", 1)
        # With its effect, the one statement is the transaction.
        fence(conn, "account/k", 2, effect=SET_VALUE, params={"value": "B", "key": "k"})
        with pytest.raises(StaleToken):
            fence(conn, "account/k", 1, effect=SET_VALUE, params={"value": "A", "key": "k"})
        assert _one(conn, "SELECT value FROM account") == "B"
