"""HTTP fencing on a real server: stale and duplicate writes are refused at the target.

A real uvicorn server on a loopback port runs a small Starlette app behind
:class:`FencingMiddleware`; a :class:`TcpProxy` delays a worker's write on
the wire; tokens come from real claims on a JobLease.
"""

from __future__ import annotations

import asyncio
import random
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from faultproxy import TcpProxy
from leasehold.controller.engines.expiry import ExpiryClock
from leasehold.fencing import HEADER_TOKEN, MemoryFence, idempotency_key
from leasehold.fencing.http import (
    ASGIApp,
    FencingMiddleware,
    Receive,
    Scope,
    Send,
    fenced_request,
    fencing_headers,
    mark_applied,
)
from leasehold.lease.protocol import Outcome, Rejection
from leasehold.lease.store import Accepted, LeaseStore, Rejected
from tests.integration.leases import claim_ok, wait_expired


@dataclass
class Target:
    """The service under test: what it stored and in which order."""

    url: str
    fence: MemoryFence
    values: dict[str, str] = field(default_factory=dict)
    history: list[tuple[str, int]] = field(default_factory=list)
    """Accepted effects in the order they were applied: (resource, token)."""
    arrivals: list[tuple[str, str, str | None]] = field(default_factory=list)
    """Every request as it reached the server, before the middleware."""


def _build_app(target: Target) -> ASGIApp:
    async def put_value(request: Request) -> Response:
        fenced = fenced_request(request.scope)
        assert fenced is not None  # the middleware let it through
        body = (await request.body()).decode()
        if body == "fail":
            return JSONResponse({"error": "the effect failed"}, status_code=500)
        if body in ("apply-then-fail", "mark-then-fail"):
            # The effect lands, then something after it fails.
            target.values[request.path_params["key"]] = body
            target.history.append((fenced.resource, fenced.token))
            if body == "mark-then-fail":
                mark_applied(request.scope)
            return JSONResponse({"error": "failed after the effect"}, status_code=500)
        # The effect takes a moment: a window in which a later check could
        # overtake it if check and effect were not under one lock.
        await asyncio.sleep(random.uniform(0, 0.004))
        target.values[request.path_params["key"]] = body
        target.history.append((fenced.resource, fenced.token))
        return JSONResponse({"stored": body, "token": fenced.token})

    async def get_value(request: Request) -> Response:
        value = target.values.get(request.path_params["key"])
        return PlainTextResponse(value or "", status_code=200 if value is not None else 404)

    app = Starlette(
        routes=[
            Route("/values/{key}", put_value, methods=["PUT"]),
            Route("/values/{key}", get_value, methods=["GET"]),
        ]
    )
    app.add_middleware(FencingMiddleware, fence=target.fence)

    async def recorded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            token = dict(scope["headers"]).get(HEADER_TOKEN.lower().encode())
            target.arrivals.append(
                (scope["method"], scope["path"], token.decode() if token else None)
            )
        await app(scope, receive, send)

    return recorded


class _Server:
    """uvicorn in a background thread on a free loopback port."""

    def __init__(self, app: ASGIApp) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.socket.getsockname()[1])
        self.server = uvicorn.Server(
            uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
        )
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True
        )

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.socket.close()


def _bar(target: Target, resource: str, want: int, seconds: float = 5.0) -> int | None:
    """The fence's bar for ``resource``, read until it is ``want`` or ``seconds`` passed.

    The middleware records a token in its ``finally``, after the answer went
    out, still under the resource's lock: a request through the middleware
    waits for it, but a direct read from the test's thread may come first.
    """
    deadline = time.monotonic() + seconds
    while (bar := target.fence.highest(resource)) != want and time.monotonic() < deadline:
        time.sleep(0.01)
    return bar


@pytest.fixture
def target() -> Iterator[Target]:
    fence = MemoryFence()
    target = Target(url="", fence=fence)
    server = _Server(_build_app(target))
    server.start()
    target.url = f"http://127.0.0.1:{server.port}"
    yield target
    server.stop()


def test_worked_example_a_delayed_write_arrives_after_b_and_is_rejected(
    target: Target, store: LeaseStore, namespace: str
) -> None:
    """A (token 7) writes; the network holds it; B (token 8) writes; A's write is refused."""
    store.create(
        namespace, "job", job_name="job", lease_duration_seconds=1, initial_fencing_token=6
    )
    token_a = claim_ok(store, namespace, "job", "worker-a")
    assert token_a == 7
    host, port = target.url.removeprefix("http://").split(":")
    with (
        TcpProxy(host, int(port)) as proxy,
        httpx.Client(base_url=f"http://{proxy.url_host}", timeout=30) as client_a,
        httpx.Client(base_url=target.url, timeout=10) as client_b,
    ):
        assert client_a.get("/values/report").status_code == 404  # connection open
        proxy.hold()
        answer_a: list[httpx.Response] = []
        sender = threading.Thread(
            target=lambda: answer_a.append(
                client_a.put(
                    "/values/report",
                    content="written by A",
                    headers=fencing_headers(token_a, "/values/report"),
                )
            )
        )
        sender.start()
        # A's lease expires: the operator's judge sees no change for 1 s + margin.
        expiry = ExpiryClock(margin_seconds=0.5, monotonic=time.monotonic)
        judged = wait_expired(store, expiry, namespace, "job", timeout=10)
        assert isinstance(store.reclaim(judged), Accepted)
        token_b = claim_ok(store, namespace, "job", "worker-b")
        assert token_b == 8
        written = client_b.put(
            "/values/report",
            content="written by B",
            headers=fencing_headers(token_b, "/values/report"),
        )
        assert written.status_code == 200, written.text
        assert sender.is_alive(), "A's write was not held by the proxy"
        assert ("PUT", "/values/report", "7") not in target.arrivals
        proxy.release()
        sender.join(timeout=10)
    assert answer_a, "A's write got no answer"
    late = answer_a[0]
    assert late.status_code == 409, late.text
    assert late.json() == {
        "error": "stale fencing token",
        "resource": "/values/report",
        "token": 7,
        "current": 8,
    }
    # A's write reached the server after B's, and was refused there.
    puts = [(path, token) for method, path, token in target.arrivals if method == "PUT"]
    assert puts == [("/values/report", "8"), ("/values/report", "7")]
    assert target.values["report"] == "written by B"
    assert target.history == [("/values/report", 8)]
    assert target.fence.highest("/values/report") == 8
    # The store refuses A's completion with token 7 as well.
    done = store.complete(namespace, "job", "worker-a", token_a, Outcome.SUCCEEDED)
    assert isinstance(done, Rejected) and done.rejection is Rejection.STALE_TOKEN


WRITERS = 20
WRITES_EACH = 5
RESOURCES = ("alpha", "beta")


def test_concurrent_writers_accepted_tokens_never_decrease(target: Target) -> None:
    """20 writers with interleaved tokens race on two resources."""
    barrier = threading.Barrier(WRITERS)
    outcomes: list[tuple[str, int, int, dict[str, Any]]] = []
    lock = threading.Lock()

    def writer(index: int) -> None:
        token = (index * 7) % 10 + 1  # tokens 1..10, interleaved across writers
        with httpx.Client(base_url=target.url, timeout=30) as http:
            barrier.wait(timeout=30)
            for n in range(WRITES_EACH):
                resource = RESOURCES[(index + n) % 2]
                answer = http.put(
                    f"/values/{resource}",
                    content=f"writer {index} write {n}",
                    headers=fencing_headers(token, resource),
                )
                with lock:
                    outcomes.append((resource, token, answer.status_code, answer.json()))

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(outcomes) == WRITERS * WRITES_EACH
    accepted = [o for o in outcomes if o[2] == 200]
    rejected = [o for o in outcomes if o[2] != 200]
    assert rejected, "no write was rejected: the tokens did not interleave"
    for resource, token, status, body in rejected:
        assert status == 409, body
        assert body["error"] == "stale fencing token"
        assert (body["resource"], body["token"]) == (resource, token)
        assert body["current"] > token
    assert len(target.history) == len(accepted)
    per_resource: dict[str, list[int]] = defaultdict(list)
    for resource, token in target.history:
        per_resource[resource].append(token)
    for resource, tokens in per_resource.items():
        assert tokens == sorted(tokens), f"{resource}: accepted tokens went down: {tokens}"
        assert _bar(target, resource, tokens[-1]) == tokens[-1]
    print(
        f"\n[measure] {len(accepted)} writes accepted, {len(rejected)} rejected as stale;"
        f" accepted per resource: {dict(per_resource)}"
    )


def test_duplicate_idempotency_key_is_applied_once(target: Target) -> None:
    key = idempotency_key("default/payout", 3, "record-payment")
    with httpx.Client(base_url=target.url, timeout=10) as http:
        first = http.put("/values/pay", content="paid", headers=fencing_headers(3, "pay", key))
        assert first.status_code == 200, first.text
        again = http.put("/values/pay", content="paid", headers=fencing_headers(3, "pay", key))
        assert again.status_code == 409
        assert again.json() == {"error": "duplicate effect", "idempotencyKey": key}
        # A different step under the same token is its own effect.
        other = idempotency_key("default/payout", 3, "notify")
        assert (
            http.put("/values/pay", content="told", headers=fencing_headers(3, "pay", other))
        ).status_code == 200
    assert target.history == [("pay", 3), ("pay", 3)]
    assert target.values["pay"] == "told"


def test_a_failed_effect_raises_the_bar_but_keeps_its_key(target: Target) -> None:
    """A 500 before the effect: token 9 reached the target, its key is not used up."""
    key = idempotency_key("default/job", 9, "write")
    with httpx.Client(base_url=target.url, timeout=10) as http:
        failed = http.put("/values/x", content="fail", headers=fencing_headers(9, "x", key))
        assert failed.status_code == 500
        assert _bar(target, "x", 9) == 9
        # Token 9 reached the target: a lower token is stale now ...
        stale = http.put("/values/x", content="v5", headers=fencing_headers(5, "x"))
        assert stale.status_code == 409, stale.text
        assert stale.json()["current"] == 9
        # ... and the retry of the failed effect is not a duplicate.
        retried = http.put("/values/x", content="v9", headers=fencing_headers(9, "x", key))
        assert retried.status_code == 200, retried.text
    assert target.history == [("x", 9)]


def test_an_effect_applied_before_a_5xx_raises_the_bar(target: Target) -> None:
    """The app applies the effect, then answers 500: older tokens and the key are refused."""
    with httpx.Client(base_url=target.url, timeout=10) as http:
        applied = http.put("/values/y", content="apply-then-fail", headers=fencing_headers(8, "y"))
        assert applied.status_code == 500
        assert target.values["y"] == "apply-then-fail"
        late = http.put("/values/y", content="late v7", headers=fencing_headers(7, "y"))
        assert late.status_code == 409, late.text
        assert late.json() == {
            "error": "stale fencing token",
            "resource": "y",
            "token": 7,
            "current": 8,
        }
        # An app that marks the effect applied before failing uses up its key.
        key = idempotency_key("default/job", 8, "mark")
        marked = http.put(
            "/values/y", content="mark-then-fail", headers=fencing_headers(8, "y", key)
        )
        assert marked.status_code == 500
        retried = http.put(
            "/values/y", content="mark-then-fail", headers=fencing_headers(8, "y", key)
        )
        assert retried.status_code == 409, retried.text
        assert retried.json() == {"error": "duplicate effect", "idempotencyKey": key}
    assert target.values["y"] == "mark-then-fail"
    assert target.history == [("y", 8), ("y", 8)]


def test_missing_or_invalid_token_is_428_and_reads_pass(target: Target) -> None:
    with httpx.Client(base_url=target.url, timeout=10) as http:
        missing = http.put("/values/k", content="v")
        assert missing.status_code == 428
        assert missing.json() == {"error": "fencing token required", "header": HEADER_TOKEN}
        for bad in ("seven", "-1", "7.0", ""):
            invalid = http.put("/values/k", content="v", headers={HEADER_TOKEN: bad})
            assert invalid.status_code == 428, bad
            assert invalid.json()["header"] == HEADER_TOKEN
        assert http.get("/values/k").status_code == 404  # reads need no token
        # Default resource key: the path.
        assert http.put("/values/k", content="v", headers={HEADER_TOKEN: "4"}).is_success
    assert target.history == [("/values/k", 4)]


def test_fencing_headers_refuse_what_cannot_be_sent() -> None:
    assert fencing_headers(8, "orders/42", "job/8/step") == {
        "Leasehold-Fencing-Token": "8",
        "Leasehold-Resource": "orders/42",
        "Idempotency-Key": "job/8/step",
    }
    for token in (-1, True):
        with pytest.raises(ValueError, match="non-negative int"):
            fencing_headers(token, "r")
    with pytest.raises(ValueError, match="header value"):
        fencing_headers(1, "line\nbreak")


def test_require_token_false_lets_untokened_writes_through() -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        response = PlainTextResponse("ok")
        await response(scope, receive, send)

    optional = FencingMiddleware(app, require_token=False)

    async def run() -> list[int]:
        transport = httpx.ASGITransport(app=optional)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            return [
                (await http.post("/r")).status_code,
                (await http.post("/r", headers=fencing_headers(2, "r"))).status_code,
                (await http.post("/r", headers=fencing_headers(1, "r"))).status_code,
                (await http.post("/r", headers={HEADER_TOKEN: "x"})).status_code,
            ]

    assert asyncio.run(run()) == [200, 200, 409, 428]
