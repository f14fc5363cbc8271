"""Fencing for HTTP targets: ASGI middleware that refuses stale and duplicate writes.

Why this module exists: a worker whose lease was taken away may still have a
write on the wire. The lease store cannot stop it; the HTTP service that
receives it can, if every mutating request carries the writer's fencing token
(Kleppmann, "How to do distributed locking", 2016: "fencing tokens").
:class:`FencingMiddleware` wraps any ASGI app (Starlette, FastAPI, a bare
ASGI callable) and, for each mutating request, per resource key:

1. takes the resource's lock (an :class:`asyncio.Lock`, one per key in use);
2. checks the token against the highest accepted one and the idempotency key
   against the applied ones (the rule of :mod:`leasehold.fencing`);
3. calls the app, which performs the effect;
4. raises the resource's bar to the token whatever the app answered (the
   effect may have been applied before a 5xx or an exception, and a token
   that reached the target has made every lower one stale); uses up the
   idempotency key when the app answered 2xx or called :func:`mark_applied`;
5. releases the lock.

Holding the lock across check, effect and record is what makes effects on one
resource apply in token order: a check that passed cannot be overtaken by a
higher-token effect before its own effect lands.

Requests carry (see :func:`fencing_headers`, the worker side):

* ``Leasehold-Fencing-Token``: the token, a non-negative decimal integer;
* ``Leasehold-Resource``: the resource key (default: the request path);
* ``Idempotency-Key`` (optional): the effect's key, e.g.
  :func:`leasehold.fencing.idempotency_key`.

Answers the middleware gives instead of calling the app:

* 428, token missing (when required) or not a non-negative integer:
  ``{"error": "fencing token required", "header": "Leasehold-Fencing-Token"}``;
* 409, stale token:
  ``{"error": "stale fencing token", "resource": ..., "token": 7, "current": 8}``;
* 409, duplicate effect: ``{"error": "duplicate effect", "idempotencyKey": ...}``;
* 400, ``Leasehold-Resource`` or ``Idempotency-Key`` given more than once.

Scope: the locks and :class:`~leasehold.fencing.MemoryFence` live in one
process and one event loop. A service run as several processes needs a
shared fence (the PostgreSQL target) instead. Every write to a fenced
resource must go through the same middleware instance; a write that bypasses
it is not ordered.

Example::

    app = Starlette(routes=[...])
    app.add_middleware(FencingMiddleware, fence=MemoryFence())
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
from asyncio import Lock
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, runtime_checkable

from leasehold.fencing import (
    HEADER_IDEMPOTENCY,
    HEADER_RESOURCE,
    HEADER_TOKEN,
    Admitted,
    DuplicateEffect,
    FenceError,
    MemoryFence,
    StaleToken,
)

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
"""An ASGI connection scope."""
Message = MutableMapping[str, Any]
"""An ASGI event."""
Receive = Callable[[], Awaitable[Message]]
"""The ASGI ``receive`` callable."""
Send = Callable[[Message], Awaitable[None]]
"""The ASGI ``send`` callable."""
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
"""An ASGI application (the same shape as Starlette's ``ASGIApp``)."""

SCOPE_KEY: Final = "leasehold.fencing"
"""Scope key under which the app finds the :class:`FencedRequest` it serves."""
DEFAULT_METHODS: Final = ("POST", "PUT", "PATCH", "DELETE")
"""HTTP methods fenced by default: the ones that change things."""

_TOKEN_PATTERN: Final = re.compile(r"[0-9]{1,18}")  # fits an int64 with room to spare
_JSON_HEADERS: Final = [(b"content-type", b"application/json")]


# --------------------------------------------------------------------------
# Worker side


def fencing_headers(
    token: int, resource: str, idempotency_key: str | None = None
) -> dict[str, str]:
    """The headers a worker sends with a fenced write.

    Fencing tokens: Kleppmann, "How to do distributed locking" (2016).

    Args:
        token: the worker's fencing token (from its lease claim).
        resource: the resource key the write changes, as the target names it.
        idempotency_key: the effect's key, e.g.
            :func:`leasehold.fencing.idempotency_key`, so a retried write is
            applied once.

    Returns:
        ``{"Leasehold-Fencing-Token": "7", "Leasehold-Resource": ...}`` plus
        ``Idempotency-Key`` when given.

    Raises:
        ValueError: the token is negative or not an int, or a value is empty
            or cannot be sent as a header value.
    """
    if isinstance(token, bool) or not isinstance(token, int) or token < 0:
        raise ValueError(f"a fencing token is a non-negative int, got {token!r}")
    headers = {HEADER_TOKEN: str(token), HEADER_RESOURCE: _header_value("resource", resource)}
    if idempotency_key is not None:
        headers[HEADER_IDEMPOTENCY] = _header_value("idempotency key", idempotency_key)
    return headers


def _header_value(what: str, value: str) -> str:
    if not value or not value.isprintable() or not value.isascii() or value != value.strip():
        raise ValueError(f"{what} {value!r} is not a usable header value")
    return value


# --------------------------------------------------------------------------
# Target side: the fence, split in check and record


@runtime_checkable
class TwoPhaseFence(Protocol):
    """A fence whose check and record are separate steps.

    The middleware calls :meth:`check` before the effect and :meth:`record`
    after the app answered (or failed), both under the resource's lock.
    """

    def check(self, resource: str, token: int, idempotency_key: str | None = None) -> int | None:
        """Refuse an effect that the fence would not admit; record nothing.

        Args:
            resource: the resource key.
            token: the writer's fencing token.
            idempotency_key: the effect's key, if any.

        Returns:
            The highest token accepted so far, ``None`` if none.

        Raises:
            StaleToken: a higher token was accepted for ``resource``.
            DuplicateEffect: ``idempotency_key`` was applied before.
        """
        ...

    def record(self, resource: str, token: int, idempotency_key: str | None = None) -> Admitted:
        """Raise the resource's bar to ``token``; with a key, mark it applied.

        Args:
            resource: the resource key.
            token: the fencing token that reached the effect.
            idempotency_key: the key of an effect that was applied; ``None``
                when it was not (or may not have been) applied.

        Returns:
            What was admitted.

        Raises:
            FenceError: the effect is no longer admissible (someone wrote to
                the fence without holding the resource's lock).
        """
        ...


# --------------------------------------------------------------------------
# Locks per resource


@dataclass
class _Entry:
    lock: Lock = field(default_factory=Lock)
    users: int = 0


class _KeyedLocks:
    """One :class:`asyncio.Lock` per key, dropped when nobody uses it."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    @contextlib.asynccontextmanager
    async def hold(self, keys: Iterable[str]) -> AsyncIterator[None]:
        # Sorted, so two requests needing the same two keys cannot deadlock.
        async with contextlib.AsyncExitStack() as stack:
            for key in sorted(set(keys)):
                await stack.enter_async_context(self._one(key))
            yield

    @contextlib.asynccontextmanager
    async def _one(self, key: str) -> AsyncIterator[None]:
        entry = self._entries.setdefault(key, _Entry())
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._entries[key]


# --------------------------------------------------------------------------
# The middleware


@dataclass(frozen=True)
class FencedRequest:
    """What the middleware let through, for the app (``scope[SCOPE_KEY]``).

    Attributes:
        resource: the resource key.
        token: the request's fencing token.
        previous: the highest token accepted before, ``None`` if none.
        idempotency_key: the request's idempotency key, if any.
        applied: set by :func:`mark_applied` once the effect took place.
    """

    resource: str
    token: int
    previous: int | None
    idempotency_key: str | None
    applied: threading.Event = field(default_factory=threading.Event, compare=False)


def mark_applied(scope: Scope) -> None:
    """Tell the middleware that this request's effect was applied.

    Call it as soon as the effect is durable, before anything that may still
    fail: the idempotency key is then used up even if the app answers 5xx
    or raises afterwards, so a retry is refused as a duplicate instead of
    applied twice. (A 2xx answer counts as applied without it.)

    Args:
        scope: the request's ASGI scope.

    Raises:
        LookupError: the request was not fenced (a read, or no token with
            ``require_token=False``).
    """
    fenced = fenced_request(scope)
    if fenced is None:
        raise LookupError("this request was not fenced: nothing to mark")
    fenced.applied.set()


def fenced_request(scope: Scope) -> FencedRequest | None:
    """The fencing facts of the request being served, for the app's handlers.

    With Starlette: ``fenced_request(request.scope)``.

    Args:
        scope: the request's ASGI scope.

    Returns:
        The request's resource, token and key, or ``None`` when the request
        was not fenced (a read, or no token with ``require_token=False``).
    """
    value = scope.get(SCOPE_KEY)
    return value if isinstance(value, FencedRequest) else None


class FencingMiddleware:
    """ASGI middleware: reject writes with a stale fencing token or a used key.

    The check, the app's effect and the recording of the token happen under
    one lock per resource, so accepted effects on a resource apply in
    non-decreasing token order. The bar (the highest token) is raised for
    every request the app saw, whatever it answered: the middleware cannot
    tell an effect applied before a 5xx from one that never happened, and
    a lower token is stale either way. The idempotency key is used up only
    when the effect was applied (2xx, or :func:`mark_applied`), so a failed
    effect can be retried under its key.

    Source: Kleppmann, "How to do distributed locking" (2016), fencing tokens.

    Args:
        app: the ASGI app to protect.
        fence: where the highest token per resource is kept. A
            :class:`~leasehold.fencing.MemoryFence` or any
            :class:`TwoPhaseFence`; default: a
            new ``MemoryFence`` per middleware.
        methods: HTTP methods to fence; others pass through unchecked.
        require_token: answer 428 to a fenced method without a token. With
            ``False`` such requests pass unfenced; a token that is present
            but malformed is refused either way.

    Example:
        ``app.add_middleware(FencingMiddleware, fence=MemoryFence())``
    """

    def __init__(
        self,
        app: ASGIApp,
        fence: TwoPhaseFence | None = None,
        *,
        methods: Iterable[str] = DEFAULT_METHODS,
        require_token: bool = True,
    ) -> None:
        self.app = app
        self.fence: TwoPhaseFence = MemoryFence() if fence is None else fence
        self.methods = frozenset(m.upper() for m in methods)
        self.require_token = require_token
        self._locks = _KeyedLocks()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection.

        Args:
            scope: the connection scope.
            receive: the ASGI receive callable.
            send: the ASGI send callable.
        """
        if scope["type"] != "http" or str(scope.get("method", "")).upper() not in self.methods:
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        raw_tokens = headers.get(HEADER_TOKEN.lower(), [])
        if not raw_tokens:
            if self.require_token:
                await _respond(
                    send, 428, {"error": "fencing token required", "header": HEADER_TOKEN}
                )
                return
            await self.app(scope, receive, send)
            return
        if len(raw_tokens) != 1 or not _TOKEN_PATTERN.fullmatch(raw_tokens[0].strip()):
            await _respond(
                send,
                428,
                {
                    "error": "invalid fencing token",
                    "header": HEADER_TOKEN,
                    "value": ", ".join(raw_tokens),
                },
            )
            return
        token = int(raw_tokens[0].strip())
        for name in (HEADER_RESOURCE, HEADER_IDEMPOTENCY):
            if len(headers.get(name.lower(), [])) > 1:
                await _respond(send, 400, {"error": "header given more than once", "header": name})
                return
        resource = _single(headers, HEADER_RESOURCE) or str(scope.get("path") or "/")
        key = _single(headers, HEADER_IDEMPOTENCY)
        lock_keys = [f"resource:{resource}"] + ([f"idempotency:{key}"] if key else [])
        async with self._locks.hold(lock_keys):
            await self._fenced(scope, receive, send, resource, token, key)

    async def _fenced(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        resource: str,
        token: int,
        key: str | None,
    ) -> None:
        try:
            previous = self.fence.check(resource, token, key)
        except StaleToken as exc:
            await _respond(
                send,
                409,
                {
                    "error": "stale fencing token",
                    "resource": exc.resource,
                    "token": exc.token,
                    "current": exc.current,
                },
            )
            return
        except DuplicateEffect as exc:
            await _respond(
                send, 409, {"error": "duplicate effect", "idempotencyKey": exc.idempotency_key}
            )
            return
        status: int | None = None

        async def send_noting_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        inner = dict(scope)
        fenced = FencedRequest(resource, token, previous, key)
        inner[SCOPE_KEY] = fenced
        try:
            await self.app(inner, receive, send_noting_status)
        finally:
            # The effect may have landed whatever the answer: the bar goes up
            # always. The key is used up when the effect is known applied (a
            # 2xx that was sent counts even if the app failed afterwards: the
            # client was told the effect happened).
            applied = fenced.applied.is_set() or (status is not None and 200 <= status < 300)
            try:
                self.fence.record(resource, token, key if applied else None)
            except FenceError:
                log.error(
                    "fence refused to record token %d for %r after the effect: "
                    "something writes to this fence outside the middleware's lock",
                    token,
                    resource,
                    exc_info=True,
                )


def _headers(scope: Scope) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for name, value in scope.get("headers", []):
        found.setdefault(bytes(name).decode("latin-1").lower(), []).append(
            bytes(value).decode("latin-1")
        )
    return found


def _single(headers: dict[str, list[str]], name: str) -> str | None:
    values = headers.get(name.lower())
    if not values:
        return None
    return values[0].strip() or None


async def _respond(send: Send, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*_JSON_HEADERS, (b"content-length", str(len(data)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": data})
