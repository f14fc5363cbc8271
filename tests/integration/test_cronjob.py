"""LeasedCronJob on the real API server, with the pod runner and a one-minute schedule.

Every schedule here is ``* * * * *``. To spare the wait for the first minute,
the operator runs under libfaketime with its wall clock a constant offset
ahead (a skewed clock, nothing faster): the test starts just after a minute
boundary of the operator's clock, so the first run is due at once (the
schedule time lies after the cron job's creation) and the second comes a real
minute later. Lease expiry is judged on the operator's monotonic clock as
always. A test with a second run takes about a minute; the file about six.
"""

from __future__ import annotations

import json
import secrets
import shlex
import time
from collections.abc import Iterable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest
from kubernetes import client
from psycopg import sql
from psycopg.conninfo import make_conninfo

from leasehold import names
from leasehold.fencing import StaleToken
from leasehold.fencing.postgres import fence, install
from leasehold.lease.errors import LeaseNotFoundError
from leasehold.lease.indexes import index_lease_name
from leasehold.lease.protocol import LeaseRecord, Outcome
from leasehold.lease.store import LeaseStore, Rejected, reclaim_note
from operatorproc import OperatorProcess
from podrunner import PodRunner
from tests.integration.jobs import condition_true, events, renewed, run, wait_for
from tests.integration.test_failure_policy import evict

G, V = names.GROUP, names.VERSION
FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
LEAD_SECONDS = 20
"""The first minute boundary of the operator's clock is at least this far off in real time."""


class Clock:
    """The operator's wall clock: real time plus a whole number of seconds."""

    def __init__(self) -> None:
        now = time.time()
        # The next real minute boundary at least LEAD_SECONDS away, then 2 s past it.
        boundary = (int(now) // 60 + 1) * 60
        if boundary - now < LEAD_SECONDS:
            boundary += 60
        self.offset = int(boundary - now) + 2

    def now(self) -> float:
        return time.time() + self.offset

    def wait_until_second(self, second: int) -> None:
        """Sleep until the operator's clock shows ``second`` past the minute."""
        while int(self.now()) % 60 < second:
            time.sleep(0.2)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def operator_ahead(
    crds_installed: Path, namespace: str, tmp_path: Path, worker_rbac: None, clock: Clock
) -> Iterator[OperatorProcess]:
    assert FAKETIME_LIB.exists(), "libfaketime is needed to set the operator's clock ahead"
    proc = OperatorProcess(
        crds_installed,
        namespace,
        tmp_path / "operator.log",
        env={"LD_PRELOAD": str(FAKETIME_LIB), "FAKETIME": f"+{clock.offset}"},
    )
    try:
        proc.start()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    yield proc
    proc.stop()


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[str]:
    """A DSN whose ``search_path`` is a fresh schema with the fence's tables."""
    schema = f"cron_{secrets.token_hex(4)}"
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    dsn = make_conninfo(postgres_dsn, options=f"-c search_path={schema}")
    with psycopg.connect(dsn) as conn:
        install(conn)
        conn.execute("CREATE TABLE report (key text PRIMARY KEY, value text NOT NULL)")
        conn.execute("INSERT INTO report VALUES ('daily', 'none')")
    yield dsn
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def write_report(dsn: str, token: int, value: str) -> None:
    """A fenced write: the fence and the effect in one transaction."""
    with psycopg.connect(dsn) as conn, conn.transaction():
        fence(conn, "report/daily", token)
        conn.execute("UPDATE report SET value = %s WHERE key = 'daily'", (value,))


def report(dsn: str) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT value FROM report WHERE key = 'daily'").fetchone()
    assert row is not None
    return str(row[0])


def create_cron(
    api: client.ApiClient,
    namespace: str,
    name: str,
    command: str,
    *,
    lease_seconds: int = 20,
    max_attempts: int = 3,
    job_spec: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    body = {
        "apiVersion": names.API_VERSION,
        "kind": "LeasedCronJob",
        "metadata": {"name": name},
        "spec": {
            "schedule": "* * * * *",
            **spec,
            "jobTemplate": {
                "metadata": {"labels": {"team": "tests"}},
                "spec": {
                    "leaseDurationSeconds": lease_seconds,
                    "maxAttempts": max_attempts,
                    **(job_spec or {}),
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "worker",
                                    "image": "local",
                                    "command": ["sh", "-c", command],
                                }
                            ]
                        }
                    },
                },
            },
        },
    }
    created: Any = client.CustomObjectsApi(api).create_namespaced_custom_object(
        G, V, namespace, names.PLURAL_LEASED_CRON_JOBS, body
    )
    return dict(created)


def patch_cron(api: client.ApiClient, namespace: str, name: str, spec: dict[str, Any]) -> None:
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        G, V, namespace, names.PLURAL_LEASED_CRON_JOBS, name, {"spec": spec}
    )


def get_cron(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    body: Any = client.CustomObjectsApi(api).get_namespaced_custom_object(
        G, V, namespace, names.PLURAL_LEASED_CRON_JOBS, name
    )
    return dict(body)


def runs(api: client.ApiClient, namespace: str, cron: str) -> dict[str, dict[str, Any]]:
    """The cron job's runs (LeasedJobs) by name."""
    body: Any = client.CustomObjectsApi(api).list_namespaced_custom_object(
        G, V, namespace, names.PLURAL_LEASED_JOBS, label_selector=f"{names.LABEL_CRON_JOB}={cron}"
    )
    return {item["metadata"]["name"]: item for item in body["items"]}


def cron_condition(
    api: client.ApiClient, namespace: str, name: str, type_: str
) -> tuple[str, str] | None:
    status = get_cron(api, namespace, name).get("status") or {}
    cond = next((c for c in status.get("conditions", []) if c["type"] == type_), None)
    return (cond["status"], cond["reason"]) if cond else None


def cron_events(
    api: client.ApiClient, namespace: str, name: str, *, until: Iterable[str] = ()
) -> list[tuple[str, str]]:
    """The LeasedCronJob's Events (:func:`tests.integration.jobs.events`, ``until`` as there)."""
    return events(api, namespace, name, until=until, kind="LeasedCronJob")


def held_run(store: LeaseStore, namespace: str, run: str) -> tuple[str, int, str] | None:
    """(holder, token, holder UID) of a run's lease once its pod holds it, bound."""
    record = store.get(namespace, run).record
    if record.holder_identity is None or record.holder_uid is None:
        return None
    return record.holder_identity, record.fencing_token, record.holder_uid


# -- the resource ------------------------------------------------------------------


def test_the_crd_refuses_a_malformed_cron_job_naming_the_field(
    api_client: client.ApiClient, namespace: str
) -> None:
    def refused(**spec: Any) -> str:
        with pytest.raises(client.ApiException) as caught:
            create_cron(api_client, namespace, "bad", "true", **spec)
        assert caught.value.status == 422
        return str(json.loads(caught.value.body or "{}")["message"])

    assert "spec.schedule must be five cron fields" in refused(schedule="* * * *")
    assert "spec.schedule must be five cron fields" in refused(schedule="@every 5m")
    assert "use spec.timeZone" in refused(schedule="CRON_TZ=UTC 0 * * * *")
    assert "spec.concurrencyPolicy" in refused(concurrencyPolicy="Sometimes")
    assert "spec.successfulJobsHistoryLimit" in refused(successfulJobsHistoryLimit=-1)
    assert "spec.startingDeadlineSeconds" in refused(startingDeadlineSeconds=-5)
    with pytest.raises(client.ApiException) as long_name:  # its runs' names would not fit
        create_cron(api_client, namespace, "n" * 53, "true")
    assert "metadata.name must be at most 52 characters" in str(long_name.value.body)
    create_cron(api_client, namespace, "n" * 52, "true")
    # A template may change what a LeasedJob may not (each run is a new LeasedJob).
    create_cron(api_client, namespace, "good", "true", schedule="@hourly")
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        G,
        V,
        namespace,
        names.PLURAL_LEASED_CRON_JOBS,
        "good",
        {"spec": {"jobTemplate": {"spec": {"leaseDurationSeconds": 7, "maxAttempts": 5}}}},
    )
    # A run of several completions: one lease per index, inside the run's range.
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        G,
        V,
        namespace,
        names.PLURAL_LEASED_CRON_JOBS,
        "good",
        {"spec": {"jobTemplate": {"spec": {"completions": 3, "completionMode": "Indexed"}}}},
    )
    with pytest.raises(client.ApiException) as indexed:  # the LeasedJob's own checks
        create_cron(
            api_client, namespace, "nocount", "true", job_spec={"completionMode": "Indexed"}
        )
    assert "an Indexed job needs spec.completions" in str(indexed.value.body)
    cron = get_cron(api_client, namespace, "good")
    assert cron["spec"]["concurrencyPolicy"] == "Allow"
    assert (cron["spec"]["successfulJobsHistoryLimit"], cron["spec"]["failedJobsHistoryLimit"]) == (
        3,
        1,
    )


def test_an_invalid_schedule_or_zone_is_reported_by_the_operator(
    api_client: client.ApiClient, namespace: str, operator: OperatorProcess
) -> None:
    create_cron(api_client, namespace, "minute61", "true", schedule="61 * * * *")
    create_cron(api_client, namespace, "nowhere", "true", timeZone="Mars/Olympus_Mons")

    def ready(name: str) -> dict[str, Any] | None:
        status = get_cron(api_client, namespace, name).get("status") or {}
        return next((c for c in status.get("conditions", []) if c["type"] == "Ready"), None)

    bad_minute = wait_for("Ready=False on minute61", lambda: ready("minute61"))
    assert (bad_minute["status"], bad_minute["reason"]) == ("False", "InvalidSchedule")
    assert "spec.schedule" in bad_minute["message"]
    assert bad_minute["observedGeneration"] == 1
    bad_zone = wait_for("Ready=False on nowhere", lambda: ready("nowhere"))
    assert "spec.timeZone" in bad_zone["message"]
    wait_for(
        "an InvalidSchedule Event",
        lambda: any(
            r == "InvalidSchedule" for r, _ in cron_events(api_client, namespace, "nowhere")
        ),
    )
    assert not runs(api_client, namespace, "minute61")


# -- the runs share one fencing domain ------------------------------------------------


def test_forbid_waits_for_a_frozen_runs_lease_then_claims_a_higher_token(
    api_client: client.ApiClient,
    namespace: str,
    store: LeaseStore,
    clock: Clock,
    operator_ahead: OperatorProcess,
    local_pod_runner: PodRunner,
) -> None:
    create_cron(api_client, namespace, "nightly", run(600), concurrencyPolicy="Forbid")
    first = wait_for(
        "the first run", lambda: next(iter(runs(api_client, namespace, "nightly")), None)
    )
    # A starting deadline shorter than the wait for the frozen run's lease
    # (issue 27, case 7): the next run is due in time and must still start after
    # it. (Set once the first run exists: a loaded operator may start it late.)
    patch_cron(api_client, namespace, "nightly", {"startingDeadlineSeconds": 10})
    holder, token, holder_uid = wait_for(
        "the first run's pod to hold its lease", lambda: held_run(store, namespace, first), 30
    )
    assert runs(api_client, namespace, "nightly")[first]["metadata"]["labels"]["team"] == "tests"
    wait_for("the first run renewing", lambda: renewed(store, namespace, first), 30)
    # Freeze its worker shortly before the next schedule time: it stops renewing,
    # but its lease stays held for 20 s more, past that time.
    clock.wait_until_second(50)
    local_pod_runner.pause(namespace, holder)
    frozen_at = time.monotonic()

    def second_run() -> str | None:
        return next((n for n in runs(api_client, namespace, "nightly") if n != first), None)

    waited = wait_for(
        "the cron job to wait for the frozen run",
        lambda: [
            m
            for r, m in cron_events(api_client, namespace, "nightly")
            if r == "EarlierRunHoldsLease"
        ],
        40,
    )
    assert first in waited[0]
    assert wait_for(
        "Waiting=True",
        lambda: (
            cron_condition(api_client, namespace, "nightly", "Waiting")
            == ("True", "EarlierRunHoldsLease")
        ),
        10,
    )
    # While the frozen run's lease is held, no second run exists to claim anything.
    while True:
        # The runs read first, the lease last: held at the last read, it was held
        # at the first (the reclaim and the next run may both come between reads).
        second = second_run()
        if store.get(namespace, first).record.holder_identity is None:
            break
        assert second is None
        assert time.monotonic() - frozen_at < 40, "the frozen run's lease never expired"
        time.sleep(0.2)
    # Not before its lease expired: 20 s after its last renewal, which came at
    # most a third of the lease (the SDK's renew interval) before the freeze.
    assert time.monotonic() - frozen_at >= 20 - 20 / 3
    # Reclaimed (the reclaim's own write notes the token in the lease's annotations).
    assert wait_for(
        "the reclaim's note",
        lambda: (reclaim_note(store.get(namespace, first).body) or (0, ""))[0] == token,
        10,
    )
    assert store.get(namespace, first).record.max_fencing_token == token  # closed

    second = wait_for("the second run", second_run, 30)
    _, token2, _ = wait_for(
        "the second run's claim", lambda: held_run(store, namespace, second), 30
    )
    assert token2 > token
    assert token2 > store.get(namespace, first).record.fencing_token
    assert wait_for(
        "Waiting=False",
        lambda: (
            cron_condition(api_client, namespace, "nightly", "Waiting") == ("False", "NotWaiting")
        ),
    )
    # The frozen worker, resumed, can neither renew nor complete.
    late = store.complete(namespace, first, holder, token, Outcome.SUCCEEDED, holder_uid=holder_uid)
    assert isinstance(late, Rejected), late
    # Decided (FailureTarget) at once; Failed waits for the frozen pod to terminate.
    wait_for(
        "the first run to be decided",
        lambda: condition_true(api_client, namespace, first, "FailureTarget"),
        30,
    )
    local_pod_runner.resume(namespace, holder)
    first_job = wait_for(
        "the first run to end",
        lambda: (
            (runs(api_client, namespace, "nightly")[first].get("status") or {}).get("phase")
            == "Failed"
        ),
        60,
    )
    assert first_job
    assert "MissSchedule" not in [r for r, _ in cron_events(api_client, namespace, "nightly")]


def test_replace_fences_the_replaced_run_at_the_store_and_at_a_target(
    api_client: client.ApiClient,
    namespace: str,
    store: LeaseStore,
    clock: Clock,
    operator_ahead: OperatorProcess,
    pod_runner: PodRunner | None,
    pg: str,
) -> None:
    create_cron(api_client, namespace, "sync", run(600), concurrencyPolicy="Replace")
    first = wait_for("the first run", lambda: next(iter(runs(api_client, namespace, "sync")), None))
    # A starting deadline shorter than the replaced worker's lease window (20 s
    # and the margin; issue 27, case 7): the next run is due in time and must
    # still start after it. (Set once the first run exists: a loaded operator
    # may start it late.)
    patch_cron(api_client, namespace, "sync", {"startingDeadlineSeconds": 15})
    holder, token, holder_uid = wait_for(
        "the first run's claim", lambda: held_run(store, namespace, first), 30
    )
    # The first run wrote to the target under its token.
    write_report(pg, token, "first run")

    second = wait_for(
        "the second run",
        lambda: next((n for n in runs(api_client, namespace, "sync") if n != first), None),
        120,  # the next minute, then the replaced worker's lease window (20 s + margin)
    )
    _, token2, _ = wait_for(
        "the second run's claim", lambda: held_run(store, namespace, second), 30
    )
    # The replaced run's lease was stopped (unheld, capped at its token) before
    # the new run existed; once its LeasedJob is gone the lease goes too.
    try:
        old = store.get(namespace, first).record
        assert old.holder_identity is None and old.max_fencing_token == token
    except LeaseNotFoundError:
        pass
    # The new run's range starts above the whole range of the first (3 attempts).
    assert store.get(namespace, second).record.base_fencing_token >= (token - 1) + 3
    assert token2 > token
    # The replaced run's late completion is refused at the store...
    try:
        late = store.complete(
            namespace, first, holder, token, Outcome.SUCCEEDED, holder_uid=holder_uid
        )
        assert isinstance(late, Rejected), late
    except LeaseNotFoundError:
        pass  # its lease is gone: nothing to complete
    # ...and once the new run has written, its late write at the target.
    write_report(pg, token2, "second run")
    with pytest.raises(StaleToken):
        write_report(pg, token, "first run, late")
    assert report(pg) == "second run"
    wait_for(
        "the replaced run's LeasedJob to go",
        lambda: first not in runs(api_client, namespace, "sync"),
        30,
    )
    assert wait_for(
        "a Replaced Event",
        lambda: any(r == "Replaced" for r, _ in cron_events(api_client, namespace, "sync")),
    )
    # The new run waited out the replaced worker's lease window before it existed.
    told = cron_events(api_client, namespace, "sync", until=["WaitingForEarlierHolder"])
    reasons = [r for r, _ in told]
    assert "WaitingForEarlierHolder" in reasons, reasons
    assert "MissSchedule" not in reasons, reasons
    # batch/v1 drops a job it deleted from status.active at once: not "missing".
    assert "MissingJob" not in reasons, reasons


def test_history_limits_keep_the_latest_finished_runs(
    api_client: client.ApiClient,
    namespace: str,
    store: LeaseStore,
    operator_ahead: OperatorProcess,
    pod_runner: PodRunner | None,
) -> None:
    create_cron(
        api_client,
        namespace,
        "tidy",
        run(1),
        successfulJobsHistoryLimit=1,
        failedJobsHistoryLimit=0,
    )
    first = wait_for("the first run", lambda: next(iter(runs(api_client, namespace, "tidy")), None))
    wait_for(
        "the first run to succeed",
        lambda: (
            (runs(api_client, namespace, "tidy")[first].get("status") or {}).get("phase")
            == "Succeeded"
        ),
        30,
    )
    first_token = store.get(namespace, first).record.fencing_token
    status = wait_for(
        "lastSuccessfulTime",
        lambda: (
            get_cron(api_client, namespace, "tidy").get("status", {}).get("lastSuccessfulTime")
            and get_cron(api_client, namespace, "tidy")["status"]
        ),
        30,
    )
    assert status["lastScheduleTime"].endswith(":00Z")
    second = wait_for(
        "the second run",
        lambda: next((n for n in runs(api_client, namespace, "tidy") if n != first), None),
        75,
    )
    wait_for(
        "the first run to be deleted", lambda: first not in runs(api_client, namespace, "tidy"), 60
    )
    assert set(runs(api_client, namespace, "tidy")) == {second}
    assert wait_for(
        "a SuccessfulDelete Event",
        lambda: any(r == "SuccessfulDelete" for r, _ in cron_events(api_client, namespace, "tidy")),
    )
    # The second run's tokens are above the first's; the first run's lease goes
    # with it (the second run's, the domain's top, stays).
    assert store.get(namespace, second).record.base_fencing_token >= first_token
    assert int(second.rsplit("-", 1)[1]) - int(first.rsplit("-", 1)[1]) == 1  # unix minutes

    def lease_gone() -> bool:
        try:
            store.get(namespace, first)
        except LeaseNotFoundError:
            return True
        return False

    wait_for("the first run's JobLease to go", lease_gone, 30)


def test_a_suspended_cron_job_starts_no_run_until_resumed(
    api_client: client.ApiClient,
    namespace: str,
    operator_ahead: OperatorProcess,
    pod_runner: PodRunner | None,
) -> None:
    # The operator's clock is just past a minute boundary that lies after the
    # creation: a run would be due at once.
    create_cron(api_client, namespace, "paused", run(1), suspend=True)

    def ready_reason() -> str | None:
        status = get_cron(api_client, namespace, "paused").get("status") or {}
        ready = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), None)
        return ready["reason"] if ready else None

    assert wait_for("Ready reason Suspended", lambda: ready_reason() == "Suspended")
    time.sleep(2)
    assert not runs(api_client, namespace, "paused")
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        G, V, namespace, names.PLURAL_LEASED_CRON_JOBS, "paused", {"spec": {"suspend": False}}
    )
    assert wait_for("a run once resumed", lambda: runs(api_client, namespace, "paused"), 30)
    assert wait_for("Ready reason Scheduling", lambda: ready_reason() == "Scheduling")


def test_saw_completed_job_once_per_run_and_missing_job_for_a_deleted_active_run(
    api_client: client.ApiClient,
    namespace: str,
    operator_ahead: OperatorProcess,
    pod_runner: PodRunner | None,
) -> None:
    # batch/v1's cronjob controller (cronjob_controllerv2.go, syncCronJob): an
    # active job seen finished is told SawCompletedJob, an active job that no
    # longer exists MissingJob; both leave status.active.
    create_cron(api_client, namespace, "seen", run(1))
    create_cron(api_client, namespace, "lost", run(600))

    def active(cron: str) -> list[dict[str, Any]]:
        return list((get_cron(api_client, namespace, cron).get("status") or {}).get("active", []))

    def told(cron: str, reason: str) -> list[str]:
        return [m for r, m in cron_events(api_client, namespace, cron) if r == reason]

    seen = wait_for(
        "the run of seen", lambda: next(iter(runs(api_client, namespace, "seen")), None)
    )
    assert wait_for("SawCompletedJob", lambda: told("seen", "SawCompletedJob"), 40) == [
        f"Saw completed job: {seen}, condition: Complete"
    ]
    assert wait_for("seen's active list emptied", lambda: not active("seen"), 10)
    lost = wait_for("lost's run active", lambda: [r for r in active("lost") if r.get("uid")], 30)
    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
        G, V, namespace, names.PLURAL_LEASED_JOBS, lost[0]["name"]
    )
    assert wait_for("MissingJob", lambda: told("lost", "MissingJob"), 30) == [
        f"Active job went missing: {lost[0]['name']}"
    ]
    assert wait_for("lost's active list emptied", lambda: not active("lost"), 10)
    time.sleep(3)  # later reconciles tell neither again
    assert len(told("seen", "SawCompletedJob")) == 1
    assert len(told("lost", "MissingJob")) == 1
    assert told("lost", "SawCompletedJob") == []


def test_allow_overlapping_runs_take_disjoint_token_ranges(
    api_client: client.ApiClient,
    namespace: str,
    store: LeaseStore,
    clock: Clock,
    operator_ahead: OperatorProcess,
    local_pod_runner: PodRunner,
) -> None:
    # Runs overlap; the first run's retry, after the second run started, still
    # takes a token below every token of the second run.
    create_cron(api_client, namespace, "often", run(600), lease_seconds=5)
    first = wait_for(
        "the first run", lambda: next(iter(runs(api_client, namespace, "often")), None)
    )
    holder, token, _ = wait_for(
        "the first run's claim", lambda: held_run(store, namespace, first), 30
    )
    cap = store.get(namespace, first).record.max_fencing_token
    assert cap == token - 1 + 3  # its range: maxAttempts 3 above its base
    second = wait_for(
        "the second run",
        lambda: next((n for n in runs(api_client, namespace, "often") if n != first), None),
        75,
    )
    _, token2, _ = wait_for(
        "the second run's claim", lambda: held_run(store, namespace, second), 30
    )
    assert token2 > cap
    assert store.get(namespace, first).record.holder_identity == holder  # Allow: both run
    # The first run's worker freezes; its lease is reclaimed and it runs again.
    local_pod_runner.pause(namespace, holder)

    def retried() -> int | None:
        held = held_run(store, namespace, first)
        return held[1] if held and held[1] > token else None

    retry_token = wait_for("the first run's retry", retried, 40)
    assert token < retry_token <= cap < token2


def test_a_failed_run_with_retries_left_never_claims_again_once_a_later_run_is_due(
    api_client: client.ApiClient,
    namespace: str,
    store: LeaseStore,
    clock: Clock,
    operator_ahead: OperatorProcess,
    pod_runner: PodRunner | None,
) -> None:
    # Issue 27, case 1. Each run's worker fails at once; backoffLimit lets it
    # retry 70 s later, after the next run is due. Forbid and Replace must
    # close it at the store when the next run is due: its retry is refused.
    retrying = {"backoffLimit": 2, "backoff": {"initialDelaySeconds": 70, "maxDelaySeconds": 70}}
    fails = "leasehold run -- sh -c 'exit 3'"
    for name, policy in (("fb", "Forbid"), ("rp", "Replace")):
        create_cron(
            api_client,
            namespace,
            name,
            fails,
            max_attempts=1,
            job_spec=retrying,
            concurrencyPolicy=policy,
        )
    first: dict[str, str] = {}
    tokens: dict[str, int] = {}

    def a_run(cron: str, but: str | None = None) -> str | None:
        return next((r for r in runs(api_client, namespace, cron) if r != but), None)

    for name in ("fb", "rp"):
        first[name] = wait_for(f"{name}'s first run", partial(a_run, name))

        def failed(run: str = first[name]) -> int | None:
            done = store.get(namespace, run).record.completion
            return done.fencing_token if done and done.outcome == Outcome.FAILED else None

        tokens[name] = wait_for(f"{name}'s first run to fail", failed, 40)

    def first_run_token(name: str) -> tuple[int, bool] | None:
        try:
            record = store.get(namespace, first[name]).record
        except LeaseNotFoundError:
            return None  # gone with its run: nothing left to claim
        return record.fencing_token, record.holder_identity is not None

    for name in ("fb", "rp"):
        wait_for(f"{name}'s second run", partial(a_run, name, first[name]), 75)
    # Past the failed runs' retry time (70 s after they failed): they never claimed again.
    until = time.monotonic() + 35
    while time.monotonic() < until:
        for name in ("fb", "rp"):
            seen = first_run_token(name)
            assert seen is None or seen == (tokens[name], False), (name, seen, tokens[name])
        time.sleep(0.5)
    # Closed at the store: the ceiling is the token; nothing may raise it again.
    forbid = store.get(namespace, first["fb"]).record
    assert forbid.ceiling_fencing_token == forbid.max_fencing_token == tokens["fb"]
    # Forbid: the failed run ends Failed without another attempt; Replace deleted it.
    assert wait_for(
        "fb's first run to end Failed",
        lambda: (
            (runs(api_client, namespace, "fb")[first["fb"]].get("status") or {}).get("phase")
            == "Failed"
        ),
        30,
    )
    wait_for(
        "rp's first run to be deleted",
        lambda: first["rp"] not in runs(api_client, namespace, "rp"),
        30,
    )


def test_an_evicted_run_retries_inside_its_range_below_the_next_run(
    api_client: client.ApiClient,
    namespace: str,
    store: LeaseStore,
    clock: Clock,
    operator_ahead: OperatorProcess,
    local_pod_runner: PodRunner,
) -> None:
    # Issue 27, case 2. Allow, a budget of one attempt: an eviction (which draws
    # on no budget) raises the first run's cap after the second run's range was
    # reserved. The first run's retry must still take a token below the second's.
    create_cron(api_client, namespace, "ev", run(600), max_attempts=1)
    first = wait_for("the first run", lambda: next(iter(runs(api_client, namespace, "ev")), None))
    holder, token, _ = wait_for(
        "the first run's claim", lambda: held_run(store, namespace, first), 30
    )
    second = wait_for(
        "the second run",
        lambda: next((n for n in runs(api_client, namespace, "ev") if n != first), None),
        75,
    )
    _, token2, _ = wait_for(
        "the second run's claim", lambda: held_run(store, namespace, second), 30
    )
    evict(api_client, namespace, holder)

    def retried() -> int | None:
        held = held_run(store, namespace, first)
        return held[1] if held and held[1] > token else None

    retry_token = wait_for("the evicted run's next attempt", retried, 40)
    assert token < retry_token < token2, (token, retry_token, token2)
    record = store.get(namespace, first).record
    assert record.uncounted_attempts == 1
    ceiling = record.ceiling_fencing_token
    assert ceiling is not None and ceiling < token2


def test_forbid_waits_out_the_window_of_a_run_suspended_while_it_held(
    api_client: client.ApiClient,
    namespace: str,
    store: LeaseStore,
    clock: Clock,
    operator_ahead: OperatorProcess,
    local_pod_runner: PodRunner,
) -> None:
    # Found by the Spin model (model/schedules.pml, forbid-no-hold-wait): a run
    # suspended while it held leaves its lease unheld while its worker may run
    # on until its window ends; Forbid started the next run at once beside it.
    create_cron(api_client, namespace, "paused", run(600), concurrencyPolicy="Forbid")
    first = wait_for(
        "the first run", lambda: next(iter(runs(api_client, namespace, "paused")), None)
    )
    wait_for("the first run's claim", lambda: held_run(store, namespace, first), 30)
    clock.wait_until_second(48)
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        G, V, namespace, names.PLURAL_LEASED_JOBS, first, {"spec": {"suspend": True}}
    )
    suspended_at = time.monotonic()
    wait_for("the suspension", lambda: store.get(namespace, first).record.suspended, 10)
    second = wait_for(
        "the second run",
        lambda: next((n for n in runs(api_client, namespace, "paused") if n != first), None),
        90,
    )
    waited = time.monotonic() - suspended_at
    # The suspended worker's window: the 20 s lease (less nothing: it may have
    # renewed just before the suspension). Before, the run came at the minute.
    assert waited >= 20 - 1, f"the second run came {waited:.1f}s after the suspension"
    cron_events(api_client, namespace, "paused", until=["WaitingForEarlierHolder"])
    assert second


# -- runs of several completions (an Indexed jobTemplate) ----------------------------
#
# batch/v1's CronJob makes an Indexed Job at each schedule time like any other
# Job; here each run's index leases take their tokens inside the range the cron
# job reserved for that run (docs/schedules.md), so every index of run N is
# above every index of run N-1, and Forbid / Replace close every index lease of
# an earlier run.

INDEXED = {"completions": 2, "parallelism": 2, "completionMode": "Indexed"}
"""The runs' template: two indexes at once."""


def index_records(store: LeaseStore, namespace: str, run_name: str) -> list[LeaseRecord]:
    """The run's index leases (index 0 and 1), as stored."""
    return [store.get(namespace, index_lease_name(run_name, i)).record for i in range(2)]


def held_indexes(
    store: LeaseStore, namespace: str, run_name: str
) -> list[tuple[str, int, str]] | None:
    """(holder, token, holder UID) of both index leases once both are held and bound."""
    out: list[tuple[str, int, str]] = []
    for i in range(2):
        try:
            record = store.get(namespace, index_lease_name(run_name, i)).record
        except LeaseNotFoundError:
            return None
        if record.holder_identity is None or record.holder_uid is None:
            return None
        out.append((record.holder_identity, record.fencing_token, record.holder_uid))
    return out


def other_run(api: client.ApiClient, namespace: str, cron: str, first: str) -> str | None:
    return next((n for n in runs(api, namespace, cron) if n != first), None)


def phase(api: client.ApiClient, namespace: str, cron: str, name: str) -> Any:
    return (runs(api, namespace, cron).get(name, {}).get("status") or {}).get("phase")


WORK_QUEUE = {"parallelism": 2}
"""The runs' template: a work queue of two slots (batch/v1's, ``completions`` unset)."""


@pytest.mark.parametrize("template", [INDEXED, WORK_QUEUE], ids=["indexed", "work-queue"])
def test_indexed_cron_runs_take_index_tokens_inside_their_range_above_the_previous_run(
    api_client: client.ApiClient,
    namespace: str,
    store: LeaseStore,
    operator_ahead: OperatorProcess,
    local_pod_runner: PodRunner,
    template: dict[str, Any],
) -> None:
    """Each run's index leases (a work queue's slot leases) stay inside its range."""
    create_cron(api_client, namespace, "idx", run(2), job_spec=template)
    first = wait_for("the first run", lambda: next(iter(runs(api_client, namespace, "idx")), None))
    assert wait_for(
        "the first run to succeed",
        lambda: phase(api_client, namespace, "idx", first) == "Succeeded",
        60,
    )
    second = wait_for("the second run", lambda: other_run(api_client, namespace, "idx", first), 90)
    assert wait_for(
        "the second run to succeed",
        lambda: phase(api_client, namespace, "idx", second) == "Succeeded",
        60,
    )
    ranges = {}
    for name in (first, second):
        own = store.get(namespace, name).record  # the run's range, never claimed
        assert own.holder_identity is None and own.ceiling_fencing_token is not None
        base, top = own.fencing_token, own.ceiling_fencing_token
        for record in index_records(store, namespace, name):
            # each index: taken over at the run's base, claimed above it, within the top
            assert record.base_fencing_token == base, record
            assert base < record.fencing_token <= top, (base, record.fencing_token, top)
            assert record.ceiling_fencing_token == top
            if template is INDEXED:
                assert record.completion is not None
                assert record.completion.outcome == Outcome.SUCCEEDED
        if template is WORK_QUEUE:  # one slot's success ends it (the other may be stopped)
            assert any(
                r.completion is not None and r.completion.outcome == Outcome.SUCCEEDED
                for r in index_records(store, namespace, name)
            )
        ranges[name] = (base, top)
    # every index of the second run is above every index of the first
    assert ranges[second][0] >= ranges[first][1]
    second_tokens = [r.fencing_token for r in index_records(store, namespace, second)]
    first_tokens = [r.fencing_token for r in index_records(store, namespace, first)]
    assert min(second_tokens) > max(first_tokens)
    # the runs' history and status as for runs of one completion
    status = wait_for(
        "lastSuccessfulTime",
        lambda: (get_cron(api_client, namespace, "idx").get("status") or {}).get(
            "lastSuccessfulTime"
        ),
    )
    assert status
    saw = wait_for(
        "SawCompletedJob for both runs",
        lambda: (
            [m for r, m in cron_events(api_client, namespace, "idx") if r == "SawCompletedJob"]
            if len(
                [r for r, _ in cron_events(api_client, namespace, "idx") if r == "SawCompletedJob"]
            )
            >= 2
            else None
        ),
        30,
    )
    assert any(first in m and "Complete" in m for m in saw), saw


def test_forbid_with_an_indexed_template_waits_until_every_index_lease_is_unheld(
    api_client: client.ApiClient,
    namespace: str,
    store: LeaseStore,
    clock: Clock,
    operator_ahead: OperatorProcess,
    local_pod_runner: PodRunner,
    tmp_path: Path,
) -> None:
    # Index 0 ends when the test says so; index 1 runs on (frozen).
    done = tmp_path / "index-0-may-end"
    script = (
        f'if [ "$JOB_COMPLETION_INDEX" = 0 ]; then while [ ! -e {done} ]; do sleep 0.5; done;'
        " else sleep 600; fi"
    )
    command = f"leasehold run -- sh -c {shlex.quote(script)}"
    create_cron(api_client, namespace, "fb", command, concurrencyPolicy="Forbid", job_spec=INDEXED)
    first = wait_for("the first run", lambda: next(iter(runs(api_client, namespace, "fb")), None))
    held = wait_for("both indexes held", lambda: held_indexes(store, namespace, first), 30)
    index_1 = index_lease_name(first, 1)
    wait_for("index 1 renewing", lambda: renewed(store, namespace, index_1), 30)
    clock.wait_until_second(50)
    local_pod_runner.pause(namespace, held[1][0])  # index 1's worker stops renewing
    frozen_at = time.monotonic()
    waited = wait_for(
        "the cron job to wait for the first run",
        lambda: [
            m for r, m in cron_events(api_client, namespace, "fb") if r == "EarlierRunHoldsLease"
        ],
        40,
    )
    assert index_lease_name(first, 1) in waited[0], waited
    # Both index leases were closed (ceiling at their token): no claim can take them.
    for record in index_records(store, namespace, first):
        assert record.ceiling_fencing_token == record.fencing_token, record
    # Index 0 ends (unheld) while index 1 is still held: no second run yet.
    done.touch()
    wait_for(
        "index 0 unheld",
        lambda: index_records(store, namespace, first)[0].holder_identity is None,
        40,
    )
    while True:  # the runs read first, the lease last (as in the test above)
        other = other_run(api_client, namespace, "fb", first)
        if index_records(store, namespace, first)[1].holder_identity is None:
            break
        assert other is None
        assert time.monotonic() - frozen_at < 45, "index 1's lease never expired"
        time.sleep(0.2)
    assert cron_condition(api_client, namespace, "fb", "Waiting") is not None
    second = wait_for("the second run", lambda: other_run(api_client, namespace, "fb", first), 30)
    tokens = wait_for("the second run's claims", lambda: held_indexes(store, namespace, second), 30)
    first_max = max(r.fencing_token for r in index_records(store, namespace, first))
    assert min(token for _, token, _ in tokens) > first_max
    # The frozen index's worker, resumed, cannot complete.
    holder, token, uid = held[1]
    late = store.complete(
        namespace, index_lease_name(first, 1), holder, token, Outcome.SUCCEEDED, holder_uid=uid
    )
    assert isinstance(late, Rejected), late
    local_pod_runner.resume(namespace, holder)


def test_replace_with_an_indexed_template_fences_every_index_of_the_replaced_run(
    api_client: client.ApiClient,
    namespace: str,
    store: LeaseStore,
    operator_ahead: OperatorProcess,
    pod_runner: PodRunner | None,
    pg: str,
) -> None:
    create_cron(
        api_client, namespace, "rp", run(600), concurrencyPolicy="Replace", job_spec=INDEXED
    )
    first = wait_for("the first run", lambda: next(iter(runs(api_client, namespace, "rp")), None))
    held = wait_for("both indexes held", lambda: held_indexes(store, namespace, first), 30)
    for _, token, _ in held:  # each index writes to the cron's shared target key
        write_report(pg, token, f"first run, token {token}")
    second = wait_for(
        "the second run",
        lambda: other_run(api_client, namespace, "rp", first),
        120,  # the next minute, then the replaced workers' lease window (20 s + margin)
    )
    # Every index lease of the replaced run was closed and taken back.
    for i in range(2):
        try:
            old = store.get(namespace, index_lease_name(first, i)).record
        except LeaseNotFoundError:
            continue  # gone with its run: nothing can claim it
        assert old.holder_identity is None, old
        assert old.ceiling_fencing_token == old.fencing_token == held[i][1], old
    new = wait_for("the second run's claims", lambda: held_indexes(store, namespace, second), 30)
    # Each replaced worker's completion is refused at the store...
    for i, (holder, token, uid) in enumerate(held):
        try:
            late = store.complete(
                namespace,
                index_lease_name(first, i),
                holder,
                token,
                Outcome.SUCCEEDED,
                holder_uid=uid,
            )
            assert isinstance(late, Rejected), late
        except LeaseNotFoundError:
            pass
    # ...and once the new run has written, each replaced index's late write at the target.
    assert min(t for _, t, _ in new) > max(t for _, t, _ in held)
    write_report(pg, new[0][1], "second run")
    for _, token, _ in held:
        with pytest.raises(StaleToken):
            write_report(pg, token, "first run, late")
    assert report(pg) == "second run"
    wait_for(
        "the replaced run's LeasedJob to go",
        lambda: first not in runs(api_client, namespace, "rp"),
        30,
    )

    def replaced_both() -> list[str] | None:
        told = [m for r, m in cron_events(api_client, namespace, "rp") if r == "Replaced"]
        both = all(any(index_lease_name(first, i) in m for m in told) for i in range(2))
        return told if both else None

    wait_for("Replaced Events naming both index leases", replaced_both)


def test_replace_keeps_a_finished_work_queue_run_whose_idle_slot_was_stopped(
    api_client: client.ApiClient,
    namespace: str,
    store: LeaseStore,
    operator_ahead: OperatorProcess,
    local_pod_runner: PodRunner,
) -> None:
    """batch/v1's Replace deletes only active Jobs: a finished run stays in the history.

    Slot 1 of the first run fails at once and waits out a long backoff, so it
    is not held when slot 0 succeeds and is never retried; its lease is not
    closed, so the lease alone does not say the run is over. The run is
    finished (Succeeded); the next run's Replace must neither delete it nor
    say it replaced it.
    """
    script = 'if [ "$JOB_COMPLETION_INDEX" = 1 ]; then exit 1; fi; sleep 2'
    create_cron(
        api_client,
        namespace,
        "wq",
        f"leasehold run -- sh -c {shlex.quote(script)}",
        concurrencyPolicy="Replace",
        job_spec={
            **WORK_QUEUE,
            "backoffLimit": 2,
            "backoff": {"initialDelaySeconds": 120, "maxDelaySeconds": 120},
        },
    )
    first = wait_for("the first run", lambda: next(iter(runs(api_client, namespace, "wq")), None))
    assert wait_for(
        "the first run to succeed",
        lambda: phase(api_client, namespace, "wq", first) == "Succeeded",
        60,
    )
    idle = index_records(store, namespace, first)[1]
    # Its Failed completion is never retried (the run is finished), yet the lease
    # alone does not say so: not closed at its ceiling, and its cap has room.
    assert idle.holder_identity is None and idle.completion is not None
    assert idle.fencing_token < (idle.max_fencing_token or 0) < (idle.ceiling_fencing_token or 0)
    second = wait_for("the second run", lambda: other_run(api_client, namespace, "wq", first), 90)
    assert wait_for(
        "the second run to succeed",
        lambda: phase(api_client, namespace, "wq", second) == "Succeeded",
        60,
    )
    assert first in runs(api_client, namespace, "wq")  # kept in the history

    def second_told() -> list[str] | None:  # recorded after any Replaced of the first run
        told = cron_events(api_client, namespace, "wq")
        made = any(r == "SuccessfulCreate" and second in m for r, m in told)
        return [r for r, _ in told] if made else None

    reasons = wait_for("the second run's SuccessfulCreate Event", second_told)
    assert "Replaced" not in reasons, reasons
