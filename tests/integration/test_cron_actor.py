"""The cron actor in this process on the real API server: decisions taken on a stale read.

No operator process: the test drives ``CronActor.reconcile`` with an injected
clock (when a schedule time is due) and, for one call, a read of the cron job
taken before a change, as a reconcile racing a user's edit sees it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from kubernetes import client

from leasehold import names
from leasehold.controller.act.cron import CronActor
from leasehold.controller.runtime import Actors, cron_objects
from leasehold.lease.errors import TransientStoreError
from leasehold.lease.store import Accepted, LeaseStore
from tests.integration.jobs import G, V


def _created(api: client.ApiClient, namespace: str) -> dict[str, Any]:
    body = {
        "apiVersion": names.API_VERSION,
        "kind": "LeasedCronJob",
        "metadata": {"name": "swap"},
        "spec": {
            "schedule": "* * * * *",
            "concurrencyPolicy": "Replace",
            "jobTemplate": {"spec": {"leaseDurationSeconds": 30, "maxAttempts": 2}},
        },
    }
    created: Any = client.CustomObjectsApi(api).create_namespaced_custom_object(
        G, V, namespace, names.PLURAL_LEASED_CRON_JOBS, body
    )
    return dict(created)


def test_a_replace_decided_on_a_read_from_before_a_suspension_touches_no_run(
    api_client: client.ApiClient, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by the chaos run on kind (seed 101): a Replace reconcile that read
    # the cron job just before it was suspended took back the running run's
    # lease and deleted the run afterwards, and started none.
    created = _created(api_client, namespace)
    born = datetime.fromisoformat(created["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
    first_time = born.replace(second=0, microsecond=0) + timedelta(minutes=1)
    now = [first_time + timedelta(seconds=1)]
    actors = Actors.connect(api_client)
    crons, jobs = cron_objects(api_client)
    actor = CronActor(crons, jobs, actors.ctx, actors.holds, clock=lambda: now[0])
    store = LeaseStore(api_client)

    actor.reconcile(namespace, "swap")  # the first run, and its lease
    [run] = [j["metadata"]["name"] for j in jobs.list(namespace, f"{names.LABEL_CRON_JOB}=swap")]
    actors.jobs.reconcile(namespace, run)  # its take-over (pull mode)
    claimed = store.claim(namespace, run, "worker-a", observed=store.get(namespace, run))
    assert isinstance(claimed, Accepted), claimed

    stale, _ = crons.read(namespace, "swap")
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        G, V, namespace, names.PLURAL_LEASED_CRON_JOBS, "swap", {"spec": {"suspend": True}}
    )
    monkeypatch.setattr(crons, "read", lambda ns, name: (stale, None))
    now[0] = first_time + timedelta(minutes=1, seconds=1)  # the next run is due
    with pytest.raises(TransientStoreError):
        actor.reconcile(namespace, "swap")
    record = store.get(namespace, run).record
    assert record.holder_identity == "worker-a"  # not taken back
    ceiling = record.ceiling_fencing_token
    assert ceiling is not None and ceiling > record.fencing_token  # not closed
    assert run in [
        j["metadata"]["name"] for j in jobs.list(namespace, f"{names.LABEL_CRON_JOB}=swap")
    ]
