"""Kopf's peering rule as the lease work outside Kopf applies it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from leasehold.controller.engines.peering import ActivityGate, judge
from leasehold.controller.engines.watching import EventType, WatchEvent

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def peer(priority: int, seen_ago_seconds: float, lifetime: int = 60) -> dict[str, Any]:
    return {
        "priority": priority,
        "lifetime": lifetime,
        "lastseen": (NOW - timedelta(seconds=seen_ago_seconds)).isoformat(),
    }


def test_alone_is_active() -> None:
    assert judge({"me": peer(100, 0)}, "me", 100, NOW).active


def test_a_live_higher_peer_pauses_until_its_lifetime_ends() -> None:
    verdict = judge({"me": peer(100, 0), "other": peer(200, 10)}, "me", 100, NOW)
    assert not verdict.active
    assert verdict.blockers == ("other",)
    assert verdict.recheck_at == NOW + timedelta(seconds=50)


def test_a_lower_peer_does_not_pause() -> None:
    assert judge({"me": peer(200, 0), "other": peer(100, 0)}, "me", 200, NOW).active


def test_an_equal_peer_pauses_both_as_kopf_does() -> None:
    status = {"a": peer(100, 0), "b": peer(100, 0)}
    assert not judge(status, "a", 100, NOW).active
    assert not judge(status, "b", 100, NOW).active


def test_a_dead_peer_does_not_pause() -> None:
    assert judge({"other": peer(200, 61)}, "me", 100, NOW).active
    assert not judge({"other": peer(200, 59)}, "me", 100, NOW).active


def test_malformed_entries_are_ignored() -> None:
    status: dict[str, Any] = {"x": "junk", "z": {"lastseen": "never", "priority": 9}}
    assert judge(status, "me", 0, NOW).active


def test_a_peer_without_lastseen_counts_as_seen_now_as_in_kopf() -> None:
    verdict = judge({"y": {"priority": 500}}, "me", 0, NOW)
    assert not verdict.active
    assert verdict.recheck_at == NOW + timedelta(seconds=60)


def test_z_suffixed_and_naive_times_are_utc() -> None:
    status = {"other": {"priority": 9, "lifetime": 60, "lastseen": "2026-11-30T11:59:30Z"}}
    assert not judge(status, "me", 1, NOW).active
    naive = {"other": {"priority": 9, "lifetime": 60, "lastseen": "2026-11-30T11:58:00"}}
    assert judge(naive, "me", 1, NOW).active


def peering_event(status: dict[str, Any], kind: EventType = EventType.MODIFIED) -> WatchEvent:
    body = {"metadata": {"name": "leasehold", "namespace": "ns"}, "status": status}
    return WatchEvent(kind, body)


def test_gate_starts_closed_with_peering_and_follows_the_object() -> None:
    async def scenario() -> list[bool]:
        clock = [NOW]
        gate = ActivityGate("me", 100, "leasehold", standalone=False, clock=lambda: clock[0])
        gate.expect("ns")
        seen = [gate.is_open]
        gate.observe(peering_event({"me": peer(100, 0)}))
        seen.append(gate.is_open)
        gate.observe(peering_event({"me": peer(100, 0), "boss": peer(200, 0)}))
        seen.append(gate.is_open)
        # Another peering object's events are ignored.
        other = WatchEvent(
            EventType.MODIFIED, {"metadata": {"name": "someone-else", "namespace": "ns"}}
        )
        gate.observe(other)
        seen.append(gate.is_open)
        gate.observe(peering_event({"me": peer(100, 0)}))
        seen.append(gate.is_open)
        # The object is deleted: like Kopf, the gate keeps its last verdict.
        gate.observe(peering_event({}, EventType.DELETED))
        seen.append(gate.is_open)
        return seen

    assert asyncio.run(scenario()) == [False, True, False, False, True, True]


def test_gate_reopens_when_the_blocking_peer_dies_without_an_event() -> None:
    async def scenario() -> tuple[bool, bool]:
        clock = [NOW]
        gate = ActivityGate("me", 100, "leasehold", standalone=False, clock=lambda: clock[0])
        gate.expect("ns")
        gate.observe(peering_event({"boss": peer(200, 59.8)}))  # dies in 0.2 s
        before = gate.is_open
        runner = asyncio.create_task(gate.run())
        clock[0] = NOW + timedelta(seconds=0.3)
        await asyncio.wait_for(gate.wait_open(), timeout=2.0)
        runner.cancel()
        return before, gate.is_open

    assert asyncio.run(scenario()) == (False, True)


def test_standalone_gate_is_always_open() -> None:
    async def scenario() -> bool:
        gate = ActivityGate("me", 0, "leasehold", standalone=True)
        gate.observe(peering_event({"boss": peer(200, 0)}))
        return gate.is_open

    assert asyncio.run(scenario())
