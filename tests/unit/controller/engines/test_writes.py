"""What the operator wrote: its own versions (skipped once), its status writes' times."""

from __future__ import annotations

from leasehold.controller.engines.writes import OwnWrites, StatusWriteClock


def test_own_version_is_recognised_once() -> None:
    own = OwnWrites()
    own.record("JobLease", "ns", "a", "41")
    assert not own.is_own("JobLease", "ns", "a", "40")  # someone else's version
    assert not own.is_own("LeasedJob", "ns", "a", "41")  # another kind
    assert not own.is_own("JobLease", "other", "a", "41")  # another namespace
    assert own.is_own("JobLease", "ns", "a", "41")
    assert not own.is_own("JobLease", "ns", "a", "41")  # forgotten after the match


def test_a_later_write_replaces_the_earlier_version() -> None:
    own = OwnWrites()
    own.record("JobLease", "ns", "a", "41")
    own.record("JobLease", "ns", "a", "45")
    assert not own.is_own("JobLease", "ns", "a", "41")
    assert own.is_own("JobLease", "ns", "a", "45")


def test_missing_versions_never_match() -> None:
    own = OwnWrites()
    own.record("JobLease", "ns", "a", "")
    assert not own.is_own("JobLease", "ns", "a", "")
    assert not own.is_own("JobLease", "ns", "a", None)


def test_a_count_may_wait_out_the_interval_since_the_last_write_only() -> None:
    clock = StatusWriteClock(1.0)
    assert clock.wait_left("ns", "job", 100.0) == 0.0  # nothing written here yet
    clock.wrote("ns", "job", 100.0)
    assert clock.wait_left("ns", "job", 100.25) == 0.75
    assert clock.wait_left("ns", "other", 100.25) == 0.0
    assert clock.wait_left("ns", "job", 101.5) == 0.0
    clock.forget("ns", "job")
    assert clock.wait_left("ns", "job", 100.25) == 0.0
    assert StatusWriteClock(0.0).wait_left("ns", "job", 0.0) == 0.0
