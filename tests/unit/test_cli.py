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
