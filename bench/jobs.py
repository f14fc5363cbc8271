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
import contextlib
import os
import re
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from bench.harness import (
    CLK_TCK,
    REPO,
    WRITE_VERBS,
    G,
    Harness,
    Scrape,
    V,
    all_requests,
    apiserver_samples,
    follow,
    log,
    new_client,
)
from bench.stats import Summary, markdown_table, summarize
from leasehold import names
from leasehold.worker.startup import STEPS, parse_line
from localcluster import tools_bin_dir
from operatorproc import OperatorProcess
from podrunner import PodRunner
from podrunner.runner import CPU_FILE, STARTED_FILE

SLEEP: Final = "date +%s.%N; sleep 1"
"""The job's shell command, for both kinds: its start moment first (the pod's log), then 1 s."""
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
        manager for Jobs), ``cpu`` (cores per process over the round), and
        what :func:`measure` adds: ``load`` (1-minute load average before
        the creates and after the last done), ``alt_latency`` (create ->
        the Job counted ``succeeded``, or the LeasedJob's lease completed),
        ``lease_writes`` (JobLease versions by what they were),
        ``refused`` (JobLease writes the API server refused),
        ``startup`` (pod spawn -> the command's start, seconds, per pod),
        ``steps`` (``leasehold run``'s start-up lines).

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
            rows.append(measure(h, ns, kind, n, f"r{r}n{n}", runner=runner))
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


def job_succeeded(obj: dict[str, Any]) -> bool:
    """Whether a batch/v1 Job (as a dict) says it succeeded: ``SuccessCriteriaMet`` or ``Complete``.

    The job controller sets ``SuccessCriteriaMet`` once its pod succeeded, and
    ``Complete`` (with ``succeeded: 1``) only after the pod's tracking finalizer
    is removed and the pod counted, a sync or two later.
    """
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(
        c.get("type") in ("SuccessCriteriaMet", "Complete") and c.get("status") == "True"
        for c in conditions
    )


def leased_job_done(obj: dict[str, Any]) -> bool:
    """Whether a LeasedJob (as a dict) is ``Succeeded``."""
    return bool((obj.get("status") or {}).get("phase") == "Succeeded")


STAGES: Final = ("pod created", "pod Running", "pod Succeeded")
"""Pod moments seen by a watch, per job (the job's first pod)."""


FAILED_LOG_LINES: Final = 12
"""Lines kept of a failed pod's log (its wrapper's last words: why the lease was lost)."""


def keep_failed_log(core: Any, ns: str, pod: str, logs: dict[str, str]) -> None:
    """Put the last lines of a failed pod's log into ``logs`` before anyone deletes the pod."""
    try:
        text = core.read_namespaced_pod_log(pod, ns, tail_lines=FAILED_LOG_LINES)
    except ApiException as exc:
        text = f"(its log could not be read: {exc.status} {exc.reason})"
    logs[pod] = str(text)


def watch_pods(
    h: Harness,
    batch: bool,
    ns: str,
    prefix: str,
    seen: dict[str, dict[str, float]],
    stop: threading.Event,
    ready: threading.Event,
    failed_logs: dict[str, str] | None = None,
) -> None:
    """Note in ``seen`` (job name -> stage -> monotonic time) when its pod reached each stage.

    With ``failed_logs``, the last lines of each pod seen ``Failed`` are read
    at once into it (pod name -> text): the operator deletes a fenced pod
    soon after its lease is reclaimed, and its log with it.
    """
    core = client.CoreV1Api(new_client(h.kubeconfig))
    label = "job-name" if batch else names.LABEL_JOB
    listed: Any = core.list_namespaced_pod(ns, limit=1)
    ready.set()
    for _, pod in follow(
        core.list_namespaced_pod,
        ns,
        resource_version=listed.metadata.resource_version,
        stop=stop,
    ):
        at = time.monotonic()
        job = (pod.metadata.labels or {}).get(label, "")
        if job.startswith(prefix):
            stages = seen.setdefault(job, {})
            stages.setdefault(STAGES[0], at)
            phase = pod.status.phase if pod.status else None
            if phase in ("Running", "Succeeded"):
                stages.setdefault(STAGES[1], at)
            if phase == "Succeeded":
                stages.setdefault(STAGES[2], at)
            name = pod.metadata.name
            if phase == "Failed" and failed_logs is not None and name not in failed_logs:
                failed_logs[name] = ""
                threading.Thread(
                    target=keep_failed_log, args=(core, ns, name, failed_logs), daemon=True
                ).start()


def measure(
    h: Harness,
    ns: str,
    kind: str,
    n: int,
    tag: str,
    shape: PodShape = LOCAL_PODS,
    runner: PodRunner | None = None,
) -> dict[str, Any]:
    """Create ``n`` jobs of ``kind`` (one of :data:`KINDS`) in ``shape``'s pods at once; time each.

    Args:
        h: the run's harness.
        ns: the namespace.
        kind: one of :data:`KINDS`.
        n: jobs created at once.
        tag: the round's part of the jobs' names.
        shape: the pods' image and service account.
        runner: the pod runner playing the pods (its folders give each pod's
            spawn moment and log); ``None`` (kind): no start-up figures.

    Returns:
        One row as :func:`run` describes it.
    """
    batch = kind == KINDS[0]
    prefix = f"{'b' if batch else 'l'}{tag}-"
    job_names = [f"{prefix}{i}" for i in range(n)]
    created: dict[str, float] = {}
    done: dict[str, float] = {}
    counted: dict[str, float] = {}
    status_writes: Counter[str] = Counter()
    stop = threading.Event()
    ready = threading.Event()
    watcher = threading.Thread(
        target=watch_done,
        args=(h, ns, batch, prefix, done, n, stop, ready, counted, status_writes),
        daemon=True,
    )
    watcher.start()
    pods: dict[str, dict[str, float]] = {}
    pods_ready = threading.Event()
    failed_logs: dict[str, str] = {}
    pod_watcher = threading.Thread(
        target=watch_pods,
        args=(h, batch, ns, prefix, pods, stop, pods_ready, failed_logs),
        daemon=True,
    )
    pod_watcher.start()
    versions = LeaseVersions(prefix)
    leases_ready = threading.Event()
    if not batch:
        threading.Thread(
            target=watch_leases, args=(h, ns, versions, stop, leases_ready), daemon=True
        ).start()
    else:
        leases_ready.set()
    ready.wait(10)
    pods_ready.wait(10)
    leases_ready.wait(10)
    load_before = os.getloadavg()[0]
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
    load_after = os.getloadavg()[0]
    cpu_after = h.meter.snapshot()
    time.sleep(SETTLE_SECONDS)
    stop.set()
    server_after = apiserver_samples(h.admin)
    every = all_requests(server_before, server_after)
    # Ours: the creates and the watcher's list + watch.
    every.subtract({f"POST {'jobs' if batch else names.PLURAL_LEASED_JOBS}": n})
    every.subtract(
        {
            f"LIST {'jobs' if batch else names.PLURAL_LEASED_JOBS}": 1,
            f"WATCH {'jobs' if batch else names.PLURAL_LEASED_JOBS}": 1,
        }
    )
    if not batch:  # and the lease watch's
        every.subtract(
            {f"LIST {names.PLURAL_JOB_LEASES}": 1, f"WATCH {names.PLURAL_JOB_LEASES}": 1}
        )
    controller = "operator" if not batch else "kube-controller-manager"
    seconds = max(cpu_after.at - cpu_before.at, 1e-9)
    cpu = {
        name: (cpu_after.ticks.get(name, 0) - cpu_before.ticks.get(name, 0)) / CLK_TCK / seconds
        for name in cpu_after.ticks
    }
    cpu["machine"] = (cpu_after.busy - cpu_before.busy) / CLK_TCK / seconds
    latencies = [done[x] - created[x] for x in job_names if x in done]
    if not batch:  # the LeasedJob's other clock: its lease's completion seen
        counted = {x: at for x, at in versions.completed.items() if x in created}
    stages: dict[str, Summary] = {}
    previous = created
    for stage in STAGES:
        at = {x: pods[x][stage] for x in job_names if stage in pods.get(x, {})}
        stages[f"-> {stage}"] = summarize([at[x] - previous[x] for x in at if x in previous])
        previous = at
    stages["-> done"] = summarize([done[x] - previous[x] for x in done if x in previous])
    startup, steps, pod_cpu = (
        pod_startups(runner, ns, prefix) if runner is not None else ([], [], [])
    )
    return {
        "kind": kind,
        "n": n,
        "round": tag,
        "latency": summarize(latencies),
        "alt_latency": summarize([counted[x] - created[x] for x in job_names if x in counted]),
        "stages": stages,
        "total": (max(done.values()) - min(created.values())) if done else float("nan"),
        "missing": n - len(latencies),
        "requests": +every,
        "refused": refused_requests(server_before, server_after, names.PLURAL_JOB_LEASES),
        "lease_writes": Counter(versions.kinds),
        "status_writes": status_writes,
        "load": (load_before, load_after),
        "startup": startup,
        "steps": steps,
        "pod_cpu": pod_cpu,
        "failed_logs": dict(failed_logs),
        "controller_cpu": (cpu_after.ticks.get(controller, 0) - cpu_before.ticks.get(controller, 0))
        / CLK_TCK,
        "cpu": cpu,
    }


def refused_requests(before: Scrape, after: Scrape, resource: str) -> int:
    """Write requests on ``resource`` the API server answered with a 4xx/5xx between two scrapes.

    A refused write is still a write request the API server served (a
    JobLease renewal refused as ``NOT_BOUND``, a claim that lost a race).
    """
    total = 0
    for sign, scrape in ((-1, before), (1, after)):
        for sample in scrape.samples:
            labels = sample.labels
            if (
                sample.name == "apiserver_request_total"
                and labels.get("resource") == resource
                and labels.get("verb") in WRITE_VERBS
                and not labels.get("code", "200").startswith("2")
            ):
                total += sign * round(sample.value)
    return max(total, 0)


LEASE_WRITE_KINDS: Final = (
    "create",
    "claim",
    "confirm renewal",
    "renewal",
    "complete",
    "release or reclaim",
    "other",
)
"""What a JobLease version was, judged from the one before it (:class:`LeaseVersions`)."""


class LeaseVersions:
    """Every version of the round's JobLeases, each judged by what changed from the one before.

    A watch delivers every version of an object in order, so each accepted
    write is seen once: created; a token bump (claim); a completion recorded
    (complete); the holder gone without a completion (release or reclaim);
    the same holder and token with a new ``renewTime`` (a renewal: only a
    worker renews, and the first one after a claim is its confirm renewal);
    anything else (other). Refused writes make no version
    (:func:`refused_requests` counts them).

    Args:
        prefix: the round's job (and lease) name prefix.
    """

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.kinds: Counter[str] = Counter()
        self.completed: dict[str, float] = {}
        self._last: dict[str, dict[str, Any]] = {}
        self._renewed: set[tuple[str, int]] = set()

    def see(self, event_type: str, lease: dict[str, Any], at: float) -> None:
        """Judge one watch event (``ADDED``/``MODIFIED``/``DELETED``/``LISTED``) seen at ``at``.

        ``at`` is monotonic. A ``LISTED`` lease (a relist after ``410 Gone``)
        unchanged since its last version is no write.
        """
        name = str(lease["metadata"]["name"])
        if not name.startswith(self.prefix) or event_type == "DELETED":
            return
        spec = lease.get("spec") or {}
        old = self._last.get(name)
        if event_type == "LISTED" and old == spec:
            return
        self._last[name] = spec
        self.kinds[self.judge(old, spec, name)] += 1
        if spec.get("completion") and name not in self.completed:
            self.completed[name] = at

    def judge(self, old: dict[str, Any] | None, new: dict[str, Any], name: str) -> str:
        """What the write that made ``new`` from ``old`` was (one of :data:`LEASE_WRITE_KINDS`)."""
        if old is None:
            return "create"
        token = int(new.get("fencingToken") or 0)
        if token > int(old.get("fencingToken") or 0):
            return "claim"
        if new.get("completion") and not old.get("completion"):
            return "complete"
        if old.get("holderIdentity") and not new.get("holderIdentity"):
            return "release or reclaim"
        if (
            new.get("holderIdentity") == old.get("holderIdentity")
            and new.get("renewTime") != old.get("renewTime")
            and new.get("holderIdentity")
        ):
            first = (name, token) not in self._renewed
            self._renewed.add((name, token))
            return "confirm renewal" if first else "renewal"
        return "other"


def watch_leases(
    h: Harness, ns: str, versions: LeaseVersions, stop: threading.Event, ready: threading.Event
) -> None:
    """Feed every JobLease version of ``ns`` to ``versions`` until ``stop`` is set."""
    custom = client.CustomObjectsApi(new_client(h.kubeconfig))
    listed = custom.list_namespaced_custom_object(G, V, ns, names.PLURAL_JOB_LEASES, limit=1)
    rv = cast("dict[str, Any]", listed)["metadata"]["resourceVersion"]
    ready.set()
    for event_type, lease in follow(
        custom.list_namespaced_custom_object,
        G,
        V,
        ns,
        names.PLURAL_JOB_LEASES,
        resource_version=rv,
        stop=stop,
    ):
        versions.see(event_type, lease, time.monotonic())


_STAMP: Final = re.compile(r"^\d{9,}\.\d+$")


def pod_startups(
    runner: PodRunner, ns: str, prefix: str
) -> tuple[list[float], list[dict[str, float]], list[float]]:
    """Per pod of the round: spawn -> command start (s), ``leasehold run``'s lines, CPU (s).

    The pod runner stamps the spawn (``started``) and the process tree's CPU
    (``cpu``, from ``wait4``); the command prints its own start first
    (``date +%s.%N``); the wrapper logs its start-up line.
    """
    startups: list[float] = []
    steps: list[dict[str, float]] = []
    cpu: list[float] = []
    for folder in sorted(runner.pods_dir.glob(f"{ns}_{prefix}*")):
        try:
            spawned = float((folder / STARTED_FILE).read_text())
            text = (folder / "log").read_text(errors="replace")
        except (OSError, ValueError):
            continue
        stamps = [float(x) for x in text.splitlines() if _STAMP.match(x.strip())]
        if stamps:
            startups.append(stamps[0] - spawned)
        line = parse_line(text)
        if line is not None:
            steps.append(line)
        with contextlib.suppress(OSError, ValueError):
            cpu.append(float((folder / CPU_FILE).read_text()))
    return startups, steps, cpu


def watch_done(
    h: Harness,
    ns: str,
    batch: bool,
    prefix: str,
    done: dict[str, float],
    n: int,
    stop: threading.Event,
    ready: threading.Event,
    counted: dict[str, float] | None = None,
    status_writes: Counter[str] | None = None,
) -> None:
    """Note in ``done`` (name -> monotonic time) each job of ``prefix`` first seen done.

    Sets ``ready`` once the watch's starting point is listed; returns when
    ``n`` jobs are done or ``stop`` is set (after the next event). A Job's
    first sign of success (:func:`job_succeeded`, before ``Complete``) is noted
    in ``counted``, when given. Each new version's status
    change (:func:`status_change`) is counted in ``status_writes``, when given.
    """
    last: dict[str, dict[str, Any]] = {}
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
    ready.set()
    for _, obj in follow(lister, *args, resource_version=rv, stop=stop):
        if batch:
            obj = api.sanitize_for_serialization(obj)
        name = obj["metadata"]["name"]
        if status_writes is not None and name.startswith(prefix):
            status = obj.get("status") or {}
            change = status_change(last.get(name), status)
            if change:
                status_writes[change] += 1
            last[name] = status
        if (
            batch
            and counted is not None
            and name.startswith(prefix)
            and name not in counted
            and job_succeeded(obj)
        ):
            counted[name] = time.monotonic()
        if name.startswith(prefix) and name not in done and is_done(obj):
            done[name] = time.monotonic()
        if len(done) >= n and (counted is None or not batch or len(counted) >= n):
            break


def status_change(old: dict[str, Any] | None, new: dict[str, Any]) -> str:
    """What a job's new version changed in its status: ``"active,conditions[Running]"``.

    Top-level status fields whose value changed, conditions by type (added or
    flipped); ``""`` when the status did not change (a spec or metadata write).
    """
    old = old or {}
    keys = sorted(k for k in {*old, *new} if k != "conditions" and old.get(k) != new.get(k))

    def conditions(status: dict[str, Any]) -> dict[str, str]:
        return {str(c.get("type")): str(c.get("status")) for c in status.get("conditions") or []}

    before, after = conditions(old), conditions(new)
    flipped = sorted(t for t in after if before.get(t) != after[t])
    if flipped:
        keys.append(f"conditions[{'+'.join(flipped)}]")
    return ",".join(keys)


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


def _writes_all(requests: Counter[str]) -> float:
    """Every write request of every client: Events, heartbeats and refused writes included."""
    return sum(v for k, v in requests.items() if k.split(" ")[0] in WRITE_VERBS)


def _renewals(row: dict[str, Any]) -> int:
    """Accepted JobLease renewals in a round (the confirm renewals included)."""
    writes: Counter[str] = row.get("lease_writes") or Counter()
    return writes["confirm renewal"] + writes["renewal"]


def _median(values: Sequence[float]) -> float:
    return summarize(list(values)).p50 if values else float("nan")


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
        " the LeasedJob's `Succeeded` phase, seen through a watch (*other clock*: the Job's"
        " `SuccessCriteriaMet` / the LeasedJob's lease completion seen). Requests: the"
        " API server's `apiserver_request_total`, before the creates and"
        f" {SETTLE_SECONDS:g} s after the last done, the benchmark's own creates and"
        " watches taken out. *writes all*: every write request of every client (Events,"
        " node and leader-election heartbeats, refused writes included); *writes*:"
        f" without {', '.join(BACKGROUND)} (heartbeats run regardless; Events listed"
        " apart), renewals included; *renewals*: JobLease versions judged from a watch of"
        " every lease version (same holder and token, a new `renewTime`: only a worker"
        " renews; the first after a claim is its confirm renewal); *refused*: JobLease"
        " writes answered 4xx (counted in the writes: the API server served them)."
        " *start-up*: the pod runner's spawn stamp to the command's own `date +%s.%N`;"
        " *pod CPU*: user + system seconds of each pod's process tree (the runner's"
        " `wait4`), summed / jobs."
        " Load: the 1-minute load average before the creates -> after the last done."
        " Controller CPU: the operator's process for LeasedJobs, the whole"
        " kube-controller-manager for Jobs.",
        "",
    ]
    table = []
    for row in rows:
        req: Counter[str] = row["requests"]
        n = row["n"]
        lat: Summary = row["latency"]
        alt: Summary | None = row.get("alt_latency")
        load = row.get("load")
        renewals = _renewals(row)
        table.append(
            [
                row["kind"],
                str(n),
                row["round"],
                f"{load[0]:.1f} -> {load[1]:.1f}" if load else "-",
                f"{lat.p50:.2f}",
                f"{lat.p99:.2f}",
                f"{alt.p50:.2f}" if alt and alt.n else "-",
                f"{row['total']:.2f}",
                str(row["missing"]),
                f"{_writes_all(req) / n:.1f}",
                f"{_writes(req) / n:.1f}",
                f"{renewals / n:.2f}",
                f"{row.get('refused', 0) / n:.2f}",
                f"{(_writes(req) - renewals) / n:.1f}",
                f"{_gets(req) / n:.1f}",
                f"{_median(row.get('startup') or []):.3f}" if row.get("startup") else "-",
                f"{sum(row['pod_cpu']) / n:.3f}" if row.get("pod_cpu") else "-",
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
                "load 1m",
                "p50 s",
                "p99 s",
                "p50 s, other clock",
                "total s",
                "not done",
                "writes all/job",
                "writes/job",
                "renewals/job",
                "refused lease writes/job",
                "writes/job, renewals excluded",
                "GETs/job",
                "start-up p50 s",
                "pod CPU s/job",
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
    leased = [r for r in rows if r["kind"] == KINDS[1] and r.get("lease_writes") is not None]
    if leased:
        lines += [
            "JobLease writes per LeasedJob, by what each accepted version was (a watch of"
            " every version), and the refused ones (the API server's 4xx count):",
            "",
        ]
        lease_rows = []
        for n in sorted({r["n"] for r in leased}):
            mine = [r for r in leased if r["n"] == n]
            total = Counter[str]()
            for r in mine:
                total.update(r["lease_writes"])
            jobs = sum(r["n"] for r in mine)
            refused = sum(r.get("refused", 0) for r in mine)
            lease_rows.append(
                [
                    f"LeasedJob x{n}",
                    *(f"{total[k] / jobs:.2f}" for k in LEASE_WRITE_KINDS),
                    f"{refused / jobs:.2f}",
                ]
            )
        lines += [markdown_table(["jobs", *LEASE_WRITE_KINDS, "refused"], lease_rows), ""]
    status_rows = []
    for key in by_kind:
        mine = [r for r in rows if f"{r['kind']} x{r['n']}" == key]
        total = Counter[str]()
        for r in mine:
            total.update(r.get("status_writes") or Counter())
        jobs = sum(r["n"] for r in mine)
        if total:
            status_rows.append(
                [
                    key,
                    f"{sum(total.values()) / jobs:.2f}",
                    "; ".join(f"{k} {v / jobs:.2f}" for k, v in total.most_common(6)),
                ]
            )
    if status_rows:
        lines += [
            "Status versions per job seen by the done watch (until the job was done), by"
            " what each changed (top-level fields; conditions by type added or flipped):",
            "",
            markdown_table(["jobs", "status versions/job", "what changed (per job)"], status_rows),
            "",
        ]
    lines += [
        "Where the time goes: p50 of each step, seconds (create -> the pod object seen ->"
        " the pod Running (process started) -> the pod Succeeded (process exited) -> the"
        " job done), all rounds of a kind and size pooled; start-up: spawn -> the command's"
        " start; `leasehold run`'s own steps (p50, its start-up line): process (interpreter"
        " up to `main`) / imports / environment / confirm (and any wait for the claim) /"
        " child, and its confirm renewals / reads per pod:",
        "",
    ]
    step_names = [f"-> {s}" for s in (*STAGES, "done")]
    step_rows = []
    for key in by_kind:
        mine = [r for r in rows if f"{r['kind']} x{r['n']}" == key]
        starts = [x for r in mine for x in (r.get("startup") or [])]
        steps = [x for r in mine for x in (r.get("steps") or [])]
        step_rows.append(
            [
                key,
                *(f"{sum(r['stages'][st].p50 for r in mine) / len(mine):.2f}" for st in step_names),
                f"{_median(starts):.3f}" if starts else "-",
                " / ".join(f"{_median([x[k] for x in steps if k in x]):.3f}" for k in STEPS)
                if steps
                else "-",
                f"{sum(x.get('tries', 0) for x in steps) / len(steps):.2f} /"
                f" {sum(x.get('reads', 0) for x in steps) / len(steps):.2f}"
                if steps
                else "-",
            ]
        )
    lines += [
        markdown_table(
            [
                "jobs",
                *step_names,
                "start-up",
                "`leasehold run` steps",
                "confirm renewals / reads",
            ],
            step_rows,
        ),
        "",
    ]
    lines += targets(rows)
    return lines


def _ratio(lj: float, b: float) -> str:
    return f"{lj / b:.2f}x" if b else "-"


def targets(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The target lines (issue 29), per size: p50, writes with and without renewals, GETs.

    Each ratio is LeasedJob / Job over the same size's rounds in this run,
    with the load those rounds ran at, and the figures that tell why a
    measurement with another clock or another count disagrees.
    """
    out = []
    sizes = sorted({r["n"] for r in rows})
    for n in sizes:
        b = [r for r in rows if r["n"] == n and r["kind"] == KINDS[0]]
        lj = [r for r in rows if r["n"] == n and r["kind"] == KINDS[1]]
        if not b or not lj:
            continue
        nb, nl = sum(r["n"] for r in b), sum(r["n"] for r in lj)
        p50b = sum(r["latency"].p50 for r in b) / len(b)
        p50l = sum(r["latency"].p50 for r in lj) / len(lj)
        p99b = sum(r["latency"].p99 for r in b) / len(b)
        p99l = sum(r["latency"].p99 for r in lj) / len(lj)
        alt_b = [r["alt_latency"].p50 for r in b if r.get("alt_latency") and r["alt_latency"].n]
        alt_l = [r["alt_latency"].p50 for r in lj if r.get("alt_latency") and r["alt_latency"].n]
        wb = sum(_writes(r["requests"]) for r in b) / nb
        wl = sum(_writes(r["requests"]) for r in lj) / nl
        ab = sum(_writes_all(r["requests"]) for r in b) / nb
        al = sum(_writes_all(r["requests"]) for r in lj) / nl
        renewals = sum(_renewals(r) for r in lj) / nl
        refused = sum(r.get("refused", 0) for r in lj) / nl
        gl = sum(_gets(r["requests"]) for r in lj) / nl
        gb = sum(_gets(r["requests"]) for r in b) / nb
        own = sum(_own_gets(r["requests"]) for r in lj) / nl
        loads = [x for r in (*b, *lj) if r.get("load") for x in r["load"]]
        load = f"{min(loads):.1f}-{max(loads):.1f}" if loads else "?"
        p50 = p50l / p50b
        ex = (wl - renewals) / wb
        out += [
            f"- n={n} (load {load}): LeasedJob create -> done p50 {p50l:.2f} s vs"
            f" {p50b:.2f} s = **{p50:.2f}x** (target <= 1.0x: {'met' if p50 <= 1.0 else 'missed'});"
            f" p99 {_ratio(p99l, p99b)}; writes per job renewals excluded"
            f" {wl - renewals:.1f} vs {wb:.1f} = **{ex:.2f}x** (target <= 1.1x:"
            f" {'met' if ex <= 1.1 else 'missed'}), with renewals ({renewals:.2f} per job)"
            f" {wl:.1f} vs {wb:.1f} = **{wl / wb:.2f}x** (target <= 1.3x:"
            f" {'met' if wl / wb <= 1.3 else 'missed'}); all requests of all clients"
            f" (Events, heartbeats, refused writes: {refused:.2f} refused lease writes per"
            f" job) {al:.1f} vs {ab:.1f} = {_ratio(al, ab)}; GETs per job {gl:.1f} vs"
            f" {gb:.1f} (of its LeasedJob and JobLease: {own:.2f}).",
        ]
        if alt_b and alt_l:
            ob, ol = sum(alt_b) / len(alt_b), sum(alt_l) / len(alt_l)
            starts_l = [x for r in lj for x in (r.get("startup") or [])]
            starts_b = [x for r in b for x in (r.get("startup") or [])]
            out += [
                f"  - the other clock: stopped at the Job's `SuccessCriteriaMet` ({p50b - ob:.2f}"
                " s before its `Complete`: the pod's tracking finalizer removed and the pod"
                " counted a sync later) and at the LeasedJob's lease completion seen:"
                f" {ol:.2f} s vs {ob:.2f} s = **{_ratio(ol, ob)}**. A measurement that stops a"
                " Job's clock at its first sign of success rather than at `Complete` sees"
                " this ratio, not the one above."
                + (
                    f" Start-up (spawn -> command) p50 {_median(starts_l):.3f} s under"
                    f" `leasehold run` vs {_median(starts_b):.3f} s for `sh -c`."
                    if starts_l and starts_b
                    else ""
                ),
            ]
    return out
