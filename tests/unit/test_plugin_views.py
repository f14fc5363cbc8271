"""The views of ``kubectl leasehold``: ages, lease states, tables (no cluster)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from leasehold.plugin import views

NOW = datetime(2026, 12, 4, 12, 0, 0, tzinfo=UTC)


def ago(seconds: float) -> str:
    return (NOW - timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0, "0s"),
        (45, "45s"),
        (119, "119s"),
        (192, "3m12s"),
        (900, "15m"),
        (7500, "2h5m"),
        (40000, "11h"),
        (3 * 86400, "3d"),
        (-30, "0s"),
    ],
)
def test_age_is_printed_as_kubectl_prints_ages(seconds: int, shown: str) -> None:
    assert views.age(ago(seconds), NOW) == shown


def test_age_of_no_time_is_none() -> None:
    assert views.age(None, NOW) is None
    assert views.age("not a time", NOW) is None


@pytest.mark.parametrize(
    ("spec", "state"),
    [
        ({"fencingToken": 2, "holderIdentity": "p", "maxFencingToken": 4}, "Held"),
        ({"fencingToken": 2, "maxFencingToken": 4}, "Open"),
        ({"fencingToken": 2, "maxFencingToken": 2}, "Stopped"),
        ({"fencingToken": 2, "maxFencingToken": 4, "suspended": True}, "Suspended"),
        ({"fencingToken": 2, "completion": {"outcome": "Failed"}}, "Failed"),
    ],
)
def test_lease_state_says_whether_a_claim_can_land(spec: dict[str, object], state: str) -> None:
    assert views.lease_state({"spec": spec}) == state


def job(**status: object) -> dict[str, object]:
    return {
        "metadata": {"name": "etl", "labels": {views.QUEUE_LABEL: "team-a"}},
        "spec": {"leaseDurationSeconds": 30},
        "status": {"phase": "Running", "leaseName": "etl", "attempts": 2, **status},
    }


def test_status_row_takes_holder_and_token_from_the_lease_not_the_job() -> None:
    lease = {
        "metadata": {"name": "etl"},
        "spec": {
            "holderIdentity": "etl-3",
            "fencingToken": 3,
            "renewTime": ago(4),
            "leaseDurationSeconds": 30,
        },
    }
    [row] = views.status_rows(job(holderIdentity="etl-2", fencingToken=2), lease, NOW)
    assert (row["HOLDER"], row["TOKEN"], row["RENEWED"], row["ATTEMPTS"]) == ("etl-3", 3, "4s", 2)
    assert row["QUEUE"] == "team-a"


def test_status_row_says_whether_the_workload_is_admitted() -> None:
    admitted = {"status": {"conditions": [{"type": "Admitted", "status": "True"}]}}
    pending = {"status": {"conditions": [{"type": "QuotaReserved", "status": "False"}]}}
    assert views.status_rows(job(), None, NOW, admitted)[0]["QUEUE"] == "team-a (admitted)"
    assert views.status_rows(job(), None, NOW, pending)[0]["QUEUE"] == "team-a (pending)"


def test_status_row_says_where_a_queued_job_stands_with_kueue() -> None:
    def workload(*true: tuple[str, str], admission: object = None) -> dict[str, object]:
        st: dict[str, object] = {
            "conditions": [{"type": t, "status": "True", "reason": r} for t, r in true]
        }
        if admission is not None:
            st["admission"] = admission
        return {"status": st}

    admitted = workload(("Admitted", "Admitted"), admission={"clusterQueue": "cq"})
    preempted = workload(("Admitted", "Admitted"), ("Evicted", "Preempted"))
    finished = workload(("Finished", "Succeeded"))
    rows = {
        name: views.status_rows(job(), None, NOW, wl)[0]["QUEUE"]
        for name, wl in (("a", admitted), ("p", preempted), ("f", finished))
    }
    assert rows == {
        "a": "team-a (admitted by cq)",
        "p": "team-a (evicted: Preempted)",
        "f": "team-a (finished: Succeeded)",
    }
    gated = job(conditions=[{"type": "Suspended", "status": "True", "reason": "Preempted"}])
    assert views.status_rows(gated, None, NOW, preempted)[0]["SUSPENDED"] is True


def test_history_marks_the_running_attempt() -> None:
    rows = views.history_rows(
        job(
            attemptHistory=[
                {"fencingToken": 1, "podName": "etl-1", "endTime": ago(9), "reason": "Reclaimed"},
                {"fencingToken": 2, "podName": "etl-2"},
            ]
        )
    )
    assert [(r["TOKEN"], r["REASON"]) for r in rows] == [(1, "Reclaimed"), (2, "Running")]


def test_token_rows_are_ordered_by_index() -> None:
    leases = [
        {
            "metadata": {"name": f"j.{i}", "labels": {"leasehold.dev/completion-index": str(i)}},
            "spec": {"fencingToken": 1},
        }
        for i in (10, 2, 0)
    ]
    assert [r["INDEX"] for r in views.token_rows(leases, NOW)] == [0, 2, 10]


def test_render_table_json_and_yaml() -> None:
    rows: list[views.Row] = [{"A": "x", "B": None, "C": True}, {"A": "longer", "B": 7, "C": False}]
    table = views.render(rows, ("A", "B"), None)
    assert table.splitlines() == ["A        B", "x        <none>", "longer   7"]
    assert json.loads(views.render(rows, ("A",), "json")) == rows
    assert yaml.safe_load(views.render(rows, ("A",), "yaml")) == rows
    assert views.render([], ("A",), "wide") == "No resources found.\n"
    with pytest.raises(ValueError, match="unknown output format"):
        views.render(rows, ("A",), "toml")
