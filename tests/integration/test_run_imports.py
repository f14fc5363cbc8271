"""``leasehold run`` starts without the ``kubernetes`` package or pydantic.

Every job pays ``leasehold run``'s start-up; the ``kubernetes`` client package
was two thirds of it. These tests run the real command line against the real
API server (confirm renewal, completion) and look at what the process imported,
and check that the standard-library client sends the same lease writes as
``LeaseStore``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from leasehold.lease.httpclient import HttpLeaseClient, load_cluster_config
from leasehold.lease.protocol import Outcome, Rejection
from leasehold.lease.store import Accepted, LeaseStore, Rejected
from tests.integration.test_worker import push_claim, run_env

HEAVY = ("kubernetes", "pydantic", "urllib3", "yaml")
"""Packages ``leasehold run`` must not import."""

_PROBE = f"""
import json, os, sys
real_exit = os._exit
def report(code):
    loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r}))
    sys.stderr.write("IMPORTED " + json.dumps(loaded) + "\\n")
    sys.stderr.flush()
    real_exit(code)
os._exit = report
from leasehold.cli import main
sys.exit(main(sys.argv[1:]))
"""
"""The real command line, reporting the top-level packages it imported right before it exits."""


def test_leasehold_run_imports_neither_kubernetes_nor_pydantic(
    store: LeaseStore, crds_installed: Path, namespace: str
) -> None:
    token = push_claim(store, namespace, 5)
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, "run", "--", "true"],
        env=run_env(crds_installed, namespace, token, 5),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    completion = store.get(namespace, "job").record.completion
    assert completion is not None and completion.outcome is Outcome.SUCCEEDED, done.stderr
    imported = [line for line in done.stderr.splitlines() if line.startswith("IMPORTED ")]
    assert imported, done.stderr
    assert json.loads(imported[-1].removeprefix("IMPORTED ")) == []


def test_the_http_client_sends_the_stores_fenced_writes(
    store: LeaseStore, crds_installed: Path, namespace: str
) -> None:
    """Renew, complete and their refusals read the same through both clients."""
    token = push_claim(store, namespace, 30)
    http = HttpLeaseClient(load_cluster_config(crds_installed))
    try:
        renewed = http.renew(namespace, "job", "pod-a", token)
        assert isinstance(renewed, Accepted)
        assert renewed.lease == store.get(namespace, "job")
        stale = http.renew(namespace, "job", "pod-a", token - 1)
        assert isinstance(stale, Rejected) and stale.rejection is Rejection.STALE_TOKEN
        thief = http.renew(namespace, "job", "pod-b", token)
        assert isinstance(thief, Rejected) and thief.rejection is Rejection.NOT_HOLDER
        done = http.complete(namespace, "job", "pod-a", token, Outcome.SUCCEEDED, exit_code=0)
        assert isinstance(done, Accepted)
        assert done.lease.record == store.get(namespace, "job").record
        again = http.renew(namespace, "job", "pod-a", token)
        assert isinstance(again, Rejected) and again.rejection is Rejection.COMPLETED
        listed = http.list_leases(namespace)
        assert [lease.name for lease in listed] == ["job"]
    finally:
        http.close()
