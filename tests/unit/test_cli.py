"""`leasehold operator` refuses bad settings with a message naming them."""

from __future__ import annotations

import pytest

from leasehold.cli import main


def test_bad_operator_settings_are_named_and_nothing_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["operator", "-n", "team-*", "--reconcile-workers", "0"])
    assert code == 2
    err = capsys.readouterr().err
    assert "invalid setting namespaces.0" in err
    assert "invalid setting reconcile_workers" in err


def test_an_unknown_log_level_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["operator", "--log-level", "bogus"])
    assert exited.value.code == 2
    assert "invalid choice: 'BOGUS'" in capsys.readouterr().err


def test_a_peering_lifetime_below_kopfs_keepalive_floor_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Kopf touches a peering entry 5-10 s before its lifetime ends: under 15 s
    # a live replica could be judged dead between two keep-alives.
    code = main(["operator", "--peering", "x", "--peering-lifetime-seconds", "5"])
    assert code == 2
    assert "invalid setting peering_lifetime_seconds" in capsys.readouterr().err
