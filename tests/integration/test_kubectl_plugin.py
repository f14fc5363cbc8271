"""``kubectl leasehold`` on the real API server, run by the real kubectl as a plugin.

kubectl runs ``kubectl-leasehold`` from ``PATH`` (the package's console
script in the virtualenv's ``bin``); every command here goes through it.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from leasehold.lease.errors import LeaseNotFoundError
from leasehold.lease.store import LeaseStore
from operatorproc import OperatorProcess
from podrunner import PodRunner
from tests.conftest import _kubectl_bin
from tests.integration.jobs import create_job, get_job, lease_holder, phase_is, wait_for


def kubectl(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``kubectl <args>`` (``KUBECONFIG`` set) with this virtualenv's ``bin`` first on PATH.

    kubectl takes no flag before a plugin's name: the kubeconfig comes from
    the environment, as a user's usually does.
    """
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
    }
    return subprocess.run(
        [str(_kubectl_bin()), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def plugin_json(kubeconfig: Path, namespace: str, *args: str) -> list[dict[str, Any]]:
    """``kubectl leasehold <args> -n <namespace> -o json``, parsed; fails on a non-zero exit."""
    done = kubectl(kubeconfig, "leasehold", *args, "-n", namespace, "-o", "json")
    assert done.returncode == 0, done.stderr
    rows: list[dict[str, Any]] = json.loads(done.stdout)
    return rows


def renewing(store: LeaseStore, namespace: str, job: str) -> tuple[str, int] | None:
    """The job's holder and token once its worker has renewed, else ``None``."""
    try:
        record = store.get(namespace, job).record
    except LeaseNotFoundError:
        return None
    if record.holder_identity is None or record.renew_time is None:
        return None
    return record.holder_identity, record.fencing_token


def waiting(script: str) -> str:
    """A worker command under ``leasehold run`` running ``script``."""
    return f"leasehold run -- sh -c {shlex.quote(script)}"


def test_help_explains_every_subcommand(kubeconfig: Path) -> None:
    """``kubectl leasehold --help`` names each command; a usage error exits 2."""
    helped = kubectl(kubeconfig, "leasehold", "--help")
    assert helped.returncode == 0, helped.stderr
    for command in ("status", "history", "tokens", "suspend", "resume"):
        assert command in helped.stdout
    assert "fencing token" in helped.stdout
    sub = kubectl(kubeconfig, "leasehold", "tokens", "--help")
    assert sub.returncode == 0 and "-o {json,yaml,wide}" in sub.stdout
    wrong = kubectl(kubeconfig, "leasehold", "status")
    assert wrong.returncode == 2 and "job" in wrong.stderr


def test_a_missing_job_is_told_as_kubectl_tells_it(
    crds_installed: Path, kubeconfig: Path, namespace: str
) -> None:
    """Every command on a job that does not exist: kubectl's NotFound line, exit 1."""
    for command in ("status", "history", "tokens", "suspend", "resume"):
        done = kubectl(kubeconfig, "leasehold", command, "nope", "-n", namespace)
        assert done.returncode == 1, (command, done.stdout, done.stderr)
        assert (
            done.stderr.strip()
            == 'Error from server (NotFound): leasedjobs.leasehold.dev "nope" not found'
        )


def test_status_and_tokens_show_the_holder_its_token_and_renewals(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    kubeconfig: Path,
    namespace: str,
    tmp_path: Path,
) -> None:
    """``status`` agrees with the JobLease the worker holds; the table, wide and yaml forms."""
    go = tmp_path / "go"
    create_job(
        api_client,
        namespace,
        "etl",
        waiting(f"until [ -e {go} ]; do sleep 0.2; done"),
        lease_seconds=9,  # ATTEMPTS must be 1: an 8 s window, renewed every 3 s
    )
    store = LeaseStore(api_client)
    holder, token = wait_for(
        "the worker renewing its lease", lambda: renewing(store, namespace, "etl"), 60
    )
    [row] = plugin_json(kubeconfig, namespace, "status", "etl")
    assert (row["JOB"], row["LEASE"], row["HOLDER"], row["TOKEN"]) == ("etl", "etl", holder, token)
    assert row["PHASE"] == "Running" and row["ATTEMPTS"] == 1
    assert row["RENEWED"] is not None and row["RENEWED"].endswith("s")
    assert int(row["RENEWED"][:-1]) <= 10  # renewed every lease/3 seconds
    table = kubectl(kubeconfig, "leasehold", "status", "etl", "-n", namespace)
    assert table.returncode == 0, table.stderr
    header, line = table.stdout.splitlines()
    assert header.split() == ["JOB", "PHASE", "LEASE", "HOLDER", "TOKEN", "RENEWED", "ATTEMPTS"]
    assert line.split()[:5] == ["etl", "Running", "etl", holder, str(token)]
    wide = kubectl(kubeconfig, "leasehold", "status", "etl", "-n", namespace, "-o", "wide")
    assert "LEASE-SECONDS" in wide.stdout and " 9 " in wide.stdout
    [lease_row] = yaml.safe_load(
        kubectl(kubeconfig, "leasehold", "tokens", "etl", "-n", namespace, "-o", "yaml").stdout
    )
    assert (lease_row["HOLDER"], lease_row["TOKEN"], lease_row["STATE"]) == (holder, token, "Held")
    go.touch()
    wait_for("the job done", phase_is(api_client, namespace, "etl", "Succeeded"), 60)
    [done] = plugin_json(kubeconfig, namespace, "tokens", "etl")
    assert (done["HOLDER"], done["STATE"]) == (None, "Succeeded")


def test_history_lists_each_attempt_and_suspend_resume_fence_the_old_token(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    kubeconfig: Path,
    namespace: str,
    tmp_path: Path,
) -> None:
    """``suspend`` fences the running attempt, ``resume`` runs above it, ``history`` shows both."""
    go = tmp_path / "go"
    create_job(
        api_client,
        namespace,
        "nightly",
        waiting(f"until [ -e {go} ]; do sleep 0.2; done"),
        lease_seconds=6,  # no renewal stall on a loaded machine may cost either attempt its lease
    )
    store = LeaseStore(api_client)
    wait_for("a holder", lambda: renewing(store, namespace, "nightly"), 60)
    done = kubectl(kubeconfig, "leasehold", "suspend", "nightly", "-n", namespace)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "leasedjob.leasehold.dev/nightly suspended"
    assert get_job(api_client, namespace, "nightly")["spec"]["suspend"] is True
    wait_for(
        "the lease suspended",
        lambda: plugin_json(kubeconfig, namespace, "tokens", "nightly")[0]["STATE"] == "Suspended",
        60,
    )
    done = kubectl(kubeconfig, "leasehold", "resume", "nightly", "-n", namespace)
    assert done.returncode == 0 and done.stdout.strip() == "leasedjob.leasehold.dev/nightly resumed"
    wait_for(
        "a holder above token 1", lambda: lease_holder(store, namespace, "nightly")[1] >= 2, 60
    )
    wait_for("the second attempt held", lambda: lease_holder(store, namespace, "nightly")[0], 60)
    go.touch()
    wait_for("the job done", phase_is(api_client, namespace, "nightly", "Succeeded"), 60)
    rows = plugin_json(kubeconfig, namespace, "history", "nightly")
    assert [(r["TOKEN"], r["REASON"]) for r in rows] == [(1, "Suspended"), (2, "Succeeded")]
    assert all(r["POD"] and r["STARTED"] and r["ENDED"] for r in rows)
    table = kubectl(kubeconfig, "leasehold", "history", "nightly", "-n", namespace)
    assert table.stdout.splitlines()[0].split() == [
        "TOKEN",
        "POD",
        "STARTED",
        "ENDED",
        "EXIT",
        "REASON",
    ]


def test_tokens_of_an_indexed_job_shows_each_index_lease(
    operator: OperatorProcess,
    local_pod_runner: PodRunner,
    api_client: client.ApiClient,
    kubeconfig: Path,
    namespace: str,
) -> None:
    """``tokens`` of an Indexed job: one row per index, each its own lease and token."""
    create_job(
        api_client,
        namespace,
        "shards",
        waiting("sleep 1"),
        completions=3,
        parallelism=3,
        completionMode="Indexed",
    )
    wait_for("the job done", phase_is(api_client, namespace, "shards", "Succeeded"), 90)
    rows = plugin_json(kubeconfig, namespace, "tokens", "shards")
    assert [r["INDEX"] for r in rows] == [0, 1, 2]
    assert len({r["LEASE"] for r in rows}) == 3
    assert [(r["STATE"], r["TOKEN"]) for r in rows] == [("Succeeded", 1)] * 3
    [status] = plugin_json(kubeconfig, namespace, "status", "shards")
    assert status["PHASE"] == "Succeeded" and status["ATTEMPTS"] == "3/3"
