"""The printer columns as a person sees them on a real cluster, during a run.

``kubectl get leasedjobs,jobleases -o wide`` while a job's worker holds its
lease: the LeasedJob row shows phase Running, the holder (the attempt's pod)
and token 1; the JobLease row the same holder and token and how long ago it
was renewed. The transcript goes to build/kind-dashboards-transcript.txt
(docs/dashboards.md shows one, with k9s's view of the same objects).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.kind.kube import NAMESPACE, REPO, apply, fresh_job, get, run, started_pod, wait

pytestmark = [pytest.mark.kind, pytest.mark.timeout(10 * 60)]

JOB = "dashboard"
TRANSCRIPT = REPO / "build" / "kind-dashboards-transcript.txt"
LEASED_JOB = f"""
apiVersion: leasehold.dev/v1alpha1
kind: LeasedJob
metadata:
  name: {JOB}
spec:
  leaseDurationSeconds: 6
  template:
    spec:
      serviceAccountName: leasehold-worker
      containers:
        - name: worker
          image: leasehold:0.1.0
          command: ["leasehold", "run", "--", "sh", "-c", "sleep 20"]
"""
LEASEDJOB_COLUMNS = [
    *("NAME", "PHASE", "HOLDER", "TOKEN", "ATTEMPTS", "LAST-ATTEMPT", "AGE", "POD"),
    "COMPLETIONS",  # wide only: "7/10" for a job with several completions, else empty
]
JOBLEASE_COLUMNS = ["NAME", "JOB", "HOLDER", "TOKEN", "RENEWED", "DURATION", "OUTCOME", "AGE"]


@pytest.fixture
def env(operator_env: dict[str, str]) -> Iterator[dict[str, str]]:
    yield from fresh_job(operator_env, JOB)


def _row(table: str, name: str) -> dict[str, str]:
    """The named object's row of a kubectl table, cut at the header's column starts.

    Empty cells (e.g. no outcome yet) stay empty strings instead of shifting the row.
    """
    lines = table.splitlines()
    header = lines[0]
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    row = next(ln for ln in lines[1:] if ln.split() and ln.split()[0].endswith(f"/{name}"))
    ends = [*starts[1:], None]
    return {header[a:b].strip(): row[a:b].strip() for a, b in zip(starts, ends, strict=True)}


def test_kubectl_shows_holder_token_renewed_age_and_phase_of_a_running_job(
    env: dict[str, str],
) -> None:
    apply(env, LEASED_JOB)
    pod = wait("the worker to run", 180, lambda: started_pod(env, JOB, 1))

    def renewed() -> bool:
        spec = get(env, "jlease", JOB)["spec"]
        running = get(env, "ljob", JOB).get("status", {}).get("phase") == "Running"
        return bool(running and spec.get("renewTime") != spec.get("acquireTime"))

    wait("a renewal while the job runs", 30, renewed)
    shown = run(env, "kubectl", "-n", NAMESPACE, "get", "leasedjobs,jobleases", "-o", "wide")
    TRANSCRIPT.parent.mkdir(exist_ok=True)
    TRANSCRIPT.write_text(f"$ kubectl -n demo get leasedjobs,jobleases -o wide\n{shown}")
    print(shown)

    jobs, leases = shown.split("\n\n")
    assert jobs.split("\n")[0].split() == LEASEDJOB_COLUMNS, shown
    assert leases.split("\n")[0].split() == JOBLEASE_COLUMNS, shown
    job = _row(jobs, JOB)
    assert job["NAME"] == f"leasedjob.leasehold.dev/{JOB}", shown
    assert (job["PHASE"], job["HOLDER"], job["TOKEN"], job["POD"]) == (
        "Running",
        pod["name"],
        "1",
        pod["name"],
    ), shown
    lease = _row(leases, JOB)
    assert lease["NAME"] == f"joblease.leasehold.dev/{JOB}", shown
    assert (lease["JOB"], lease["HOLDER"], lease["TOKEN"], lease["DURATION"]) == (
        JOB,
        pod["name"],
        "1",
        "6",
    ), shown
    assert re.fullmatch(r"\d+s", lease["RENEWED"]), shown
    assert lease["OUTCOME"] == "", shown
