"""The schedule decisions of a LeasedCronJob, on an injected clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leasehold.lease import schedule
from leasehold.lease.schedule import InvalidScheduleError, due, parse, run_name


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


# -- parsing ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("*/15 * * * *", utc(2026, 1, 1, 10, 7), utc(2026, 1, 1, 10, 15)),
        ("0 9 * * MON-FRI", utc(2026, 1, 2, 10, 0), utc(2026, 1, 5, 9, 0)),  # Fri -> Mon
        ("0 0 1 jan *", utc(2026, 1, 1, 0, 0), utc(2027, 1, 1, 0, 0)),
        ("@hourly", utc(2026, 1, 1, 10, 0), utc(2026, 1, 1, 11, 0)),
        ("@daily", utc(2026, 1, 1, 10, 0), utc(2026, 1, 2, 0, 0)),
        ("@midnight", utc(2026, 1, 1, 10, 0), utc(2026, 1, 2, 0, 0)),
        ("@weekly", utc(2026, 1, 1, 10, 0), utc(2026, 1, 4, 0, 0)),  # Sunday
        ("@monthly", utc(2026, 1, 1, 10, 0), utc(2026, 2, 1, 0, 0)),
        ("@yearly", utc(2026, 1, 1, 10, 0), utc(2027, 1, 1, 0, 0)),
        ("@annually", utc(2026, 1, 1, 10, 0), utc(2027, 1, 1, 0, 0)),
    ],
)
def test_standard_fields_and_macros(expression: str, after: datetime, expected: datetime) -> None:
    assert parse(expression).next_after(after) == expected


@pytest.mark.parametrize(
    ("expression", "time_zone", "field"),
    [
        ("* * * *", None, "spec.schedule"),
        ("0 * * * * *", None, "spec.schedule"),  # seconds are not CronJob syntax
        ("61 * * * *", None, "spec.schedule"),
        ("0 0 30 2 *", None, "spec.schedule"),  # never fires
        ("@every 5m", None, "spec.schedule"),
        ("@reboot", None, "spec.schedule"),
        ("TZ=UTC 0 * * * *", None, "spec.timeZone"),
        ("0 * * * *", "Mars/Olympus_Mons", "spec.timeZone"),
        ("0 * * * *", "../etc/passwd", "spec.timeZone"),
    ],
)
def test_invalid_schedules_are_refused_naming_the_field(
    expression: str, time_zone: str | None, field: str
) -> None:
    with pytest.raises(InvalidScheduleError, match=field.replace(".", r"\.")):
        parse(expression, time_zone)


# -- what is due --------------------------------------------------------------

EVERY_MINUTE = parse("* * * * *")
CREATED = utc(2026, 1, 1, 10, 0, 30)


def test_nothing_is_due_before_the_first_schedule_time() -> None:
    d = due(EVERY_MINUTE, now=utc(2026, 1, 1, 10, 0, 59), last_schedule_time=None, created=CREATED)
    assert (d.scheduled_time, d.missed, d.next_time) == (None, 0, utc(2026, 1, 1, 10, 1))


def test_the_schedule_time_is_due_at_that_time_and_then_not_again() -> None:
    now = utc(2026, 1, 1, 10, 1)
    d = due(EVERY_MINUTE, now=now, last_schedule_time=None, created=CREATED)
    assert (d.scheduled_time, d.missed, d.too_many_missed) == (now, 1, False)
    again = due(
        EVERY_MINUTE, now=now + timedelta(seconds=30), last_schedule_time=now, created=CREATED
    )
    assert again.scheduled_time is None
    assert again.next_time == utc(2026, 1, 1, 10, 2)


def test_missed_runs_start_once_at_the_most_recent_time() -> None:
    # The operator was down from 10:01 to 10:04:10: three times missed, one run.
    d = due(
        EVERY_MINUTE,
        now=utc(2026, 1, 1, 10, 4, 10),
        last_schedule_time=utc(2026, 1, 1, 10, 1),
        created=CREATED,
    )
    assert (d.scheduled_time, d.missed, d.too_many_missed) == (utc(2026, 1, 1, 10, 4), 3, False)


def test_more_than_a_hundred_missed_times_are_reported_and_the_latest_still_starts() -> None:
    now = utc(2026, 1, 1, 13, 0, 5)
    d = due(EVERY_MINUTE, now=now, last_schedule_time=utc(2026, 1, 1, 10, 1), created=CREATED)
    assert d.too_many_missed and d.missed == schedule.TOO_MANY_MISSED + 1
    assert d.scheduled_time == utc(2026, 1, 1, 13, 0)
    hundred = due(
        EVERY_MINUTE,
        now=utc(2026, 1, 1, 11, 41),
        last_schedule_time=utc(2026, 1, 1, 10, 1),
        created=CREATED,
    )
    assert (hundred.missed, hundred.too_many_missed) == (100, False)


def test_a_starting_deadline_skips_a_time_too_old_to_start() -> None:
    last = utc(2026, 1, 1, 10, 0)
    hourly = parse("@hourly")
    on_time = due(
        hourly,
        now=utc(2026, 1, 1, 11, 0, 50),
        last_schedule_time=last,
        created=CREATED,
        starting_deadline_seconds=60,
    )
    assert on_time.scheduled_time == utc(2026, 1, 1, 11, 0)
    late = due(
        hourly,
        now=utc(2026, 1, 1, 11, 1, 1),
        last_schedule_time=last,
        created=CREATED,
        starting_deadline_seconds=60,
    )
    assert late.scheduled_time is None
    assert late.missed_deadline == utc(2026, 1, 1, 11, 0)
    assert late.next_time == utc(2026, 1, 1, 12, 0)


def test_a_time_that_waits_for_an_earlier_run_is_not_skipped_by_the_deadline() -> None:
    # Issue 27, case 7: due in time, then waiting (Forbid, Replace) past the deadline.
    last = utc(2026, 1, 1, 10, 0)
    hourly = parse("@hourly")
    waiting = due(
        hourly,
        now=utc(2026, 1, 1, 11, 1, 1),
        last_schedule_time=last,
        created=CREATED,
        starting_deadline_seconds=60,
        waiting_time=utc(2026, 1, 1, 11, 0),
    )
    assert (waiting.scheduled_time, waiting.missed_deadline) == (utc(2026, 1, 1, 11, 0), None)
    # A later time is due: the waiting one is not the latest any more; the deadline applies.
    superseded = due(
        hourly,
        now=utc(2026, 1, 1, 12, 1, 1),
        last_schedule_time=last,
        created=CREATED,
        starting_deadline_seconds=60,
        waiting_time=utc(2026, 1, 1, 11, 0),
    )
    assert superseded.scheduled_time is None
    assert superseded.missed_deadline == utc(2026, 1, 1, 12, 0)


def test_a_starting_deadline_bounds_the_missed_count() -> None:
    # Hours of missed minutes, only the four within the deadline (12:57..13:00) count: no report.
    d = due(
        EVERY_MINUTE,
        now=utc(2026, 1, 1, 13, 0, 5),
        last_schedule_time=utc(2026, 1, 1, 10, 1),
        created=CREATED,
        starting_deadline_seconds=200,
    )
    assert (d.scheduled_time, d.missed, d.too_many_missed) == (utc(2026, 1, 1, 13, 0), 4, False)


# -- time zones and daylight saving time ----------------------------------------


def test_the_fields_are_read_in_the_time_zone() -> None:
    nine_berlin = parse("0 9 * * *", "Europe/Berlin")
    assert nine_berlin.next_after(utc(2026, 1, 10)) == utc(2026, 1, 10, 8, 0)  # CET, UTC+1
    assert nine_berlin.next_after(utc(2026, 7, 10)) == utc(2026, 7, 10, 7, 0)  # CEST, UTC+2


def runs(expression: str, zone: str, start: datetime, end: datetime) -> list[datetime]:
    """Every run the decision starts between start and end, minute by minute."""
    sched = parse(expression, zone)
    started: list[datetime] = []
    last: datetime | None = None
    now = start
    while now <= end:
        d = due(sched, now=now, last_schedule_time=last, created=start)
        if d.scheduled_time is not None:
            started.append(d.scheduled_time)
            last = d.scheduled_time
        now += timedelta(minutes=1)
    return started


def test_spring_forward_runs_a_skipped_time_at_the_transition_once() -> None:
    # New York, 2026-03-08: 02:00 EST becomes 03:00 EDT (07:00 UTC); 02:30 never exists.
    start, end = utc(2026, 3, 7, 12), utc(2026, 3, 9, 12)
    assert runs("30 2 * * *", "America/New_York", start, end) == [
        utc(2026, 3, 8, 7, 0),  # at the transition, 03:00 EDT
        utc(2026, 3, 9, 6, 30),  # 02:30 EDT
    ]
    # Hourly: 01:00 EST (06:00 UTC) then 03:00 EDT (07:00 UTC), one hour apart.
    hourly = runs("0 * * * *", "America/New_York", utc(2026, 3, 8, 5, 30), utc(2026, 3, 8, 8, 30))
    assert hourly == [utc(2026, 3, 8, 6), utc(2026, 3, 8, 7), utc(2026, 3, 8, 8)]


def test_fall_back_runs_a_fixed_time_once_and_an_hourly_schedule_every_hour() -> None:
    # New York, 2026-11-01: 02:00 EDT becomes 01:00 EST; 01:30 happens twice.
    start, end = utc(2026, 10, 31, 12), utc(2026, 11, 2, 12)
    assert runs("30 1 * * *", "America/New_York", start, end) == [
        utc(2026, 11, 1, 5, 30),  # 01:30 EDT, the first one
        utc(2026, 11, 2, 6, 30),  # 01:30 EST
    ]
    hourly = runs("0 * * * *", "America/New_York", utc(2026, 11, 1, 4, 30), utc(2026, 11, 1, 7, 30))
    # 00:00 EDT, 01:00 EDT, 01:00 EST, 02:00 EST: every real hour.
    assert hourly == [utc(2026, 11, 1, 5), utc(2026, 11, 1, 6), utc(2026, 11, 1, 7)]


# -- properties ------------------------------------------------------------------


@given(
    expression=st.sampled_from(["* * * * *", "*/7 * * * *", "0 * * * *", "30 2 * * *", "@daily"]),
    zone=st.sampled_from(["UTC", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe"]),
    minutes_since_last=st.integers(min_value=0, max_value=3 * 24 * 60),
    seconds=st.integers(min_value=0, max_value=59),
    deadline=st.one_of(st.none(), st.integers(min_value=1, max_value=7200)),
)
def test_a_due_time_lies_after_the_last_one_and_not_in_the_future(
    expression: str, zone: str, minutes_since_last: int, seconds: int, deadline: int | None
) -> None:
    last = utc(2026, 3, 6, 0, 0)
    now = last + timedelta(minutes=minutes_since_last, seconds=seconds)
    d = due(
        parse(expression, zone),
        now=now,
        last_schedule_time=last,
        created=last,
        starting_deadline_seconds=deadline,
    )
    if d.scheduled_time is not None:
        assert last < d.scheduled_time <= now
        assert d.missed >= 1
        if deadline is not None:
            assert now - d.scheduled_time <= timedelta(seconds=deadline)
    assert d.next_time is None or d.next_time > now


def test_a_run_is_named_after_its_schedule_time_in_unix_minutes() -> None:
    assert run_name("nightly", utc(2026, 1, 1, 10, 1)) == "nightly-29454361"


@pytest.mark.parametrize("expression", ["30 1 * * *", "45 1 * * *", "0,30 1,2 * * *", "* * * * *"])
def test_next_time_is_never_in_the_past_in_a_fall_back_hour(expression: str) -> None:
    """Issue 27, case 5: a fall-back hour gives no next time in the past.

    In New York's repeated hour (2026-11-01, 01:00-02:00 local twice) the next
    time of a 01:30 schedule was 01:30 EDT, already past; the cron job's
    requeue went negative and it was reconciled in a loop.
    """
    sched = schedule.parse(expression, "America/New_York")
    start = datetime(2026, 11, 1, 4, 0, tzinfo=UTC)  # 00:00 EDT
    for minute in range(0, 240):
        now = start + timedelta(minutes=minute, seconds=7)
        following = sched.next_after(now)
        assert following > now, (now, following)
        decided = schedule.due(sched, now=now, last_schedule_time=now, created=start)
        assert decided.next_time is not None and decided.next_time > now
