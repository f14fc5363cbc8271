"""``make chaos``: many LeasedJobs under injected faults, then a checked history.

Brings up a local control plane, PostgreSQL, the pod runner and the operator;
runs ``--jobs`` LeasedJobs whose workers (:mod:`chaos.worker`) make fenced
writes to PostgreSQL; races pull-mode claimers against the operator; and
injects faults on a seeded, logged schedule:

* ``pause``: SIGSTOP a random worker longer than its lease, then SIGCONT;
* ``kill``: SIGKILL a random worker;
* clock skew: workers run under libfaketime at +1 h / -1 h / 0 (per job), the
  operator at +1 h, and the operator is restarted at -1 h mid-run (a wall-clock
  step between two lifetimes; see "Clock assumptions");
* ``operator-restart`` (SIGKILL + start), ``apiserver-restart``, ``etcd-restart``;
* ``hold-api``/``hold-db`` (traffic held for a few seconds, then delivered),
  ``drop-api``/``drop-db`` (open connections cut, so replies to renewals,
  releases or writes in flight are lost), ``delay-db`` (added latency);
* ``evict``: a running worker's pod evicted (``POST pods/eviction``, as
  ``kubectl drain`` does);
* ``kueue-restart``: the Kueue manager SIGKILLed and started again (with
  ``--kueue``, the default).

The workload: plain LeasedJobs, jobs suspended once while they run and
resumed a few seconds later (``spec.suspend``), Indexed jobs (3 completions,
2 at a time; a lease per index; every other one with a ``successPolicy`` of
2 succeeded indexes, so the index still running then is stopped), and one LeasedCronJob per
``--cron-policies`` entry (Forbid, Replace, Allow; schedule ``* * * * *``)
whose runs work for about ``--cron-hold-seconds`` under their lease, so a run
often meets the next schedule time, plus one whose runs have two completions
(Indexed, ``--cron-indexed-policy``, default Replace); the runs of a cron job
(each index's worker too) write to one target key (``namespace/<cron>``),
their shared fencing domain. Some Indexed
jobs and cron runs are suspended and resumed as well. With ``--kueue`` (the
default; Kueue's manager is built by ``hack/kueue/build.sh``, cached, and runs
as a local process, :mod:`kueueproc`) every tenth job is queued in a LocalQueue
whose ClusterQueue has quota for two of them, half at a low and half at a high
priority, so a high one preempts a running low one when the quota is used
(docs/model.md, "Queued by Kueue"). The cron jobs are
suspended when the faulty phase ends, so the drain ends.

``--scenario NAME`` replaces the random faults by a named incident's fault
schedule (:mod:`chaos.scenarios`: ``partition-during-write``,
``gc-pause-past-lease``, ``apiserver-restart-during-renew``).

Workers reach the API server and PostgreSQL through the fault proxies; the
operator talks to the API server directly. Afterwards :mod:`chaos.judge`
judges the history (JSON lines, ``history.jsonl`` in the run's folder) with
the project's checker and with porcupine, and the run prints the table; exit
code 1 unless both find no violation (porcupine's visualisation of a failure
is written next to the log, ``porcupine.html``).

Clock assumptions (what the protocol needs, and what is tested; see
``docs/architecture.md``, "How expiry is judged"): expiry is judged on
monotonic clocks, so wall clocks may be off by any amount and may step;
monotonic clocks may drift in rate by a small fraction (the margins: the
worker gives up ``margin`` before ``duration``, the operator waits
``margin`` after it; a rate error ``r`` is safe while ``r * duration`` is well
under the sum of margins, i.e. far beyond real hardware's ~1e-4). libfaketime
cannot step only the wall clock while keeping a real monotonic clock (its
``DONT_FAKE_MONOTONIC`` mode breaks ``sleep`` here), so processes get a fixed
offset for their lifetime and the step is applied by restarting the operator.

Usage: ``PYTHONPATH=testing .venv/bin/python -m chaos.run --seed 7 [--jobs 200]``
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import psycopg
import yaml
from kubernetes import client, config, watch

from chaos import judge
from chaos.scenarios import LEASE_SECONDS, SCENARIOS
from chaos.worker import SCHEMA_SQL, clock, record, work
from faultproxy import TcpProxy
from kueueproc import (
    KueueProcess,
    create_queue,
    create_workload_priority_class,
    install_crds,
)
from leasehold import worker as sdk
from leasehold.fencing.postgres import install
from leasehold.lease.store import LeaseStore
from leasehold.names import LABEL_COMPLETION_INDEX, LABEL_CRON_JOB
from localcluster import LocalCluster, tools_bin_dir
from localcluster.kubectl import Kubectl
from operatorproc import OperatorProcess
from pgserver import PostgresServer
from podrunner import PodRunner

REPO = Path(__file__).resolve().parents[2]
NS = "chaos"
FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
MAX_ATTEMPTS = 8
# A pod the stand-in kubelet could not start (its set-up hit a control-plane
# restart) stays Pending, as a real one may; the operator waits for it up to
# startupDeadlineSeconds, which must end well within the drain.
STARTUP_SECONDS = 30


def log(message: str) -> None:
    """One line of the run's own log."""
    print(f"[chaos {time.strftime('%H:%M:%S')}] {message}", flush=True)


def faketime_env(offset: str) -> dict[str, str]:
    """Environment that runs a process with its wall clock off by ``offset``."""
    if not offset or not FAKETIME_LIB.exists():
        return {}
    return {"LD_PRELOAD": str(FAKETIME_LIB), "FAKETIME": offset}


SUSPEND_SHARE: dict[str, float] = {
    "suspend": 1.0,
    "indexed": 0.5,
    "indexed-success": 0.5,
    "work-queue": 0.5,
    "cron-run": 0.34,
}
"""The share of each workload kind the suspender suspends once while it runs."""

QUEUED_EVERY: Final = 10
"""With Kueue, every tenth job (index % 10 == 9) is queued."""
QUEUE_QUOTA_JOBS: Final = 2
"""Queued jobs the ClusterQueue admits at once (quota 2 CPUs, each asks 1)."""
QUEUED_HOLD_SECONDS: Final = 6
"""About how long a queued job's attempt works under its lease (its writes spread over it)."""
QUEUED_WRITES: Final = 4
"""Fenced writes per queued attempt."""
QUEUE_NAME: Final = "chaos-queue"
PRIORITIES: Final = {"queued-low": ("chaos-low", 10), "queued-high": ("chaos-high", 1000)}
"""Each queued kind's WorkloadPriorityClass and its value: high preempts low."""

SCALE_SHARE: Final = 0.5
"""The share of the picked Indexed jobs scaled down (3 to 2 completions, with
parallelism; a successPolicy's succeededCount of 2 still fits) and up again
instead of suspended: the removed index's lease is suspended at the store,
then resumed above its old token."""


class Run:
    """One chaos run: the system under test, the workload and the faults."""

    def __init__(self, args: argparse.Namespace, work_dir: Path) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.dir = work_dir
        self.history = str(work_dir / "history.jsonl")
        Path(self.history).touch(mode=0o666)
        os.chmod(work_dir, 0o777)
        self.stop = threading.Event()
        self.jobs: list[str] = []
        self.ns = NS
        """The namespace of the run's jobs (``chaos.kind`` runs in the chart's)."""
        self.prefix = ""
        """What the names of the run's jobs and cron jobs start with."""
        self.kinds: dict[str, str] = {}
        """The workload of each job this run created (``plain``, ``suspend``, ``indexed``, ...)."""
        self.crons: dict[str, str] = {}
        """The run's LeasedCronJobs and their concurrencyPolicy."""
        self.last_phases: dict[str, dict[str, Any]] = {}
        self.crons_suspended = False
        self.kueue: KueueProcess | None = None
        """Kueue's manager, when the run queues jobs (``--kueue``; not ``chaos.kind``)."""

    # -- set-up ---------------------------------------------------------------

    def setup(self) -> None:
        """Start every part, in order."""
        self.cluster = LocalCluster(self.dir / "cluster", stop_with_parent=True)
        self.kubeconfig = self.cluster.start()
        log(f"control plane up: {self.cluster.server}")
        kubectl = str(tools_bin_dir() / "kubectl")
        for path in ("deploy/crds", "deploy/rbac"):
            subprocess.run(
                [
                    kubectl,
                    "--kubeconfig",
                    str(self.kubeconfig),
                    "apply",
                    "--server-side",
                    "-f",
                    str(REPO / path),
                ],
                check=True,
                capture_output=True,
            )
        subprocess.run(
            [
                kubectl,
                "--kubeconfig",
                str(self.kubeconfig),
                "wait",
                "--for=condition=Established",
                "crd/jobleases.leasehold.dev",
                "crd/leasedjobs.leasehold.dev",
            ],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [kubectl, "--kubeconfig", str(self.kubeconfig), "create", "ns", self.ns],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [
                kubectl,
                "--kubeconfig",
                str(self.kubeconfig),
                "-n",
                self.ns,
                "create",
                "rolebinding",
                "w",
                "--clusterrole=leasehold-worker",
                f"--serviceaccount={self.ns}:default",
            ],
            check=True,
            capture_output=True,
        )
        if getattr(self.args, "kueue", False):
            self.start_kueue(Kubectl(Path(kubectl), self.kubeconfig))
        self.pg = PostgresServer(Path(tempfile.mkdtemp(prefix="chaos-pg-", dir="/tmp")))
        dsn = self.pg.start()
        with psycopg.connect(dsn, autocommit=True) as conn:
            install(conn)
            conn.execute(SCHEMA_SQL)
        self.dsn = dsn
        host_port = dsn.split("@", 1)[1].split("/", 1)[0]
        self.db_proxy = TcpProxy("127.0.0.1", int(host_port.rsplit(":", 1)[1])).start()
        self.proxied_dsn = dsn.replace(host_port, f"127.0.0.1:{self.db_proxy.port}")
        api_port = int(self.cluster.server.rsplit(":", 1)[1])
        self.api_proxy = TcpProxy("127.0.0.1", api_port).start()
        proxied = yaml.safe_load(self.kubeconfig.read_text())
        for entry in proxied["clusters"]:
            entry["cluster"]["server"] = f"https://127.0.0.1:{self.api_proxy.port}"
        self.worker_kubeconfig = self.dir / "kubeconfig-proxied"
        self.worker_kubeconfig.write_text(yaml.safe_dump(proxied))
        self.runner = PodRunner(
            self.worker_kubeconfig,
            self.dir / "pods",
            extra_env={"PYTHONPATH": f"{REPO / 'testing'}"},
        ).start()
        self.operator = OperatorProcess(
            self.kubeconfig,
            self.ns,
            self.dir / "operator.log",
            env=faketime_env("+1h"),
            # A restart under load (the run shares its cores) may take a while.
            start_timeout_seconds=120,
        )
        self.operator.start()
        self.api = config.new_client_from_config(config_file=str(self.kubeconfig))
        self.custom = client.CustomObjectsApi(self.api)
        self.store = LeaseStore(self.api)
        log(f"PostgreSQL {dsn}, proxies api:{self.api_proxy.port} db:{self.db_proxy.port}")

    def start_kueue(self, kubectl: Kubectl) -> None:
        """Kueue's CRDs, its manager (before the operator, which looks for it), the queue.

        The ClusterQueue has quota for :data:`QUEUE_QUOTA_JOBS` queued jobs and
        preempts a lower priority within itself (``LowerPriority``).
        """
        install_crds(kubectl)
        kubectl("create", "namespace", "kueue-system", check=False)
        work = self.dir / "kueue"
        work.mkdir(exist_ok=True)
        self.kueue = KueueProcess(self.kubeconfig, work, self.dir / "kueue.log")
        self.kueue.start()
        for name, value in PRIORITIES.values():
            create_workload_priority_class(kubectl, name, value)
        queue = create_queue(kubectl, self.ns, {"cpu": str(QUEUE_QUOTA_JOBS)}, name=QUEUE_NAME)
        record(
            self.history,
            kind="queue-created",
            queue=f"{self.ns}/{queue.local_queue}",
            jobs=QUEUE_QUOTA_JOBS,
        )
        log(f"Kueue up: ClusterQueue {queue.cluster_queue}, quota for {QUEUE_QUOTA_JOBS} jobs")

    def teardown(self) -> None:
        """Stop every part; keep the logs."""
        self.stop.set()
        for part in ("operator", "kueue", "runner", "api_proxy", "db_proxy", "pg", "cluster"):
            thing = getattr(self, part, None)
            if thing is not None:
                try:
                    thing.stop()
                except Exception as exc:
                    log(f"stopping {part}: {exc}")

    # -- workload ---------------------------------------------------------------

    def worker_env(self) -> list[dict[str, str]]:
        """The environment of a worker container (its clock skew drawn per job)."""
        skew = self.rng.choice(["+1h", "-1h", ""])
        return [
            {"name": "CHAOS_DSN", "value": self.proxied_dsn},
            {"name": "CHAOS_HISTORY", "value": self.history},
            {"name": "CHAOS_WRITES", "value": str(self.args.writes)},
            *({"name": k, "value": v} for k, v in faketime_env(skew).items()),
        ]

    def worker_template(self, env: list[dict[str, str]]) -> dict[str, Any]:
        """The pod template of a worker running :mod:`chaos.worker`."""
        return {
            "spec": {
                "terminationGracePeriodSeconds": 2,
                "containers": [
                    {
                        "name": "w",
                        "image": "local",
                        "command": ["python", "-m", "chaos.worker"],
                        "env": env,
                    }
                ],
            }
        }

    def job_spec(self, env: list[dict[str, str]], kind: str = "plain") -> dict[str, Any]:
        """A LeasedJob spec (also a cron job's ``jobTemplate.spec``) for a workload kind."""
        spec: dict[str, Any] = {
            "leaseDurationSeconds": self.lease_seconds(),
            "startupDeadlineSeconds": self.startup_seconds(),
            "maxAttempts": MAX_ATTEMPTS,
            # Reclaims back off too; short delays keep every retry within the drain.
            "backoff": {"initialDelaySeconds": 1, "maxDelaySeconds": 2},
            "template": self.worker_template(env),
        }
        if kind in ("indexed", "indexed-success"):
            spec.update(completions=3, parallelism=2, completionMode="Indexed")
        if kind == "indexed-success":  # done at 2 of 3: the index still running is stopped
            spec.update(successPolicy={"rules": [{"succeededCount": 2}]})
        if kind == "work-queue":  # batch/v1's: 3 slots; the first success stops the idle ones
            spec.update(parallelism=3)
        if kind == "indexed-cron":  # a cron job's runs of two completions, both at once
            spec.update(completions=2, parallelism=2, completionMode="Indexed")
        return spec

    def lease_seconds(self) -> int:
        """The jobs' ``leaseDurationSeconds``."""
        return LEASE_SECONDS

    def startup_seconds(self) -> int:
        """The jobs' ``startupDeadlineSeconds``."""
        return STARTUP_SECONDS

    def create_object(self, plural: str, body: dict[str, Any]) -> None:
        """Create one object of the run's (``chaos.kind`` retries while the API is away)."""
        self.custom.create_namespaced_custom_object(
            "leasehold.dev", "v1alpha1", self.ns, plural, body
        )

    def create_job(self, index: int) -> None:
        """Create one LeasedJob (plain, suspended once, Indexed, work queue) running the worker."""
        name = f"{self.prefix}job-{index:03d}"
        kind = self.rng.choice(["plain", "plain", "suspend", "indexed"])
        if kind == "indexed" and index % 2:  # half the Indexed jobs: a successPolicy
            kind = "indexed-success"
        if kind == "plain" and index % 3 == 2:  # a third of the plain ones: a work queue
            kind = "work-queue"  # (the same choices from the seed: scenarios replay)
        metadata: dict[str, Any] = {"name": name}
        env = self.worker_env()
        spec = self.job_spec(env, kind)
        if self.kueue is not None and index % QUEUED_EVERY == QUEUED_EVERY - 1:
            kind = "queued-high" if (index // QUEUED_EVERY) % 2 else "queued-low"
            metadata["labels"] = {
                "kueue.x-k8s.io/queue-name": QUEUE_NAME,
                "kueue.x-k8s.io/priority-class": PRIORITIES[kind][0],
            }
            # Long enough that a high one often arrives while two hold the quota:
            # the preempted attempt has written, and may write on, under its token.
            queued_env = [
                *(e for e in env if e["name"] != "CHAOS_WRITES"),
                {"name": "CHAOS_WRITES", "value": str(QUEUED_WRITES)},
                {"name": "CHAOS_HOLD_SECONDS", "value": str(QUEUED_HOLD_SECONDS)},
            ]
            spec = self.job_spec(queued_env, "plain")
            # what Kueue admits on: one CPU each, so the quota holds QUEUE_QUOTA_JOBS
            spec["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
        body = {
            "apiVersion": "leasehold.dev/v1alpha1",
            "kind": "LeasedJob",
            "metadata": metadata,
            "spec": spec,
        }
        self.create_object("leasedjobs", body)
        self.jobs.append(name)
        self.kinds[name] = kind
        record(self.history, kind="job-created", job=f"{self.ns}/{name}", workload=kind)

    def create_crons(self) -> None:
        """Create one LeasedCronJob per policy, each on a one-minute schedule.

        Each run makes ``--cron-writes`` writes over about
        ``--cron-hold-seconds`` (so it often still holds its lease, and has
        written, when the next minute is due) to the cron job's own target
        key, the runs' shared fencing domain. One more cron job
        (``--cron-indexed-policy``) runs two completions per run (Indexed,
        both at once): each index's worker writes to that key under its own
        index lease's token, every one above the earlier run's.
        """
        crons = [(f"{self.prefix}cron-{p.lower()}", p, "plain") for p in self.args.cron_policies]
        if crons and self.args.cron_indexed_policy:
            # Runs of two completions: each index's worker writes to the cron
            # job's key too, under its index lease's token (inside its run's range).
            policy = self.args.cron_indexed_policy
            crons.append((f"{self.prefix}cron-idx-{policy.lower()}", policy, "indexed-cron"))
        for name, policy, kind in crons:
            env = [
                *(e for e in self.worker_env() if e["name"] != "CHAOS_WRITES"),
                {"name": "CHAOS_WRITES", "value": str(self.args.cron_writes)},
                {"name": "CHAOS_KEY", "value": f"{self.ns}/{name}"},
                {"name": "CHAOS_HOLD_SECONDS", "value": str(self.args.cron_hold_seconds)},
            ]
            body = {
                "apiVersion": "leasehold.dev/v1alpha1",
                "kind": "LeasedCronJob",
                "metadata": {"name": name},
                "spec": {
                    "schedule": "* * * * *",
                    "concurrencyPolicy": policy,
                    # every run kept to the end, so each says how it ended (job_end)
                    "successfulJobsHistoryLimit": 100,
                    "failedJobsHistoryLimit": 100,
                    "jobTemplate": {"spec": self.job_spec(env, kind)},
                },
            }
            self.create_object("leasedcronjobs", body)
            self.crons[name] = policy
            record(self.history, kind="cron-created", cron=f"{self.ns}/{name}", policy=policy)
            log(f"cron job {name}: {policy}, {kind}, schedule * * * * *")

    def suspend_crons(self) -> None:
        """Suspend every cron job of the run: no new run starts, the drain can end."""
        for name in self.crons:
            if self.set_suspend(name, True, deadline_seconds=300, plural="leasedcronjobs"):
                record(self.history, kind="cron-suspended", cron=f"{self.ns}/{name}")
            else:
                log(f"could not suspend cron job {name}")
        self.crons_suspended = True

    def run_of(self, name: str) -> str | None:
        """The cron job whose run a LeasedJob is (``<cron>-<unix minutes>``), or None."""
        for cron in self.crons:
            if name.startswith(f"{cron}-") and name[len(cron) + 1 :].isdigit():
                return cron
        return None

    def suspender(self) -> None:
        """Suspend jobs once while they run and resume them 2 to 6 s later (``spec.suspend``).

        Every ``suspend`` job, about half the Indexed jobs and a third of the
        cron runs (whichever runs now is picked). Also after the faulty phase:
        a job may only run then.
        """
        rng = random.Random(self.args.seed + 1)
        done: set[str] = set()
        while not self.stop.is_set():
            time.sleep(1)
            candidates = []
            for name, status in list(self.last_phases.items()):
                if name in done or status.get("phase") != "Running":
                    continue
                kind = self.kinds.get(name) or ("cron-run" if self.run_of(name) else None)
                wanted = SUSPEND_SHARE.get(kind or "", 0.0)
                if wanted == 0.0:
                    continue
                if rng.random() >= wanted:
                    done.add(name)  # drawn once: left alone
                    continue
                candidates.append((name, kind))
            if not candidates:
                continue
            name, kind = rng.choice(candidates)
            done.add(name)
            if kind in ("indexed", "indexed-success") and rng.random() < SCALE_SHARE:
                # down to 1 (index 1, often running, is removed) unless a
                # successPolicy's succeededCount of 2 needs 2 completions
                self.scale_down_and_up(
                    name, 2 if kind == "indexed-success" else 1, rng.uniform(2, 6)
                )
                continue
            if not self.set_suspend(name, True, deadline_seconds=10):
                continue
            record(self.history, kind="suspend", job=f"{self.ns}/{name}", workload=kind)
            log(f"suspended {kind} {name}")
            time.sleep(rng.uniform(2.0, 6.0))
            # Resumed whatever happens: a job left suspended would never end.
            if self.set_suspend(name, False, deadline_seconds=300):
                record(self.history, kind="resume", job=f"{self.ns}/{name}", workload=kind)
            else:
                log(f"could not resume {name}")

    def scale_down_and_up(self, name: str, down_to: int, pause_seconds: float) -> None:
        """Scale an Indexed job (3 completions) down to ``down_to``, then back up to 3.

        The scale-up follows ``pause_seconds`` later.

        ``spec.completions`` with ``spec.parallelism`` (an elastic Indexed
        job): the removed indexes' leases are suspended at the store while
        they are removed; scaled up, each runs again under a token above its
        old one. Scaled up again whatever happens: the job ends either way.
        """
        scaled = {"completions": down_to, "parallelism": down_to}
        if not self.patch_spec(name, scaled, deadline_seconds=10):
            return
        record(self.history, kind="scale", job=f"{self.ns}/{name}", completions=down_to)
        log(f"scaled indexed {name} down to {down_to}")
        time.sleep(pause_seconds)
        if self.patch_spec(name, {"completions": 3, "parallelism": 3}, deadline_seconds=300):
            record(self.history, kind="scale", job=f"{self.ns}/{name}", completions=3)
        else:
            log(f"could not scale {name} up")

    def set_suspend(
        self, name: str, suspend: bool, deadline_seconds: float, plural: str = "leasedjobs"
    ) -> bool:
        """Patch ``spec.suspend``, retried while the API server is away; whether it was set.

        A job that is gone (a replaced cron run) is not retried.
        """
        return self.patch_spec(name, {"suspend": suspend}, deadline_seconds, plural)

    def patch_spec(
        self,
        name: str,
        spec: dict[str, Any],
        deadline_seconds: float,
        plural: str = "leasedjobs",
    ) -> bool:
        """Patch ``spec``, retried while the API server is away; whether it was set.

        A job that is gone (a replaced cron run, a finished job's TTL) is not
        retried; nor is a patch the API server refuses (422: a finished job).
        """
        deadline = time.monotonic() + deadline_seconds
        while time.monotonic() < deadline:
            try:
                self.custom.patch_namespaced_custom_object(
                    "leasehold.dev",
                    "v1alpha1",
                    self.ns,
                    plural,
                    name,
                    {"spec": spec},
                )
                return True
            except client.ApiException as exc:
                if exc.status in (404, 422):
                    return False
                time.sleep(1)
            except Exception:
                time.sleep(1)
        return False

    def phases(self) -> dict[str, dict[str, Any]]:
        """Status of every job (cron runs too)."""
        items: Any = self.custom.list_namespaced_custom_object(
            "leasehold.dev", "v1alpha1", self.ns, "leasedjobs"
        )
        self.last_phases = {i["metadata"]["name"]: i.get("status") or {} for i in items["items"]}
        return self.last_phases

    def watch_leases(self) -> None:
        """Record every lease change the API server reports, in its order."""
        version: str | None = None
        while not self.stop.is_set():
            try:
                stream = watch.Watch()
                for event in stream.stream(
                    self.custom.list_namespaced_custom_object,
                    "leasehold.dev",
                    "v1alpha1",
                    self.ns,
                    "jobleases",
                    timeout_seconds=10,
                    **({"resource_version": version} if version else {}),
                ):
                    obj = event["object"]
                    version = obj["metadata"]["resourceVersion"]
                    if not self.owns(obj["metadata"]["name"]):
                        continue
                    spec = obj["spec"]
                    done = spec.get("completion")
                    labels = obj["metadata"].get("labels") or {}
                    cron = labels.get(LABEL_CRON_JOB)
                    index = labels.get(LABEL_COMPLETION_INDEX)
                    record(
                        self.history,
                        kind="observed",
                        lease=f"{self.ns}/{obj['metadata']['name']}",
                        # the version's place in etcd's order: a watch made again
                        # can deliver a version already seen, or an older one
                        rv=int(version) if str(version).isdigit() else None,
                        # what the lease belongs to, from the object (never its name's form)
                        job_name=f"{self.ns}/{spec.get('jobName')}",
                        cron=f"{self.ns}/{cron}" if cron else None,
                        index=int(index) if index is not None and index.isdigit() else None,
                        base=spec.get("baseFencingToken"),
                        ceiling=spec.get("ceilingFencingToken"),
                        holder=spec.get("holderIdentity"),
                        token=spec.get("fencingToken", 0),
                        completion={
                            "token": done["fencingToken"],
                            "holder": done["holderIdentity"],
                            "outcome": done["outcome"],
                        }
                        if done
                        else None,
                    )
                    if self.stop.is_set():
                        break
            except client.ApiException as exc:
                if exc.status == 410:
                    version = None  # too old: list again (states in between are lost)
                time.sleep(0.5)
            except Exception:
                time.sleep(0.5)  # API server restarts end the watch; resume from version

    def owns(self, lease: str) -> bool:
        """Whether a lease in the namespace is one of this run's (here all are)."""
        return True

    def pull_claimer(self, index: int) -> None:
        """Race the operator: claim unheld leases with the SDK and work under them."""
        identity = f"pull-{index}"
        api = config.new_client_from_config(config_file=str(self.worker_kubeconfig))
        store = LeaseStore(api)
        while not self.stop.is_set():
            time.sleep(self.rng.uniform(0.2, 1.0))
            try:
                leases = [
                    lease
                    for lease in store.list_leases(self.ns)
                    if self.owns(lease.name)
                    and lease.record.holder_identity is None
                    and lease.record.completion is None
                    and lease.record.fencing_token > 0
                ]
                if not leases:
                    continue
                target = self.rng.choice(leases)
                call = clock()
                holder = sdk.claim(self.ns, target.name, identity, store=store)
                if holder is None:
                    continue
                record(
                    self.history,
                    kind="pull-claim",
                    call=call,
                    lease=f"{self.ns}/{target.name}",
                    holder=identity,
                    token=int(holder.token),
                )
                cron = (target.body["metadata"].get("labels") or {}).get(LABEL_CRON_JOB)
                work(
                    holder,
                    self.proxied_dsn,
                    self.history,
                    self.args.writes,
                    f"{self.ns}/{target.name}",
                    key=f"{self.ns}/{cron}" if cron else None,
                )
                holder.close()
            except Exception as exc:
                record(
                    self.history, kind="pull-error", error=type(exc).__name__, detail=str(exc)[:200]
                )

    # -- faults ------------------------------------------------------------------

    def pods(self, running: bool = False) -> list[str]:
        """Names of the run's pods (``running``: in phase Running, not being deleted)."""
        try:
            pods = client.CoreV1Api(self.api).list_namespaced_pod(
                self.ns,
                field_selector="status.phase=Running" if running else None,
                _request_timeout=15,
            )
        except Exception as exc:
            log(f"listing pods: {str(exc).splitlines()[0][:120]}")
            return []
        names = []
        for pod in pods.items:
            meta = pod.metadata
            if meta is None or not str(meta.name).startswith(self.prefix):
                continue
            if running and meta.deletion_timestamp is not None:
                continue
            names.append(str(meta.name))
        return names

    def running_pods(self) -> list[str]:
        """Names of the run's pods whose processes run now (jobs', indexes', cron runs')."""
        return [name for name in self.pods() if self.runner.pid(self.ns, name) is not None]

    def f_evict(self) -> None:
        """Evict a running worker's pod (``POST pods/eviction``, as ``kubectl drain`` does)."""
        names = self.pods(running=True)
        if not names:
            return
        pod = self.rng.choice(sorted(names))
        eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod, namespace=self.ns))
        try:
            client.CoreV1Api(self.api).create_namespaced_pod_eviction(
                pod, self.ns, eviction, _request_timeout=30
            )
        except Exception as exc:
            log(f"eviction of {pod} not made: {str(exc).splitlines()[0][:120]}")
            return
        self.fault("evict", pod=pod)

    def fault(self, kind: str, **detail: Any) -> None:
        """Record an injected fault."""
        record(self.history, kind="fault", fault=kind, **detail)
        log(f"fault {kind} {detail if detail else ''}")

    def inject(self) -> None:
        """Inject one fault, chosen by the seeded generator."""
        kinds: list[tuple[str, Callable[[], None]]] = [
            ("pause", self.f_pause),
            ("pause", self.f_pause),
            ("kill", self.f_kill),
            ("hold-api", lambda: self.f_hold(self.api_proxy, "hold-api")),
            ("hold-db", lambda: self.f_hold(self.db_proxy, "hold-db")),
            ("drop-api", lambda: self.f_drop(self.api_proxy, "drop-api")),
            ("drop-db", lambda: self.f_drop(self.db_proxy, "drop-db")),
            ("delay-db", self.f_delay_db),
            ("evict", self.f_evict),
            ("operator-restart", self.f_operator),
            ("apiserver-restart", lambda: self.f_restart("kube-apiserver")),
            ("etcd-restart", lambda: self.f_restart("etcd")),
            *([("kueue-restart", self.f_kueue)] if self.kueue is not None else []),
        ]
        _, action = self.rng.choice(kinds)
        action()

    def f_pause(self) -> None:
        """SIGSTOP a random worker longer than its lease, SIGCONT it later."""
        pods = self.running_pods()
        if not pods:
            return
        pod = self.rng.choice(pods)
        seconds = LEASE_SECONDS + self.rng.uniform(1.5, 4.0)
        try:
            self.runner.pause(self.ns, pod)
        except LookupError:
            return
        self.fault("pause", pod=pod, seconds=round(seconds, 1))

        def resume() -> None:
            time.sleep(seconds)
            with contextlib.suppress(LookupError):
                self.runner.resume(self.ns, pod)

        threading.Thread(target=resume, daemon=True).start()

    def f_kill(self) -> None:
        """SIGKILL a random worker."""
        pods = self.running_pods()
        if pods:
            pod = self.rng.choice(pods)
            try:
                self.runner.kill(self.ns, pod)
                self.fault("kill", pod=pod)
            except LookupError:
                pass

    def f_hold(self, proxy: TcpProxy, kind: str) -> None:
        """Hold a proxy's traffic for a few seconds, then deliver it."""
        seconds = self.rng.uniform(1.0, LEASE_SECONDS + 2.0)
        self.fault(kind, seconds=round(seconds, 1))
        proxy.hold()
        time.sleep(seconds)
        proxy.release()

    def f_drop(self, proxy: TcpProxy, kind: str) -> None:
        """Cut every connection through a proxy (replies in flight are lost)."""
        self.fault(kind)
        proxy.drop_connections()

    def f_delay_db(self) -> None:
        """Add latency to PostgreSQL traffic for a while."""
        self.fault("delay-db", seconds=0.5)
        self.db_proxy.set_delay(0.5)
        time.sleep(3)
        self.db_proxy.set_delay(0)

    def f_operator(self) -> None:
        """SIGKILL the operator and start it again."""
        self.fault("operator-restart")
        self.operator.kill()
        time.sleep(self.rng.uniform(0.5, 2.0))
        self.operator.start()

    def f_kueue(self) -> None:
        """SIGKILL Kueue's manager and start it again (admissions and preemptions pause)."""
        assert self.kueue is not None and self.kueue.proc is not None
        self.fault("kueue-restart")
        self.kueue.proc.kill()
        self.kueue.proc.wait()
        time.sleep(self.rng.uniform(0.5, 2.0))
        try:
            self.kueue.start()
        except Exception as exc:
            log(f"restart of Kueue failed: {exc}")
            raise

    def f_restart(self, component: str) -> None:
        """Restart one control-plane component."""
        self.fault(f"{component}-restart")
        try:
            self.cluster.restart(component, down_seconds=self.rng.uniform(0.5, 2.0))
        except Exception as exc:
            log(f"restart of {component} failed: {exc}")
            raise

    def clock_step(self) -> None:
        """Restart the operator with its wall clock stepped from +1 h to -1 h."""
        self.fault("clock-step", operator="+1h -> -1h")
        self.operator.stop()
        self.operator.env = faketime_env("-1h")
        self.operator.start()

    # -- the run -----------------------------------------------------------------

    def collect(self) -> None:
        """Gather records kept elsewhere into the history (here, none: all in one file)."""

    def record_workloads(self, wait_seconds: float = 60) -> None:
        """Record each queued job's Workload at the end: Finished, and how often evicted.

        Waits up to ``wait_seconds`` for the Workloads of ended jobs to be
        marked Finished (the operator marks them after the job's status).
        """
        queued = {n for n, k in self.kinds.items() if k.startswith("queued")}
        if self.kueue is None or not queued:
            return
        deadline = time.monotonic() + wait_seconds
        items: list[dict[str, Any]] = []
        while True:
            try:
                listed: Any = self.custom.list_namespaced_custom_object(
                    "kueue.x-k8s.io", "v1beta2", self.ns, "workloads"
                )
                items = list(listed["items"])
            except Exception as exc:
                log(f"listing Workloads: {str(exc).splitlines()[0][:120]}")
            finished = {_owner(w) for w in items if _condition_true(w, "Finished")}
            if queued <= finished or time.monotonic() > deadline:
                break
            time.sleep(2)
        by_owner = {_owner(w): w for w in items}
        for name in sorted(queued):
            workload = by_owner.get(name) or {}
            stats = (workload.get("status") or {}).get("schedulingStats") or {}
            evictions = {
                str(e.get("reason")): int(e.get("count", 0)) for e in stats.get("evictions") or []
            }
            record(
                self.history,
                kind="workload-end",
                job=f"{self.ns}/{name}",
                workload=(workload.get("metadata") or {}).get("name"),
                finished=_condition_true(workload, "Finished"),
                evictions=evictions,
            )

    def execute(self) -> judge.Judgement:
        """Run the workload under faults; judge the history with both checkers."""
        threading.Thread(target=self.watch_leases, daemon=True).start()
        for i in range(self.args.pull_claimers):
            threading.Thread(target=self.pull_claimer, args=(i,), daemon=True).start()
        threading.Thread(target=self.suspender, daemon=True).start()
        self.create_crons()
        started = time.monotonic()
        budget = self.args.minutes * 60
        created = 0
        stepped = False
        faulty = True
        drain_until = started + budget + self.args.drain_minutes * 60
        # the cron jobs run on after the faults till each made --cron-runs runs, at
        # most half the drain
        cron_deadline = started + budget + self.args.drain_minutes * 30
        runs_seen: dict[str, set[str]] = {}
        scenario = SCENARIOS[self.args.scenario] if self.args.scenario else None
        steps = list(scenario.steps) if scenario else []
        while time.monotonic() < drain_until:
            if faulty and time.monotonic() - started >= budget:
                faulty = False
                log("fault budget used up: creating the remaining jobs without faults")
            phases = self.phases()
            for name in phases:
                cron = self.run_of(name)
                if cron is not None:
                    runs_seen.setdefault(cron, set()).add(name)
            enough = all(len(runs_seen.get(c, ())) >= self.args.cron_runs for c in self.crons)
            if (
                not faulty
                and not self.crons_suspended
                and (enough or time.monotonic() > cron_deadline)
            ):
                log(f"cron runs seen: { {c: len(r) for c, r in runs_seen.items()} }")
                self.suspend_crons()
            active = sum(
                1 for s in phases.values() if s.get("phase") not in ("Succeeded", "Failed")
            )
            while created < self.args.jobs and active < self.args.concurrency:
                self.create_job(created)
                created += 1
                active += 1
            no_more_runs = self.crons_suspended or not self.crons
            # Only a listing that shows every job created counts: while the API server
            # is away (chaos.kind) the last one known may be empty or older than a job.
            listed = set(self.jobs) <= set(phases)
            if created == self.args.jobs and active == 0 and no_more_runs and listed:
                break
            if faulty and scenario is not None:
                if steps and steps[0](self):
                    steps.pop(0)
                if not steps:
                    faulty = False
                    log(f"scenario {scenario.name} done: the remaining jobs run without faults")
                time.sleep(0.3)
            elif faulty:
                if not stepped and time.monotonic() - started > budget / 3:
                    self.clock_step()
                    stepped = True
                self.inject()
                time.sleep(self.rng.uniform(0.5, 1.5))
            else:
                time.sleep(1)
        log(f"workload over after {time.monotonic() - started:.0f}s")
        if scenario is not None and steps:
            log(f"scenario {scenario.name}: {len(steps)} steps left when the jobs ran out")
        self.stop.set()
        time.sleep(1)
        ended = self.phases()
        for name, status in sorted(ended.items()):
            reason = next(
                (
                    c.get("reason")
                    for c in status.get("conditions", [])
                    if c["type"] == "Failed" and c["status"] == "True"
                ),
                None,
            )
            record(
                self.history,
                kind="job_end",
                job=f"{self.ns}/{name}",
                phase=status.get("phase"),
                reason=reason,
            )
        for name in sorted(set(self.jobs) - set(ended)):
            # created, but not listed at the end: judged as not ended (no-job-lost)
            record(self.history, kind="job_end", job=f"{self.ns}/{name}", phase=None, reason=None)
        self.record_workloads()
        if created < self.args.jobs:
            record(
                self.history,
                kind="job_end",
                job=f"{self.ns}/(not created)",
                phase=None,
                reason=f"{self.args.jobs - created} jobs never started in time",
            )
        with psycopg.connect(self.dsn) as conn:
            for seq, key, token in conn.execute(
                "SELECT seq, key, token FROM chaos_effect ORDER BY seq"
            ):
                record(self.history, kind="applied", seq=seq, key=key, token=token)
        self.collect()
        return judge.judge(Path(self.history), self.dir / "porcupine.html")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _owner(workload: dict[str, Any]) -> str | None:
    """The name of the LeasedJob that owns a Workload (its controller), if any."""
    for ref in (workload.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "LeasedJob" and ref.get("controller"):
            return str(ref.get("name"))
    return None


def _condition_true(obj: dict[str, Any], type_: str) -> bool:
    """Whether an object's ``status.conditions`` has ``type_`` True."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == type_ and c.get("status") == "True" for c in conditions)


POLICIES = ("Forbid", "Replace", "Allow")


def _policies(text: str) -> list[str]:
    """``--cron-policies``: a comma-separated list of concurrency policies, or ``none``."""
    if text.strip().lower() in ("", "none"):
        return []
    chosen = [p.strip().capitalize() for p in text.split(",") if p.strip()]
    unknown = [p for p in chosen if p not in POLICIES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown concurrency policies {unknown}")
    return chosen


def _indexed_policy(text: str) -> str | None:
    """``--cron-indexed-policy``: one concurrency policy, or ``none``."""
    chosen = _policies(text)
    if len(chosen) > 1:
        raise argparse.ArgumentTypeError("one concurrency policy, or none")
    return chosen[0] if chosen else None


def add_cron_arguments(parser: argparse.ArgumentParser, hold_seconds: float) -> None:
    """The cron jobs' options, the same for ``chaos.run`` and ``chaos.kind``."""
    parser.add_argument(
        "--cron-policies",
        type=_policies,
        default=list(POLICIES),
        help="a LeasedCronJob (schedule '* * * * *') per concurrency policy in this"
        " comma-separated list (default Forbid,Replace,Allow; 'none': no cron jobs)",
    )
    parser.add_argument(
        "--cron-indexed-policy",
        type=_indexed_policy,
        default="Replace",
        help="with cron jobs, one more whose runs have two completions (Indexed), under this"
        " concurrency policy (default Replace; 'none': left out)",
    )
    parser.add_argument(
        "--cron-runs",
        type=int,
        default=2,
        help="the cron jobs are suspended once the faults are over and each made this many"
        " runs (default 2; at most half the drain later)",
    )
    parser.add_argument(
        "--cron-writes",
        type=int,
        default=10,
        help="fenced writes per cron run attempt, spread over its hold (default 10: a"
        " replaced run has written before it is replaced)",
    )
    parser.add_argument(
        "--cron-hold-seconds",
        type=float,
        default=hold_seconds,
        help="about how long each cron run works under its lease (default"
        f" {hold_seconds:g}: a run often still holds it when the next minute is due)",
    )


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, print the table; exit 1 on a violation."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument(
        "--seed",
        type=int,
        default=int(time.time()) % 100000,
        help="seed of the fault schedule and workload (printed; re-runnable)",
    )
    parser.add_argument("--jobs", type=int, default=200, help="LeasedJobs to run (default 200)")
    parser.add_argument(
        "--concurrency", type=int, default=20, help="jobs running at once (default 20)"
    )
    parser.add_argument("--writes", type=int, default=3, help="fenced writes per attempt")
    parser.add_argument("--pull-claimers", type=int, default=2, help="pull-mode claimers")
    parser.add_argument(
        "--minutes", type=float, default=6.5, help="time budget for the faulty phase (default 6.5)"
    )
    parser.add_argument(
        "--drain-minutes",
        type=float,
        default=2.5,
        help="then, without faults, time for the remaining jobs to run (default 2.5)",
    )
    parser.add_argument(
        "--scenario",
        choices=sorted(SCENARIOS),
        help="replay a named incident (chaos/scenarios.py) instead of random faults",
    )
    add_cron_arguments(parser, hold_seconds=70)
    parser.add_argument(
        "--kueue",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="queue every tenth job in a Kueue LocalQueue with quota for two, at two"
        " priorities, and restart Kueue as a fault (default on; Kueue built by"
        " hack/kueue/build.sh, cached)",
    )
    parser.add_argument("--keep", type=Path, help="copy the history and logs here")
    args = parser.parse_args(argv)
    log(
        f"seed {args.seed}: {args.jobs} jobs, {args.concurrency} at a time,"
        f" {args.pull_claimers} pull claimers, {args.minutes:g} min budget"
    )
    if args.scenario:
        log(f"scenario {args.scenario}: {SCENARIOS[args.scenario].incident}")
    if not FAKETIME_LIB.exists():
        log(f"libfaketime not found at {FAKETIME_LIB}: apt-get install libfaketime")
        return 2
    # SIGTERM (a CI timeout, Ctrl-C's cousin) tears everything down too.
    signal.signal(signal.SIGTERM, _interrupt)
    work_dir = Path(tempfile.mkdtemp(prefix="chaos-", dir="/tmp"))
    judge.porcupine_binary()  # built (or found in the cache) before the run
    run = Run(args, work_dir)
    began = time.monotonic()
    try:
        run.setup()
        report = run.execute()
    finally:
        run.teardown()
        if args.keep:
            shutil.copytree(
                work_dir,
                args.keep,
                dirs_exist_ok=True,
                ignore=shutil.ignore_patterns("cluster", "chaos-pg-*"),
            )
    print(report.table())
    verdict = "0 violations" if report.ok else "VIOLATIONS FOUND"
    if not report.agree:
        verdict += " (the checkers DISAGREE)"
    log(f"seed {args.seed}: {verdict} in {time.monotonic() - began:.0f}s (history: {run.history})")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
