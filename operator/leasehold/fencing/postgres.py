"""Fencing for PostgreSQL targets: the token check in the effect's own transaction.

Why this module exists: a worker whose lease was taken away may still have a
write on the wire, and checking the lease before writing cannot stop it (the
check passes, then the write is delayed). The database that receives the
write can: it keeps, per resource key, the highest fencing token it accepted,
and refuses a write carrying a lower one (Kleppmann, "How to do distributed
locking", 2016: "fencing tokens"). The rule is the one of
:mod:`leasehold.fencing`; here it lives in two tables and one statement.

Tables (:data:`SCHEMA_SQL`, created by :func:`install`):

* ``leasehold_fence(resource_key, highest_token, updated_at)``: the highest
  token accepted per resource key;
* ``leasehold_effect(idempotency_key, resource_key, fencing_token,
  applied_at)``: the effects applied, by idempotency key.

The fence is ONE conditional statement (:data:`FENCE_SQL`). It upserts the
fence row only when the stored token is not higher than the new one
(``INSERT ... ON CONFLICT DO UPDATE ... WHERE highest_token <= new``) and
records the idempotency key (``ON CONFLICT DO NOTHING``). The row lock the
statement takes on the fence row (``SELECT ... FOR UPDATE``, and the upsert)
is held until the transaction ends, so writers of one resource key are
serialized: an effect whose fence passed cannot be overtaken by a
higher-token effect before it commits, and effects commit in token order.

Use it in the same transaction as the effect, fence first::

    with conn.transaction():
        fence(conn, "account/42", token, idempotency_key(job, token, "pay"))
        conn.execute("UPDATE account SET balance = balance - 10 WHERE id = 42")

A stale token raises :class:`~leasehold.fencing.StaleToken`, a duplicate
raises :class:`~leasehold.fencing.DuplicateEffect`; the exception leaves the
``with conn.transaction()`` block, which rolls the transaction back (without
that block, call ``conn.rollback()``). The effect may also ride in the same
statement as the fence (one round trip for both: ``fence(..., effect=...)``),
or be pasted after :data:`FENCE_SQL` into your own statement with
:func:`sql_params`.

Isolation: written for READ COMMITTED (PostgreSQL's default), where a writer
that waited for the fence row's lock sees the committed token of the writer
before it. Under REPEATABLE READ or SERIALIZABLE, that wait ends in a
serialization failure instead: still no stale effect, but retry the
transaction.

A fence gives ordering, not exactly-once: a lower-token write that reached the
database before the higher token did was accepted, as it should be. Every
write to a fenced resource must fence; a write that skips it is not ordered.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, TypedDict

import psycopg
from psycopg.rows import TupleRow, tuple_row

from leasehold.fencing import Admitted, DuplicateEffect, StaleToken

__all__ = [
    "FENCE_SQL",
    "GATE_CTE",
    "SCHEMA_SQL",
    "FenceParams",
    "fence",
    "install",
    "sql_params",
]

SCHEMA_SQL: Final = """\
CREATE TABLE IF NOT EXISTS leasehold_fence (
    resource_key  text PRIMARY KEY,
    highest_token bigint NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS leasehold_effect (
    idempotency_key text PRIMARY KEY,
    resource_key    text NOT NULL,
    fencing_token   bigint NOT NULL,
    applied_at      timestamptz NOT NULL DEFAULT now()
);
"""
"""The fence's tables; every statement is ``IF NOT EXISTS``, so running it again is harmless."""

FENCE_SQL: Final = """\
WITH leasehold_prev AS (
    SELECT highest_token
    FROM leasehold_fence
    WHERE resource_key = %(leasehold_resource)s::text
    FOR UPDATE
),
leasehold_admitted AS (
    INSERT INTO leasehold_fence AS f (resource_key, highest_token)
    SELECT %(leasehold_resource)s::text, %(leasehold_token)s::bigint
    WHERE NOT EXISTS (
        SELECT 1 FROM leasehold_prev WHERE highest_token > %(leasehold_token)s::bigint
    )
    ON CONFLICT (resource_key) DO UPDATE
        SET highest_token = EXCLUDED.highest_token, updated_at = now()
        WHERE f.highest_token <= EXCLUDED.highest_token
    RETURNING f.highest_token
),
leasehold_recorded AS (
    INSERT INTO leasehold_effect (idempotency_key, resource_key, fencing_token)
    SELECT %(leasehold_idempotency_key)s::text, %(leasehold_resource)s::text,
           %(leasehold_token)s::bigint
    FROM leasehold_admitted
    WHERE %(leasehold_idempotency_key)s::text IS NOT NULL
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING idempotency_key
),
leasehold_fenced AS (
    SELECT highest_token
    FROM leasehold_admitted
    WHERE %(leasehold_idempotency_key)s::text IS NULL
       OR EXISTS (SELECT 1 FROM leasehold_recorded)
)
"""
"""The fence as a ``WITH`` clause, to put in front of your own statement.

Parameters (named, psycopg style; build them with :func:`sql_params`):
``leasehold_resource`` (text), ``leasehold_token`` (bigint) and
``leasehold_idempotency_key`` (text or NULL).

What the clause does, whatever statement follows it: locks the fence row of
the resource (``leasehold_prev``: the highest token before, if any), raises
it to the token unless the stored one is higher (``leasehold_admitted``: one
row when admitted), and records the idempotency key if one is given
(``leasehold_recorded``: one row when recorded, none for a duplicate).
``leasehold_fenced`` has one row exactly when the effect may happen: gate
your effect on ``EXISTS (SELECT 1 FROM leasehold_fenced)`` (see
:data:`GATE_CTE`), so it runs after the fence row is locked, and only if
admitted::

    cur.execute(
        FENCE_SQL + '''
        UPDATE account SET value = %(value)s
        WHERE key = %(key)s AND EXISTS (SELECT 1 FROM leasehold_fenced)
        ''',
        {**sql_params(token, "account/42", key), "value": "B", "key": "42"},
    )
    if cur.rowcount == 0:
        conn.rollback()  # fenced off (or no such account): nothing happened

A pasted statement reports a refusal as "no rows" rather than an exception;
:func:`fence` with ``effect=`` runs the same clause and raises instead.
"""

GATE_CTE: Final = "leasehold_fenced"
"""The name of the CTE in :data:`FENCE_SQL` that an effect must gate on."""

_FENCE_QUERY: Final = """\
SELECT (SELECT highest_token FROM leasehold_prev),
       (SELECT highest_token FROM leasehold_admitted),
       EXISTS (SELECT 1 FROM leasehold_recorded)
"""

_CURRENT_QUERY: Final = "SELECT highest_token FROM leasehold_fence WHERE resource_key = %s"

_PARAM_PREFIX: Final = "leasehold_"


class FenceParams(TypedDict):
    """The named parameters of :data:`FENCE_SQL`."""

    leasehold_token: int
    """The writer's fencing token."""
    leasehold_resource: str
    """The resource key the token guards."""
    leasehold_idempotency_key: str | None
    """The effect's idempotency key, or ``None`` for none."""


def sql_params(token: int, resource_key: str, idempotency_key: str | None = None) -> FenceParams:
    """The parameters a worker sends with :data:`FENCE_SQL`.

    Args:
        token: the worker's fencing token (``LEASEHOLD_FENCING_TOKEN``).
        resource_key: what the effect writes, e.g. ``"account/42"``; one key
            per thing whose writes must be ordered.
        idempotency_key: the effect's key (see
            :func:`leasehold.fencing.idempotency_key`), or ``None``.

    Returns:
        ``{"leasehold_token": ..., "leasehold_resource": ...,
        "leasehold_idempotency_key": ...}``; merge your own parameters into it.

    Raises:
        ValueError: ``token`` is negative or not an int.
    """
    if isinstance(token, bool) or not isinstance(token, int) or token < 0:
        raise ValueError(f"a fencing token is a non-negative int, got {token!r}")
    return {
        "leasehold_token": token,
        "leasehold_resource": resource_key,
        "leasehold_idempotency_key": idempotency_key,
    }


def install(conn: psycopg.Connection[Any]) -> None:
    """Create the fence's tables if they do not exist (:data:`SCHEMA_SQL`).

    Runs in ``conn.transaction()``: committed on return when ``conn`` was
    idle, a savepoint of the caller's transaction otherwise. Run it once (at
    deploy or start-up): concurrent ``CREATE TABLE IF NOT EXISTS`` may still
    collide in PostgreSQL.

    Args:
        conn: a connection to the target database; the tables go to the first
            schema of its ``search_path``.
    """
    with conn.transaction():
        conn.execute(SCHEMA_SQL)


def fence(
    cur_or_conn: psycopg.Connection[Any] | psycopg.Cursor[Any],
    resource_key: str,
    token: int,
    idempotency_key: str | None = None,
    *,
    effect: str | None = None,
    params: Mapping[str, Any] | None = None,
) -> Admitted:
    """Check a write's fencing token (and idempotency key) in its transaction.

    One statement, one round trip when admitted: locks the resource's fence
    row, raises its highest token to ``token`` unless a higher one is stored,
    and records ``idempotency_key``. The lock is held until the transaction
    ends, so concurrent writers of ``resource_key`` are serialized. Call it
    inside the transaction of the effect (``with conn.transaction():``),
    before the effect; on an exception the block rolls the transaction back,
    undoing anything the fence or the effect did.

    Args:
        cur_or_conn: the connection (or a cursor of it) whose transaction the
            effect runs in. With ``effect``, the statement alone is atomic,
            so an autocommit connection will do.
        resource_key: what the effect writes, e.g. ``"account/42"``.
        token: the writer's fencing token.
        idempotency_key: the effect's key, or ``None`` for no duplicate check.
        effect: optional data-modifying SQL to run in the same statement (as
            a CTE after the fence), e.g. ``"UPDATE account SET value =
            %(value)s WHERE key = %(key)s AND EXISTS (SELECT 1 FROM
            leasehold_fenced)"``. It must gate on ``leasehold_fenced``
            (:data:`GATE_CTE`) so it runs only when admitted.
        params: the named parameters of ``effect``; names starting with
            ``leasehold_`` are reserved.

    Returns:
        What was admitted: ``previous`` is the highest token before, ``None``
        when this write created the resource's fence row (or raced with the
        one that did).

    Raises:
        StaleToken: a higher token was accepted for ``resource_key``; its
            ``current`` is that token. Roll the transaction back.
        DuplicateEffect: ``idempotency_key`` was applied before. Roll the
            transaction back (the fence row may have been raised meanwhile).
        ValueError: ``token`` is negative, ``effect`` does not gate on
            ``leasehold_fenced``, ``params`` uses a reserved name, or there
            is no transaction to guard (an autocommit connection outside
            ``conn.transaction()``, with no ``effect``).
        psycopg.Error: the database failed (e.g. the tables are missing:
            call :func:`install`).
    """
    query, values = _statement(resource_key, token, idempotency_key, effect, params)
    conn = cur_or_conn if isinstance(cur_or_conn, psycopg.Connection) else cur_or_conn.connection
    if (
        effect is None
        and conn.autocommit
        and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    ):
        raise ValueError(
            "fence() outside a transaction on an autocommit connection: the fence would "
            "commit alone and not guard the effect; use `with conn.transaction():`"
        )
    # A plain cursor: the caller's may have another row factory or placeholder style.
    with psycopg.Cursor[TupleRow](conn, row_factory=tuple_row) as cur:
        cur.execute(query, values)
        row = cur.fetchone()
        assert row is not None  # a SELECT without FROM returns one row
        previous, admitted, recorded = row
        if admitted is None:
            raise StaleToken(resource_key, token, _current(cur, resource_key, previous))
    if idempotency_key is not None and not recorded:
        raise DuplicateEffect(idempotency_key)
    return Admitted(resource_key, token, None if previous is None else int(previous))


def _statement(
    resource_key: str,
    token: int,
    idempotency_key: str | None,
    effect: str | None,
    params: Mapping[str, Any] | None,
) -> tuple[str, dict[str, Any]]:
    """The fence's one statement and its parameters, the effect (if any) as a gated CTE.

    Raises:
        ValueError: ``token`` is negative, ``effect`` does not gate on
            ``leasehold_fenced``, ``params`` uses a reserved name or comes
            without an effect.
    """
    values: dict[str, Any] = dict(sql_params(token, resource_key, idempotency_key))
    if effect is None:
        if params:
            raise ValueError("params given without an effect")
        return FENCE_SQL + _FENCE_QUERY, values
    if GATE_CTE not in effect:
        raise ValueError(f"the effect must gate on EXISTS (SELECT 1 FROM {GATE_CTE})")
    reserved = sorted(name for name in (params or {}) if name.startswith(_PARAM_PREFIX))
    if reserved:
        raise ValueError(f"parameter names starting with {_PARAM_PREFIX!r}: {reserved}")
    values.update(params or {})
    query = FENCE_SQL + f", leasehold_user_effect AS (\n{effect}\n)\n" + _FENCE_QUERY
    return query, values


def _current(cur: psycopg.Cursor[TupleRow], resource_key: str, previous: Any) -> int:
    """The token that refused a stale write: the one read, or a fresh read of it.

    When ``previous`` is ``None`` the fence row was created after the
    statement's snapshot by a concurrent writer; the upsert holds its lock
    now, so a fresh read (READ COMMITTED) sees the committed token.

    Raises:
        RuntimeError: the fence row vanished meanwhile.
    """
    current = previous
    if current is None:
        cur.execute(_CURRENT_QUERY, (resource_key,))
        fresh = cur.fetchone()
        current = fresh[0] if fresh is not None else None
    if current is None:
        raise RuntimeError(f"fence row of {resource_key!r} vanished while fencing")
    return int(current)
