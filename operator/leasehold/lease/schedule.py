"""When a LeasedCronJob's runs are due: pure decisions on an injected clock.

Why this module exists: which schedule time to start now, how many were
missed, whether the most recent one is past ``startingDeadlineSeconds`` and
when to look again are decided here, from the cron job's spec, its
``status.lastScheduleTime`` and a ``now`` the caller passes, so every rule is
tested without waiting (``tests/unit/lease/test_schedule.py``). The rules follow
batch/v1 CronJob's documented behaviour; the operator builds on the decision
(``leasehold.controller.plan.cron``) and carries it out
(``leasehold.controller.act.cron``). Nothing here decides who owns a run:
that is the leases' job (docs/schedules.md).

Cron expressions are evaluated by `cronsim`_: the standard five fields
(minute, hour, day of month, month, day of week, with names, ranges, steps
and lists), in the schedule's IANA time zone (:mod:`zoneinfo`). The
``@yearly``-style macros of CronJob are expanded here (cronsim reads five or
six fields only). Daylight saving time, as Debian cron does it: a time that
does not exist (the hour skipped when clocks spring forward) runs at the
transition; a fixed time that exists twice (when clocks fall back) runs
once, at its first occurrence; a schedule with a wildcard minute or hour
runs at every real occurrence.

.. _cronsim: https://pypi.org/project/cronsim/
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

MACROS: Final = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
"""CronJob's predefined schedules and the five fields each stands for."""

TOO_MANY_MISSED: Final = 100
"""More missed schedule times than this are reported (CronJob reports after 100)."""

MAX_SCHEDULE_LENGTH: Final = 256


class InvalidScheduleError(ValueError):
    """The schedule or time zone cannot be used; the message names the field and why."""


MAX_SKIPPED_TIMES: Final = 1000
"""Times of a fall-back's first pass that :meth:`CronSchedule.next_after` skips at most
(an every-minute schedule repeats 60)."""


@dataclass(frozen=True)
class CronSchedule:
    """A parsed cron schedule in a time zone.

    Attributes:
        expression: the five fields (a macro already expanded).
        zone: the IANA time zone the fields are read in (UTC by default).
    """

    expression: str
    zone: ZoneInfo

    def _iterate(self, start: datetime, *, reverse: bool = False) -> Iterator[datetime]:
        local = start.astimezone(self.zone)
        for tick in CronSim(self.expression, local, reverse=reverse):
            yield tick.astimezone(UTC)

    def next_after(self, moment: datetime) -> datetime:
        """The first schedule time strictly after ``moment``.

        In the hour a fall-back repeats (DST ends), a time of the first pass
        (e.g. 01:30 EDT for ``30 1 * * *``) can come next from the local
        clock's second pass (01:00 EST): it lies in the past and is skipped,
        so a caller that waits until the next time never waits a negative
        time (a hot loop of reconciles for up to an hour).

        Args:
            moment: an aware datetime.

        Returns:
            An aware UTC datetime, later than ``moment``.

        Raises:
            StopIteration: the schedule never fires after ``moment``.
        """
        times = itertools.islice(self._iterate(moment), MAX_SKIPPED_TIMES)
        return next(t for t in times if t > moment)

    def latest_at_or_before(self, moment: datetime) -> datetime | None:
        """The last schedule time at or before ``moment``, or ``None`` if there is none.

        Args:
            moment: an aware datetime.

        Returns:
            An aware UTC datetime, or ``None`` (a schedule such as Feb 30 never fires).
        """
        after = moment.replace(microsecond=0) + timedelta(seconds=1)
        return next(self._iterate(after, reverse=True), None)

    def count_between(self, after: datetime, until: datetime, limit: int) -> int:
        """How many schedule times lie in ``(after, until]``, counting at most ``limit``.

        Args:
            after: exclusive start (aware).
            until: inclusive end (aware).
            limit: stop counting here (a schedule every minute over a year is
                half a million times).

        Returns:
            The count, at most ``limit``.
        """
        times = itertools.takewhile(lambda t: t <= until, self._iterate(after))
        return sum(1 for _ in itertools.islice(times, limit))


def parse(schedule: str, time_zone: str | None = None) -> CronSchedule:
    """Parse ``spec.schedule`` and ``spec.timeZone``.

    Args:
        schedule: five cron fields, or a macro (``@hourly``, ``@daily``, ...).
        time_zone: an IANA name (``Europe/Berlin``); ``None`` is UTC.

    Returns:
        The schedule.

    Raises:
        InvalidScheduleError: the expression or the zone is not valid; the message
            names ``spec.schedule`` or ``spec.timeZone``.
    """
    text = " ".join(schedule.split())
    if len(text) > MAX_SCHEDULE_LENGTH:
        raise InvalidScheduleError(f"spec.schedule is longer than {MAX_SCHEDULE_LENGTH} characters")
    if text.upper().startswith(("TZ=", "CRON_TZ=")):
        raise InvalidScheduleError(
            "spec.schedule may not set a time zone (TZ= or CRON_TZ=): use spec.timeZone"
        )
    if text.startswith("@"):
        expanded = MACROS.get(text.lower())
        if expanded is None:
            raise InvalidScheduleError(
                f"spec.schedule {schedule!r}: unknown macro (one of {', '.join(MACROS)})"
            )
        text = expanded
    if len(text.split()) != 5:
        raise InvalidScheduleError(
            f"spec.schedule {schedule!r}: needs five fields (minute hour day-of-month month"
            " day-of-week) or a macro such as @hourly"
        )
    tz = zone(time_zone)
    try:
        CronSim(text, datetime(2000, 1, 1, tzinfo=tz))
    except CronSimError as exc:
        raise InvalidScheduleError(f"spec.schedule {schedule!r}: {exc}") from exc
    return CronSchedule(text, tz)


def zone(time_zone: str | None) -> ZoneInfo:
    """Read ``spec.timeZone``.

    Args:
        time_zone: an IANA name (``Europe/Berlin``); ``None`` is UTC.

    Returns:
        The zone.

    Raises:
        InvalidScheduleError: no such zone in the IANA database this process
            has (``zoneinfo``); the message names ``spec.timeZone`` (batch/v1
            CronJob's validation says ``unknown time zone`` too).
    """
    if time_zone is None:
        return ZoneInfo("UTC")
    try:
        return ZoneInfo(time_zone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidScheduleError(
            f"spec.timeZone: unknown time zone {json.dumps(time_zone)}"
            " (an IANA name such as Europe/Berlin)"
        ) from exc


@dataclass(frozen=True)
class Due:
    """What to do about a cron job's schedule at ``now``.

    Attributes:
        scheduled_time: the schedule time to start a run for now (the most recent
            one missed), or ``None`` (nothing due, or it is too late).
        missed: schedule times since the last one scheduled (or since creation,
            or since ``now - startingDeadlineSeconds`` if later), up to
            ``TOO_MANY_MISSED + 1``; includes ``scheduled_time``.
        too_many_missed: more than ``TOO_MANY_MISSED`` were missed (reported;
            only the most recent is started, as CronJob does).
        missed_deadline: the most recent schedule time not yet started, when it
            is past ``startingDeadlineSeconds``: it is skipped (not started late).
        next_time: the first schedule time after ``now`` (when to look again),
            or ``None`` if the schedule never fires again.
    """

    scheduled_time: datetime | None
    missed: int
    too_many_missed: bool
    missed_deadline: datetime | None
    next_time: datetime | None


def due(
    schedule: CronSchedule,
    *,
    now: datetime,
    last_schedule_time: datetime | None,
    created: datetime,
    starting_deadline_seconds: int | None = None,
    waiting_time: datetime | None = None,
) -> Due:
    """Decide which schedule time, if any, is due at ``now`` (CronJob's rules).

    The window starts at ``last_schedule_time`` (else ``created``), or at
    ``now - starting_deadline_seconds`` when that is later; the most recent
    schedule time in ``(start, now]`` is due, unless it is more than
    ``starting_deadline_seconds`` old. Older missed times are never started:
    one run catches up for all of them. A schedule time whose run was due in
    time and waits for an earlier run (``waiting_time``: leasehold's
    ``Forbid`` and ``Replace`` wait where CronJob's skip or delete) is not
    judged against the deadline again while it is still the most recent.

    Args:
        schedule: the parsed schedule.
        now: the current time (aware; the operator's wall clock, injected).
        last_schedule_time: ``status.lastScheduleTime``: the last time a run was
            started for.
        created: the cron job's ``metadata.creationTimestamp``.
        starting_deadline_seconds: ``spec.startingDeadlineSeconds``, or ``None``.
        waiting_time: ``status.waitingScheduleTime``: the schedule time whose
            run waits for an earlier one, or ``None``.

    Returns:
        The decision.
    """
    base = last_schedule_time or created
    next_time = _next(schedule, now)
    latest = schedule.latest_at_or_before(now)
    if latest is None or latest <= base:
        return Due(None, 0, False, None, next_time)
    if (
        starting_deadline_seconds is not None
        and latest != waiting_time
        and now - latest > timedelta(seconds=starting_deadline_seconds)
    ):
        return Due(None, 0, False, latest, next_time)
    start = base
    if starting_deadline_seconds is not None:
        start = max(start, now - timedelta(seconds=starting_deadline_seconds))
    missed = max(1, schedule.count_between(start, now, TOO_MANY_MISSED + 1))  # latest counts
    return Due(latest, missed, missed > TOO_MANY_MISSED, None, next_time)


def _next(schedule: CronSchedule, now: datetime) -> datetime | None:
    try:
        return schedule.next_after(now)
    except StopIteration:
        return None


def run_name(cron_name: str, scheduled_time: datetime) -> str:
    """The LeasedJob name of the run for ``scheduled_time``: ``<cron>-<unix minutes>``.

    As CronJob names its Jobs: the same schedule time always gives the same
    name, so a run is created at most once per schedule time (a second
    create is refused with 409).

    Args:
        cron_name: the LeasedCronJob's name.
        scheduled_time: an aware datetime.

    Returns:
        The name.
    """
    return f"{cron_name}-{int(scheduled_time.timestamp()) // 60}"
