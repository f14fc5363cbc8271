"""Elapsed time of jobs: API server clocks at first sight, the monotonic clock after."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from leasehold.controller.engines.deadline import JobClocks

CREATED = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_first_sight_anchors_on_the_servers_clock_then_counts_monotonic() -> None:
    mono = Clock()
    clocks = JobClocks(mono)
    assert clocks.elapsed_seconds("ns/a", "u1", CREATED, CREATED + timedelta(seconds=7)) == 7
    mono.now += 5
    # Later server times are ignored: a server clock jump changes nothing.
    assert clocks.elapsed_seconds("ns/a", "u1", CREATED, CREATED + timedelta(days=1)) == 12


def test_a_recreated_job_counts_from_its_own_creation() -> None:
    mono = Clock()
    clocks = JobClocks(mono)
    clocks.elapsed_seconds("ns/a", "u1", CREATED, CREATED + timedelta(seconds=30))
    later = CREATED + timedelta(seconds=40)
    assert clocks.elapsed_seconds("ns/a", "u2", later, later + timedelta(seconds=1)) == 1


def test_unknown_server_time_counts_from_now_never_early() -> None:
    mono = Clock()
    clocks = JobClocks(mono)
    assert clocks.elapsed_seconds("ns/a", "u1", CREATED, None) == 0
    mono.now += 3
    assert clocks.elapsed_seconds("ns/a", "u1", CREATED, None) == 3
    clocks.forget("ns/a")
    assert clocks.elapsed_seconds("ns/a", "u1", CREATED, CREATED + timedelta(seconds=9)) == 9
