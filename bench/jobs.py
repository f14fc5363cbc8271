"""LeasedJob against batch/v1 Job: the same pods, the same command, the same API server.

Why this module exists: a user weighing a LeasedJob against the Job they use
today wants its cost over that Job, not over a raw write. Both kinds run on
one local control plane (the real job controller in the controller manager,
the operator as a real process) with the pod runner (``testing/podrunner``)
playing the kubelet for both, so their pods are the same local processes.
Each round creates ``n`` jobs at once (one thread pool, its own clients) and
times create -> done through a watch: a Job's ``Complete`` condition, a
LeasedJob's ``Succeeded`` phase. The API server's ``apiserver_request_total``
is scraped before the creates and after the last job is done plus a settle
time, so every request the jobs caused is counted, by verb and resource.
"""

from __future__ import annotations

import concurrent.futures
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, cast

from kubernetes import client, watch

from bench.harness import (
    CLK_TCK,
    REPO,
    WRITE_VERBS,
    G,
    Harness,
    V,
    all_requests,
    apiserver_samples,
    log,
    new_client,
)
from bench.stats import Summary, markdown_table, summarize
from leasehold import names
from localcluster import tools_bin_dir
from operatorproc import OperatorProcess
from podrunner import PodRunner

SLEEP: Final = "sleep 1"
"""The job's shell command, for both kinds."""
LEASE_SECONDS: Final = 10
"""The LeasedJob's ``leaseDurationSeconds``."""
SETTLE_SECONDS: Final = 3.0
"""Wait after the last job is done before the closing scrape (follow-up writes)."""
BACKGROUND: Final = ("leases", "nodes", "events")
"""Resources counted apart: heartbeats of the node and of leader election (not per job),
and Events (the two kinds emit different ones; shown in the table)."""
KINDS: Final = ("batch/v1 Job", "LeasedJob")


def run(h: Harness, counts: Sequence[int] = (20,), rounds: int = 2) -> list[dict[str, Any]]:
    """Run ``rounds`` rounds of each kind at each size in ``counts``, interleaved.

    Returns:
        One row per (kind, size, round): ``kind``, ``n``, ``round``,
        ``latency`` (:class:`~bench.stats.Summary` of create -> done,
        seconds), ``total`` (first create -> last done, seconds),
        ``missing``, ``requests`` (``"<verb> <resource>"`` -> count, the
        benchmark's own creates and watch taken out), ``controller_cpu``
        (CPU seconds of the operator for LeasedJobs, of the controller
        manager for Jobs), ``cpu`` (cores per process over the round).

    Raises:
        subprocess.CalledProcessError: the worker ClusterRole could not be applied.
    """
    ns = h.namespace("jobs")
    grant_worker_rights(h, ns)
    op = OperatorProcess(
        h.kubeconfig, ns, h.workdir / "operator-jobs.log", start_timeout_seconds=120
    )
    runner = PodRunner(h.kubeconfig, h.workdir / "podrunner")
    rows: list[dict[str, Any]] = []
    try:  # a start that times out leaves the process running: stop it in finally
        op.start()
        runner.start()
        assert op.proc is not None
        h.meter.pids["operator"] = op.proc.pid
        time.sleep(2.0)  # the operator's start-up settles
        for n, r, kind in schedule(counts, rounds):
            h.note_load(f"jobs {kind} x{n} round {r + 1}")
            log(f"jobs: {n} x {kind}, round {r + 1}")
            rows.append(measure(h, ns, kind, n, f"r{r}n{n}"))
    finally:
        h.meter.pids.pop("operator", None)
        runner.stop()
        op.stop()
    return rows


def schedule(counts: Sequence[int], rounds: int) -> Iterator[tuple[int, int, str]]:
    """The measurements in order: ``(n, round, kind)``, each size's rounds in turn.

    The kinds alternate which goes first from one round to the next, so a
    slow start or a warm cache favours neither.
    """
    for n in counts:
        for r in range(rounds):
            for kind in KINDS if r % 2 == 0 else tuple(reversed(KINDS)):
                yield n, r, kind


def grant_worker_rights(h: Harness, ns: str) -> None:
    """Apply the worker ClusterRole and bind it to ``ns``'s default service account."""
    subprocess.run(
        [
            str(tools_bin_dir() / "kubectl"),
            "--kubeconfig",
            str(h.kubeconfig),
            "apply",
            "--server-side",
            "-f",
            str(REPO / "deploy" / "rbac" / "worker-clusterrole.yaml"),
        ],
        check=True,
        capture_output=True,
    )
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "leasehold-worker"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "leasehold-worker",
        },
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}],
    }
    client.RbacAuthorizationV1Api(h.admin).create_namespaced_role_binding(ns, cast(Any, binding))


@dataclass(frozen=True)
class PodShape:
    """What both kinds' pods run in: the image and the service account.

    Attributes:
        image: the container image (the pod runner ignores it; on kind, the
            built ``leasehold`` image, which has ``sh`` and ``leasehold run``).
        service_account: the pods' ServiceAccount (``None``: the namespace's
            default, bound to the worker role by :func:`grant_worker_rights`).
    """

    image: str = "local"
    service_account: str | None = None


LOCAL_PODS: Final = PodShape()
"""The pod runner's pods (local processes)."""


def pod_template(command: list[str], pods: PodShape = LOCAL_PODS) -> dict[str, Any]:
    """A pod template running ``command`` in one container of ``pods``' image."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{"name": "worker", "image": pods.image, "command": command}],
    }
    if pods.service_account:
        spec["serviceAccountName"] = pods.service_account
    return {"spec": spec}


def batch_job(name: str, pods: PodShape = LOCAL_PODS) -> dict[str, Any]:
    """A batch/v1 Job running the benchmark's command once."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": pod_template(["sh", "-c", SLEEP], pods),
        },
    }


def leased_job(name: str, pods: PodShape = LOCAL_PODS) -> dict[str, Any]:
    """A LeasedJob running the benchmark's command under ``leasehold run``."""
    return {
        "apiVersion": names.API_VERSION,
        "kind": "LeasedJob",
        "metadata": {"name": name},
        "spec": {
            "leaseDurationSeconds": LEASE_SECONDS,
            "maxAttempts": 1,
            "template": pod_template(["leasehold", "run", "--", "sh", "-c", SLEEP], pods),
        },
    }


def job_done(obj: dict[str, Any]) -> bool:
    """Whether a batch/v1 Job (as a dict) has ``Complete=True``."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Complete" and c.get("status") == "True" for c in conditions)


def leased_job_done(obj: dict[str, Any]) -> bool:
    """Whether a LeasedJob (as a dict) is ``Succeeded``."""
    return bool((obj.get("status") or {}).get("phase") == "Succeeded")


STAGES: Final = ("pod created", "pod Running", "pod Succeeded")
"""Pod moments seen by a watch, per job (the job's first pod)."""


def watch_pods(
    h: Harness,
    batch: bool,
    ns: str,
    prefix: str,
    seen: dict[str, dict[str, float]],
    stop: threading.Event,
    ready: threading.Event,
) -> None:
    """Note in ``seen`` (job name -> stage -> monotonic time) when its pod reached each stage."""
    core = client.CoreV1Api(new_client(h.kubeconfig))
    label = "job-name" if batch else names.LABEL_JOB
    listed: Any = core.list_namespaced_pod(ns, limit=1)
    stream = watch.Watch()
    ready.set()
    for event in stream.stream(
        core.list_namespaced_pod,
        ns,
        resource_version=listed.metadata.resource_version,
        timeout_seconds=300,
    ):
        at = time.monotonic()
        pod: Any = event["object"]
        job = (pod.metadata.labels or {}).get(label, "")
        if job.startswith(prefix):
            stages = seen.setdefault(job, {})
            stages.setdefault(STAGES[0], at)
            phase = pod.status.phase if pod.status else None
            if phase in ("Running", "Succeeded"):
                stages.setdefault(STAGES[1], at)
            if phase == "Succeeded":
                stages.setdefault(STAGES[2], at)
        if stop.is_set():
            stream.stop()
            break


def measure(
    h: Harness, ns: str, kind: str, n: int, tag: str, shape: PodShape = LOCAL_PODS
) -> dict[str, Any]:
    """Create ``n`` jobs of ``kind`` (one of :data:`KINDS`) in ``shape``'s pods at once; time each.

    Returns:
        One row as :func:`run` describes it.
    """
    batch = kind == KINDS[0]
    prefix = f"{'b' if batch else 'l'}{tag}-"
    job_names = [f"{prefix}{i}" for i in range(n)]
    created: dict[str, float] = {}
    done: dict[str, float] = {}
    stop = threading.Event()
    ready = threading.Event()
    watcher = threading.Thread(
        target=watch_done, args=(h, ns, batch, prefix, done, n, stop, ready), daemon=True
    )
    watcher.start()
    pods: dict[str, dict[str, float]] = {}
    pods_ready = threading.Event()
    pod_watcher = threading.Thread(
        target=watch_pods, args=(h, batch, ns, prefix, pods, stop, pods_ready), daemon=True
    )
    pod_watcher.start()
    ready.wait(10)
    pods_ready.wait(10)
    cpu_before = h.meter.snapshot()
    server_before = apiserver_samples(h.admin)
    local = threading.local()

    def create(name: str) -> None:
        if not hasattr(local, "api"):
            api = new_client(h.kubeconfig)
            local.api = client.BatchV1Api(api), client.CustomObjectsApi(api)
        batch_api, custom = local.api
        created[name] = time.monotonic()
        if batch:
            batch_api.create_namespaced_job(ns, batch_job(name, shape))
        else:
            custom.create_namespaced_custom_object(
                G, V, ns, names.PLURAL_LEASED_JOBS, leased_job(name, shape)
            )

    with concurrent.futures.ThreadPoolExecutor(min(n, 16)) as pool:
        for f in [pool.submit(create, x) for x in job_names]:
            f.result()
    watcher.join(timeout=60 + n)
    stop.set()
    cpu_after = h.meter.snapshot()
    time.sleep(SETTLE_SECONDS)
    every = all_requests(server_before, apiserver_samples(h.admin))
    # Ours: the creates and the watcher's list + watch.
    every.subtract({f"POST {'jobs' if batch else names.PLURAL_LEASED_JOBS}": n})
    every.subtract(
        {
            f"LIST {'jobs' if batch else names.PLURAL_LEASED_JOBS}": 1,
            f"WATCH {'jobs' if batch else names.PLURAL_LEASED_JOBS}": 1,
        }
    )
    controller = "operator" if not batch else "kube-controller-manager"
    seconds = max(cpu_after.at - cpu_before.at, 1e-9)
    cpu = {
        name: (cpu_after.ticks.get(name, 0) - cpu_before.ticks.get(name, 0)) / CLK_TCK / seconds
        for name in cpu_after.ticks
    }
    cpu["machine"] = (cpu_after.busy - cpu_before.busy) / CLK_TCK / seconds
    latencies = [done[x] - created[x] for x in job_names if x in done]
    stages: dict[str, Summary] = {}
    previous = created
    for stage in STAGES:
        at = {x: pods[x][stage] for x in job_names if stage in pods.get(x, {})}
        stages[f"-> {stage}"] = summarize([at[x] - previous[x] for x in at if x in previous])
        previous = at
    stages["-> done"] = summarize([done[x] - previous[x] for x in done if x in previous])
    return {
        "kind": kind,
        "n": n,
        "round": tag,
        "latency": summarize(latencies),
        "stages": stages,
        "total": (max(done.values()) - min(created.values())) if done else float("nan"),
        "missing": n - len(latencies),
        "requests": +every,
        "controller_cpu": (cpu_after.ticks.get(controller, 0) - cpu_before.ticks.get(controller, 0))
        / CLK_TCK,
        "cpu": cpu,
    }


def watch_done(
    h: Harness,
    ns: str,
    batch: bool,
    prefix: str,
    done: dict[str, float],
    n: int,
    stop: threading.Event,
    ready: threading.Event,
) -> None:
    """Note in ``done`` (name -> monotonic time) each job of ``prefix`` first seen done.

    Sets ``ready`` once the watch's starting point is listed; returns when
    ``n`` jobs are done or ``stop`` is set (after the next event).
    """
    api = new_client(h.kubeconfig)
    lister: Callable[..., Any]
    args: tuple[Any, ...]
    if batch:
        batch_api = client.BatchV1Api(api)
        listed_jobs: Any = batch_api.list_namespaced_job(ns, limit=1)
        rv = listed_jobs.metadata.resource_version
        lister, args, is_done = batch_api.list_namespaced_job, (ns,), job_done
    else:
        custom = client.CustomObjectsApi(api)
        listed = custom.list_namespaced_custom_object(G, V, ns, names.PLURAL_LEASED_JOBS, limit=1)
        rv = cast("dict[str, Any]", listed)["metadata"]["resourceVersion"]
        lister = custom.list_namespaced_custom_object
        args = (G, V, ns, names.PLURAL_LEASED_JOBS)
        is_done = leased_job_done
    stream = watch.Watch()
    ready.set()
    for event in stream.stream(lister, *args, resource_version=rv, timeout_seconds=300):
        obj: Any = event["object"]
        if batch:
            obj = api.sanitize_for_serialization(obj)
        name = obj["metadata"]["name"]
        if name.startswith(prefix) and name not in done and is_done(obj):
            done[name] = time.monotonic()
        if len(done) >= n or stop.is_set():
            stream.stop()
            break


def per_job(rows: Sequence[dict[str, Any]]) -> dict[str, Counter[str]]:
    """Requests per job by kind and size: ``"<kind> x<n>"`` -> ``"<verb> <resource>"`` -> mean."""
    out: dict[str, Counter[str]] = {}
    for row in rows:
        key = f"{row['kind']} x{row['n']}"
        out.setdefault(key, Counter()).update(row["requests"])
    return out


def _writes(requests: Counter[str], exclude: Sequence[str] = BACKGROUND) -> float:
    return sum(
        v
        for k, v in requests.items()
        if k.split(" ")[0] in WRITE_VERBS and k.split(" ")[1].split("/")[0] not in exclude
    )


def _gets(requests: Counter[str], exclude: Sequence[str] = BACKGROUND) -> float:
    return sum(
        v
        for k, v in requests.items()
        if k.split(" ")[0] == "GET" and k.split(" ")[1].split("/")[0] not in exclude
    )


LOCAL_SETTING: Final = "Same local control plane, same pod runner"


def _own_gets(requests: Counter[str]) -> float:
    """GETs of the LeasedJob's own objects: its job and its lease (the operator's reads)."""
    own = (names.PLURAL_LEASED_JOBS, names.PLURAL_JOB_LEASES)
    return sum(
        v
        for k, v in requests.items()
        if k.split(" ")[0] == "GET" and k.split(" ")[1].split("/")[0] in own
    )


def section(
    rows: Sequence[dict[str, Any]],
    title: str = "LeasedJob vs batch/v1 Job",
    setting: str = LOCAL_SETTING,
) -> list[str]:
    """The Markdown lines of the LeasedJob vs batch/v1 Job section.

    Args:
        rows: :func:`run`'s rows.
        title: the section's heading.
        setting: what both kinds ran on, opening the section's first sentence.
    """
    lines = [
        f"## {title}",
        "",
        f"{setting}, same command (`sh -c '{SLEEP}'`; the"
        f" LeasedJob's under `leasehold run`, `leaseDurationSeconds: {LEASE_SECONDS}`),"
        " n jobs created at once by 16 threads; done = the Job's `Complete` condition /"
        " the LeasedJob's `Succeeded` phase, seen through a watch. Requests: the API"
        " server's `apiserver_request_total`, before the creates and"
        f" {SETTLE_SECONDS:g} s after the last done, the benchmark's own creates and watch"
        f" taken out; writes and GETs exclude {', '.join(BACKGROUND)} (node and leader"
        " election heartbeats run regardless; Events listed apart). Controller CPU: the"
        " operator's process for LeasedJobs, the whole kube-controller-manager for Jobs.",
        "",
    ]
    table = []
    for row in rows:
        req: Counter[str] = row["requests"]
        n = row["n"]
        lat: Summary = row["latency"]
        events = sum(v for k, v in req.items() if k.split(" ")[1].startswith("events"))
        table.append(
            [
                row["kind"],
                str(n),
                row["round"],
                f"{lat.p50:.2f}",
                f"{lat.p99:.2f}",
                f"{row['total']:.2f}",
                str(row["missing"]),
                f"{_writes(req) / n:.1f}",
                f"{_gets(req) / n:.1f}",
                f"{events / n:.1f}",
                f"{1000 * row['controller_cpu'] / n:.0f}",
                f"{row['cpu'].get('kube-apiserver', 0):.2f}",
                f"{row['cpu'].get('machine', 0):.2f}",
            ]
        )
    lines += [
        markdown_table(
            [
                "kind",
                "n",
                "round",
                "p50 s",
                "p99 s",
                "total s",
                "not done",
                "writes/job",
                "GETs/job",
                "events/job",
                "controller CPU ms/job",
                "API server cores",
                "machine cores",
            ],
            table,
        ),
        "",
        "Requests per job by verb and resource (all rounds of a size summed, / jobs):",
        "",
    ]
    by_kind = per_job(rows)
    jobs_of = Counter[str]()
    for row in rows:
        jobs_of[f"{row['kind']} x{row['n']}"] += row["n"]
    keys = sorted({k for c in by_kind.values() for k in c})
    lines += [
        markdown_table(
            ["request", *by_kind],
            [[k, *(f"{by_kind[c][k] / jobs_of[c]:.2f}" for c in by_kind)] for k in keys],
        ),
        "",
    ]
    lines += [
        "Where the time goes: p50 of each step, seconds (create -> the pod object seen ->"
        " the pod Running (process started) -> the pod Succeeded (process exited) -> the"
        " job done), all rounds of a kind and size pooled:",
        "",
    ]
    step_names = [f"-> {s}" for s in (*STAGES, "done")]
    step_rows = []
    for key in by_kind:
        mine = [r for r in rows if f"{r['kind']} x{r['n']}" == key]
        step_rows.append(
            [
                key,
                *(f"{sum(r['stages'][st].p50 for r in mine) / len(mine):.2f}" for st in step_names),
            ]
        )
    lines += [markdown_table(["jobs", *step_names], step_rows), ""]
    lines += targets(rows)
    return lines


def targets(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The target lines: p50 ratio, writes ratio (JobLease renewals cannot be told apart)."""
    out = []
    sizes = sorted({r["n"] for r in rows})
    for n in sizes:
        b = [r for r in rows if r["n"] == n and r["kind"] == KINDS[0]]
        lj = [r for r in rows if r["n"] == n and r["kind"] == KINDS[1]]
        if not b or not lj:
            continue
        p50 = sum(r["latency"].p50 for r in lj) / sum(r["latency"].p50 for r in b)
        wb = sum(_writes(r["requests"]) for r in b) / sum(r["n"] for r in b)
        wl = sum(_writes(r["requests"]) for r in lj) / sum(r["n"] for r in lj)
        gl = sum(_gets(r["requests"]) for r in lj) / sum(r["n"] for r in lj)
        gb = sum(_gets(r["requests"]) for r in b) / sum(r["n"] for r in b)
        own = sum(_own_gets(r["requests"]) for r in lj) / sum(r["n"] for r in lj)
        # Renewals: the JobLease PATCHes beyond one claim, one bind and one
        # completion per job (each job here has one attempt): the worker's
        # confirm at start and any renewal of a long run.
        lease_patches = sum(r["requests"][f"PATCH {names.PLURAL_JOB_LEASES}"] for r in lj)
        renewals = max(0.0, lease_patches / sum(r["n"] for r in lj) - 3)
        ratio = (wl - renewals) / wb
        out += [
            f"- n={n}: LeasedJob create -> done p50 / Job's = **{p50:.2f}x** (target <= 1.1x:"
            f" {'met' if p50 <= 1.1 else 'missed'}); writes per job {wl:.1f} vs {wb:.1f} ="
            f" {wl / wb:.2f}x, renewals ({renewals:.2f} per job) excluded {wl - renewals:.1f}"
            f" vs {wb:.1f} = **{ratio:.2f}x** (target <= 1.2x:"
            f" {'met' if ratio <= 1.2 else 'missed'});"
            f" GETs of its LeasedJob and JobLease per LeasedJob **{own:.3f}** (target <= 1:"
            f" {'met' if own <= 1 else 'missed'}; all GETs {gl:.1f} per LeasedJob, {gb:.1f} per"
            " Job: the rest are the kubelet's and the clients' own, the same for both kinds).",
        ]
    return out
