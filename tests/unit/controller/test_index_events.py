"""An Indexed job's ``Started`` Events are posted off the step: a failure must still be told."""

from __future__ import annotations

import logging
from concurrent.futures import Future

import pytest

from leasehold.controller.act.indexed import _log_untold


def test_an_event_post_that_broke_off_the_step_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    told: Future[None] = Future()
    told.set_exception(ConnectionResetError("peer reset"))
    with caplog.at_level(logging.WARNING, logger="leasehold.controller.act.indexed"):
        _log_untold(told)
    assert "could not record an Event: ConnectionResetError: peer reset" in caplog.text


def test_an_event_posted_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    told: Future[None] = Future()
    told.set_result(None)
    with caplog.at_level(logging.WARNING, logger="leasehold.controller.act.indexed"):
        _log_untold(told)
    assert caplog.text == ""
