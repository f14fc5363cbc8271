"""The start-up line of ``leasehold run``: each step's seconds, the counts, parsed back."""

from __future__ import annotations

from leasehold.worker.startup import StartupClock, parse_line, process_age_seconds


def test_the_line_gives_each_step_from_the_process_start_and_parses_back() -> None:
    now = iter([10.0, 10.2, 10.25, 10.75, 10.8])
    clock = StartupClock(9.95, monotonic=lambda: next(now), age=0.1)  # started at 9.9
    for step in ("imports", "environment", "confirm", "child"):
        clock.mark(step)
    clock.count("tries", 2)
    clock.count("reads", 3)
    line = clock.line()
    assert line == (
        "start-up (s): process=0.050 imports=0.250 environment=0.050 confirm=0.500"
        " child=0.050 tries=2 reads=3 total=0.900"
    )
    values = parse_line(f"2026-12-05 01:00:00,000 leasehold run[7] INFO {line}\nother\n")
    assert values == {
        "process": 0.05,
        "imports": 0.25,
        "environment": 0.05,
        "confirm": 0.5,
        "child": 0.05,
        "tries": 2.0,
        "reads": 3.0,
        "total": 0.9,
    }


def test_without_the_process_start_the_steps_after_main_are_still_given() -> None:
    now = iter([1.0, 1.5])
    clock = StartupClock(0.9, monotonic=lambda: next(now), age=None)
    clock.started_at = None
    clock.mark("imports")
    assert clock.line() == "start-up (s): imports=0.600"
    assert parse_line("no such line") is None


def test_this_process_has_an_age() -> None:
    age = process_age_seconds()
    assert age is not None and 0 <= age < 24 * 3600
