"""Unit tests of the operator's expiry judge, :class:`ExpiryClock`, on a fake monotonic clock."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leasehold.controller.engines.expiry import ExpiryClock

KEY = "ns/job"
DURATION = 30.0
MARGIN = 5.0


class FakeMonotonic:
    """A monotonic clock that moves only when the test says so."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        assert seconds >= 0
        self.now += seconds


@pytest.fixture
def clock() -> FakeMonotonic:
    return FakeMonotonic(start=1000.0)


@pytest.fixture
def expiry(clock: FakeMonotonic) -> ExpiryClock:
    return ExpiryClock(MARGIN, clock)


def test_not_expired_before_duration_plus_margin(clock: FakeMonotonic, expiry: ExpiryClock) -> None:
    assert expiry.observe(KEY, "v1") == 1000.0
    assert not expiry.is_expired(KEY, "v1", DURATION)
    clock.advance(DURATION)  # the duration alone is not enough: the margin counts too
    assert not expiry.is_expired(KEY, "v1", DURATION)
    assert expiry.remaining_seconds(KEY, "v1", DURATION) == MARGIN
    clock.advance(MARGIN - 0.5)
    assert not expiry.is_expired(KEY, "v1", DURATION)
    clock.advance(0.5)
    assert expiry.is_expired(KEY, "v1", DURATION)
    assert expiry.remaining_seconds(KEY, "v1", DURATION) == 0.0
    clock.advance(7)
    assert expiry.is_expired(KEY, "v1", DURATION)
    assert expiry.remaining_seconds(KEY, "v1", DURATION) == -7.0


def test_first_judgement_counts_as_first_sight(clock: FakeMonotonic, expiry: ExpiryClock) -> None:
    assert expiry.remaining_seconds(KEY, "v1", DURATION) == DURATION + MARGIN
    clock.advance(DURATION + MARGIN - 1)
    assert not expiry.is_expired(KEY, "v1", DURATION)
    clock.advance(1)
    assert expiry.is_expired(KEY, "v1", DURATION)


def test_same_version_seen_again_does_not_restart(
    clock: FakeMonotonic, expiry: ExpiryClock
) -> None:
    expiry.observe(KEY, "v1")
    clock.advance(20)
    assert expiry.observe(KEY, "v1") == 1000.0
    clock.advance(DURATION + MARGIN - 20)
    assert expiry.is_expired(KEY, "v1", DURATION)


def test_new_version_restarts_the_window(clock: FakeMonotonic, expiry: ExpiryClock) -> None:
    expiry.observe(KEY, "v1")
    clock.advance(DURATION + MARGIN)
    assert expiry.is_expired(KEY, "v1", DURATION)
    assert not expiry.is_expired(KEY, "v2", DURATION)  # a renewal landed: a fresh window
    assert expiry.remaining_seconds(KEY, "v2", DURATION) == DURATION + MARGIN
    clock.advance(DURATION + MARGIN - 1)
    assert not expiry.is_expired(KEY, "v2", DURATION)
    assert expiry.observe(KEY, "v3") == clock.now  # seen via observe, restarts too
    clock.advance(2)
    assert not expiry.is_expired(KEY, "v3", DURATION)
    clock.advance(DURATION + MARGIN)
    assert expiry.is_expired(KEY, "v3", DURATION)


def test_keys_are_judged_independently(clock: FakeMonotonic, expiry: ExpiryClock) -> None:
    expiry.observe("ns/a", "v1")
    clock.advance(DURATION)
    expiry.observe("ns/b", "v1")
    clock.advance(MARGIN)
    assert expiry.is_expired("ns/a", "v1", DURATION)
    assert not expiry.is_expired("ns/b", "v1", DURATION)


@pytest.mark.parametrize("huge", [1e6, 1e9, 1e12])
def test_restarted_operator_never_reclaims_on_first_sight(huge: float) -> None:
    old_clock = FakeMonotonic(start=0.0)
    old = ExpiryClock(MARGIN, old_clock)
    old.observe(KEY, "v1")
    old_clock.advance(huge)
    assert old.is_expired(KEY, "v1", DURATION)
    # The operator restarts: the new process's monotonic clock reads something unrelated.
    new_clock = FakeMonotonic(start=huge)
    new = ExpiryClock(MARGIN, new_clock)
    assert not new.is_expired(KEY, "v1", DURATION)
    assert new.remaining_seconds(KEY, "v1", DURATION) == DURATION + MARGIN
    new_clock.advance(DURATION + MARGIN - 1)
    assert not new.is_expired(KEY, "v1", DURATION)
    new_clock.advance(1)
    assert new.is_expired(KEY, "v1", DURATION)


@settings(max_examples=200, deadline=None)
@given(
    start=st.floats(min_value=0, max_value=1e9, allow_nan=False, allow_infinity=False),
    duration=st.integers(min_value=1, max_value=3600),
    margin=st.floats(min_value=0, max_value=120, allow_nan=False, allow_infinity=False),
)
def test_fresh_clock_never_expires_on_first_sight(
    start: float, duration: int, margin: float
) -> None:
    expiry = ExpiryClock(margin, FakeMonotonic(start))
    assert not expiry.is_expired(KEY, "v-any", duration)
    assert expiry.remaining_seconds(KEY, "v-any", duration) > 0


def test_forget_drops_what_was_seen(clock: FakeMonotonic, expiry: ExpiryClock) -> None:
    expiry.observe(KEY, "v1")
    expiry.observe("ns/other", "v1")
    clock.advance(DURATION + MARGIN)
    expiry.forget(KEY)
    # Seen again (e.g. re-created with the same version string): counts from now.
    assert not expiry.is_expired(KEY, "v1", DURATION)
    assert expiry.remaining_seconds(KEY, "v1", DURATION) == DURATION + MARGIN
    assert expiry.is_expired("ns/other", "v1", DURATION)  # other keys are kept
    expiry.forget("ns/never-seen")  # forgetting an unknown key is harmless


def test_negative_margin_is_refused(clock: FakeMonotonic) -> None:
    with pytest.raises(ValueError, match="margin_seconds"):
        ExpiryClock(-0.001, clock)
    zero = ExpiryClock(0, clock)
    zero.observe(KEY, "v1")
    clock.advance(DURATION)
    assert zero.is_expired(KEY, "v1", DURATION)


# Steps of (seconds to advance, whether the lease changed version). Seconds are
# multiples of 1/4, so every sum is exact in binary floating point and the
# boundary (elapsed == duration + margin) is hit exactly, not within rounding;
# ``None`` advances exactly to that boundary, so it is reached often.
quarters = st.integers(min_value=0, max_value=200).map(lambda q: q / 4)
steps = st.lists(st.tuples(st.none() | quarters, st.booleans()), min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(
    start=quarters,
    duration=st.integers(min_value=1, max_value=60),
    margin=quarters,
    steps=steps,
    use_observe=st.booleans(),
)
def test_expired_iff_unchanged_for_duration_plus_margin(
    start: float,
    duration: int,
    margin: float,
    steps: list[tuple[float | None, bool]],
    use_observe: bool,
) -> None:
    clock = FakeMonotonic(start)
    expiry = ExpiryClock(margin, clock)
    version = 0
    last_change = clock.now
    expiry.observe(KEY, f"v{version}")
    for advance, changed in steps:
        to_edge = max(0.0, duration + margin - (clock.now - last_change))
        clock.advance(to_edge if advance is None else advance)
        if changed:
            version += 1
            last_change = clock.now
            if use_observe:  # the watch saw it before the judgement
                assert expiry.observe(KEY, f"v{version}") == last_change
        elapsed = clock.now - last_change
        remaining = expiry.remaining_seconds(KEY, f"v{version}", duration)
        assert remaining == duration + margin - elapsed
        assert expiry.is_expired(KEY, f"v{version}", duration) == (elapsed >= duration + margin)


def test_a_reader_beside_the_watch_never_restarts_its_clock(
    clock: FakeMonotonic, expiry: ExpiryClock
) -> None:
    """A take-over's wait that reads a stale version does not postpone the watch's reclaim."""
    expiry.observe(KEY, "v2")  # the watch saw v2
    clock.advance(DURATION)
    # A reconcile holding the older v1 (a stale cache) waits the full window...
    assert expiry.remaining_if_seen(KEY, "v1", DURATION) == DURATION + MARGIN
    # ...and v2's clock runs on from its first sight, unchanged.
    assert expiry.remaining_if_seen(KEY, "v2", DURATION) == MARGIN
    clock.advance(MARGIN)
    assert expiry.is_expired(KEY, "v2", DURATION)
    # A lease the watch has not delivered yet is noted at first sight, as before.
    assert expiry.remaining_if_seen("ns/new", "v1", DURATION) == DURATION + MARGIN
    clock.advance(1.0)
    assert expiry.remaining_if_seen("ns/new", "v1", DURATION) == DURATION + MARGIN - 1.0
