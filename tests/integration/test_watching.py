"""The operator's plain JobLease watch against a real API server."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from kubernetes import client

from faultproxy import TcpProxy
from leasehold import names
from leasehold.controller.engines.watching import EventType, ListWatch, Target, WatchEvent
from leasehold.lease.kubeclient import new_api_client
from leasehold.lease.store import LeaseStore
from tests.integration.test_worker import _proxied_kubeconfig


def lease(name: str) -> dict[str, object]:
    return {
        "apiVersion": f"{names.GROUP}/{names.VERSION}",
        "kind": "JobLease",
        "metadata": {"name": name},
        "spec": {"jobName": name, "leaseDurationSeconds": 30, "fencingToken": 0},
    }


def create(custom: client.CustomObjectsApi, namespace: str, name: str) -> Any:
    """Create a JobLease named ``name``; return the created body."""
    return custom.create_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, "jobleases", lease(name)
    )


def delete(custom: client.CustomObjectsApi, namespace: str, name: str) -> None:
    """Delete the JobLease named ``name``."""
    custom.delete_namespaced_custom_object(names.GROUP, names.VERSION, namespace, "jobleases", name)


class Recorder:
    """Collects events on the loop; waits for one that matches."""

    def __init__(self) -> None:
        self.events: list[WatchEvent] = []
        self._arrived = asyncio.Event()

    def __call__(self, event: WatchEvent) -> None:
        self.events.append(event)
        self._arrived.set()

    async def wait_for(
        self, match: Callable[[WatchEvent], bool], timeout: float = 20.0
    ) -> WatchEvent:
        async def scan() -> WatchEvent:
            while True:
                for event in self.events:
                    if match(event):
                        return event
                self._arrived.clear()
                await self._arrived.wait()

        return await asyncio.wait_for(scan(), timeout)


def named(kind: EventType, name: str, **extra: object) -> Callable[[WatchEvent], bool]:
    def match(event: WatchEvent) -> bool:
        return (
            event.type is kind
            and event.body["metadata"]["name"] == name
            and all(getattr(event, k) == v for k, v in extra.items())
        )

    return match


def test_list_then_watch_delivers_every_change(
    crds_installed: Path, api_client: client.ApiClient, namespace: str
) -> None:
    custom = client.CustomObjectsApi(api_client)
    store = LeaseStore(api_client)
    create(custom, namespace, "before")

    async def scenario() -> None:
        recorder = Recorder()
        target = Target(names.GROUP, names.VERSION, "jobleases", namespace)
        watch = ListWatch(
            new_api_client(crds_installed), target, recorder, asyncio.get_running_loop()
        )
        watch.start()
        try:
            await recorder.wait_for(named(EventType.LISTED, "before", initial=True))
            await asyncio.to_thread(create, custom, namespace, "after")
            await recorder.wait_for(named(EventType.ADDED, "after", initial=False))
            await asyncio.to_thread(store.claim, namespace, "after", "w1")
            claimed = await recorder.wait_for(named(EventType.MODIFIED, "after"))
            assert claimed.body["spec"]["holderIdentity"] == "w1"
            assert claimed.body["spec"]["fencingToken"] == 1
            await asyncio.to_thread(delete, custom, namespace, "before")
            await recorder.wait_for(named(EventType.DELETED, "before"))
        finally:
            await asyncio.to_thread(watch.stop)
        assert not watch.running  # stop() ended the blocked read, not just flagged it
        kinds = [(e.type, e.body["metadata"]["name"]) for e in recorder.events]
        assert kinds == [
            (EventType.LISTED, "before"),
            (EventType.ADDED, "after"),
            (EventType.MODIFIED, "after"),
            (EventType.DELETED, "before"),
        ]

    asyncio.run(scenario())


def test_a_broken_watch_relists_and_reports_what_was_deleted_meanwhile(
    crds_installed: Path, api_client: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    """The watch's connection dies while a lease is deleted: the re-list tells."""
    custom = client.CustomObjectsApi(api_client)
    uids = {
        name: create(custom, namespace, name)["metadata"]["uid"]
        for name in ("stays", "goes", "reborn")
    }
    server = urlsplit(
        yaml.safe_load(crds_installed.read_text())["clusters"][0]["cluster"]["server"]
    )
    assert server.hostname is not None and server.port is not None

    async def scenario(proxy: TcpProxy) -> list[WatchEvent]:
        recorder = Recorder()
        kubeconfig = _proxied_kubeconfig(crds_installed, proxy, tmp_path / "kubeconfig")
        target = Target(names.GROUP, names.VERSION, "jobleases", namespace)
        watch = ListWatch(new_api_client(kubeconfig), target, recorder, asyncio.get_running_loop())
        watch.start()
        try:
            await recorder.wait_for(named(EventType.LISTED, "goes", initial=True))
            # The watch request is streaming once it reports a new lease.
            await asyncio.to_thread(create, custom, namespace, "probe")
            await recorder.wait_for(named(EventType.ADDED, "probe"))
            proxy.hold()  # the watch hears nothing from now on
            await asyncio.to_thread(delete, custom, namespace, "goes")
            await asyncio.to_thread(create, custom, namespace, "new")
            # "reborn" is deleted and created again under the same name: a
            # re-list must report the old object's deletion, not just the name.
            await asyncio.to_thread(delete, custom, namespace, "reborn")
            await asyncio.to_thread(create, custom, namespace, "reborn")
            proxy.drop_connections()  # what it would have heard is lost
            proxy.release()
            await recorder.wait_for(named(EventType.DELETED, "goes"))
            await recorder.wait_for(named(EventType.LISTED, "new", initial=False))
        finally:
            await asyncio.to_thread(watch.stop)
        return recorder.events

    with TcpProxy(server.hostname, server.port) as proxy:
        events = asyncio.run(scenario(proxy))
    after_break = [
        (e.type, e.body["metadata"]["name"], e.initial)
        for e in events[4:]  # the initial list ("stays", "goes", "reborn") and "probe" added
    ]
    # A re-list, not a resumed watch: the unchanged lease is listed again.
    assert sorted(after_break, key=str) == sorted(
        [
            (EventType.LISTED, "stays", False),
            (EventType.LISTED, "probe", False),
            (EventType.LISTED, "new", False),
            (EventType.DELETED, "goes", False),
            (EventType.DELETED, "reborn", False),
            (EventType.LISTED, "reborn", False),
        ],
        key=str,
    )
    reborn = [e for e in events[4:] if e.body["metadata"]["name"] == "reborn"]
    assert [e.type for e in reborn] == [EventType.DELETED, EventType.LISTED]
    assert reborn[0].body["metadata"]["uid"] == uids["reborn"]  # the old object goes
    assert reborn[0].body["metadata"]["namespace"] == namespace  # its whole identity
    # Listed and watched bodies alike come without the field managers' bookkeeping.
    assert {e.type for e in events} >= {EventType.LISTED, EventType.ADDED}
    assert not [e for e in events if "managedFields" in e.body["metadata"]]
    assert reborn[1].body["metadata"]["uid"] != uids["reborn"]


def test_a_consumer_that_raises_on_one_object_still_gets_the_next(
    crds_installed: Path, api_client: client.ApiClient, namespace: str
) -> None:
    custom = client.CustomObjectsApi(api_client)
    for name in ("bad", "good"):
        create(custom, namespace, name)

    async def scenario() -> list[str]:
        recorder = Recorder()

        def consumer(event: WatchEvent) -> None:
            if event.body["metadata"]["name"] == "bad":
                raise KeyError("a bug in the handler")
            recorder(event)

        target = Target(names.GROUP, names.VERSION, "jobleases", namespace)
        watch = ListWatch(
            new_api_client(crds_installed), target, consumer, asyncio.get_running_loop()
        )
        watch.start()
        try:
            await recorder.wait_for(named(EventType.LISTED, "good"))
            await asyncio.to_thread(create, custom, namespace, "later")
            await recorder.wait_for(named(EventType.ADDED, "later"))
        finally:
            await asyncio.to_thread(watch.stop)
        return [e.body["metadata"]["name"] for e in recorder.events]

    assert asyncio.run(scenario()) == ["good", "later"]


def test_synced_means_every_listed_object_was_handed_to_the_consumer(
    crds_installed: Path, api_client: client.ApiClient, namespace: str
) -> None:
    """When ``synced`` is set, the consumer has had every object of the first LIST.

    The runtime marks its caches whole then; the watch thread hands events
    over in batches on the loop, which may be busy.
    """
    custom = client.CustomObjectsApi(api_client)
    count = 1_200  # more than two of the drain's batches
    for i in range(count):
        create(custom, namespace, f"l{i}")
    seen: set[str] = set()
    at_synced: list[int] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        watch: ListWatch | None = None

        def consume(event: WatchEvent) -> None:
            seen.add(event.body["metadata"]["name"])

        target = Target(names.GROUP, names.VERSION, "jobleases", namespace)
        watch = ListWatch(new_api_client(crds_installed), target, consume, loop)
        watch.start()
        try:
            while not watch.synced.is_set():
                # A busy loop: the drain runs between these slices only.
                await asyncio.sleep(0)
            at_synced.append(len(seen))
        finally:
            await asyncio.to_thread(watch.stop)

    asyncio.run(scenario())
    assert at_synced == [count]
