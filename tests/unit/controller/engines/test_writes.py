"""The operator skips the watch event of a version it wrote itself, once."""

from __future__ import annotations

from leasehold.controller.engines.writes import OwnWrites


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
