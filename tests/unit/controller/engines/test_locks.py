"""One lock per job, alive while it is held or waited for (engines/locks.py)."""

from __future__ import annotations

import threading

from leasehold.controller.engines.locks import JobLocks


def test_one_job_runs_one_at_a_time_and_other_jobs_do_not_wait() -> None:
    locks = JobLocks()
    inside: list[str] = []
    overlap: list[bool] = []
    entered = threading.Event()
    release = threading.Event()

    def hold(name: str, wait: threading.Event | None) -> None:
        with locks.hold("ns", name):
            inside.append(name)
            overlap.append(inside.count(name) > 1)
            entered.set()
            if wait is not None:
                assert wait.wait(5)
            inside.remove(name)

    first = threading.Thread(target=hold, args=("a", release))
    first.start()
    assert entered.wait(5)
    second = threading.Thread(target=hold, args=("a", None))
    second.start()
    with locks.hold("ns", "b"):  # another job: taken while job a is still held
        assert inside == ["a"]
    assert len(locks) == 1  # a is held (and waited for); b's lock is gone
    release.set()
    first.join()
    second.join()
    assert overlap == [False, False]
    assert len(locks) == 0


def test_a_lock_is_dropped_once_no_thread_holds_or_waits_for_it() -> None:
    locks = JobLocks()
    for i in range(100):
        with locks.hold("ns", f"job-{i}"):
            assert len(locks) == 1
    assert len(locks) == 0


def test_a_lock_released_by_an_exception_is_dropped_too() -> None:
    locks = JobLocks()
    try:
        with locks.hold("ns", "a"):
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert len(locks) == 0
    with locks.hold("ns", "a"):  # and can be taken again
        pass
