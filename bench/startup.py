"""``python -m bench.startup``: ``leasehold run``'s time to start a command, against ``sh -c``.

Why this module exists: every LeasedJob's pod pays ``leasehold run``'s start-up
before its command runs (an interpreter, the imports, the lease's confirmation,
the child under its shim), and how much depends on the machine's load and on
when the operator's claim lands. A Job's pod pays ``sh``'s. This part starts
the same pods both ways, side by side in one run, idle and with many at once.

What is timed: the pod runner (``testing/podrunner``) writes, in each pod's
folder, the wall-clock moment right before it spawned the pod's process
(``started``) and when it saw it exit (``exited``); the command itself prints
``date +%s.%N`` first. Command start - spawn is the start-up; for ``sh -c`` it
is ``sh``'s own. The wrapper's own log line (:mod:`leasehold.worker.startup`)
splits its part into steps. All on one machine's clock.

Three kinds of pods, each run command ``sh -c 'date +%s.%N; sleep 1'``:

* ``sh -c``: the command alone (a Job's pod);
* ``leasehold run, claim first``: under the wrapper, its lease claimed and
  bound to the pod's UID before the pod may start (no wait for the claim);
* ``leasehold run, claim after``: the pod starts first and the lease is
  claimed for it right after (the operator's order: pod, then the claim that
  binds it), so the wrapper may find the claim not landed (``NOT_BOUND``).

Pods are created with a scheduler name no scheduler serves, so none starts
until this benchmark binds it to the runner's node (``pods/binding``); a
round binds its ``n`` pods at once from 16 threads, the same way for every
kind. No operator runs: the claims are this benchmark's, one PATCH each.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import os
import re
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, cast

from kubernetes import client

from bench.cluster import install_crds, local_cluster
from bench.harness import QUICK, Harness, apiserver_samples, log, new_client
from bench.jobs import grant_worker_rights
from bench.stats import Summary, markdown_table, summarize
from leasehold import names
from leasehold.lease.leaseops import Accepted, StoredLease
from leasehold.lease.store import LeaseStore
from leasehold.worker.startup import STEPS, parse_line
from podrunner import DEFAULT_NODE, PodRunner
from podrunner.runner import CPU_FILE, EXITED_FILE, STARTED_FILE

COMMAND: Final = "date +%s.%N; sleep 1"
"""Every pod's shell command: the start moment first, then a 1 s job."""
LEASE_SECONDS: Final = 10
HOLD_SCHEDULER: Final = "leasehold-bench-hold"
"""A scheduler name nothing serves: the pod waits until the benchmark binds it."""
KINDS: Final = ("sh -c", "leasehold run, claim first", "leasehold run, claim after")
BASE_KINDS: Final = ("baseline run, claim first", "baseline run, claim after")
"""With ``--baseline``: the same two under another tree's ``leasehold`` package (e.g.
the commit before a change), side by side in the same run."""
THREADS: Final = 16
_STAMP: Final = re.compile(r"^\d{9,}\.\d+$")


@dataclass
class Round:
    """One round: ``n`` pods of one kind released at once.

    Attributes:
        kind: one of :data:`KINDS`.
        n: pods.
        tag: the round's name part.
        startup: command start - spawn per pod (seconds).
        run: exit - spawn per pod (seconds).
        steps: the wrapper's steps per pod (its start-up line's values).
        cpu: CPU seconds per pod (its process tree's, from the runner's ``wait4``).
        missing: pods with no command start (did not run, or no stamp).
        lease_requests: JobLease requests in the round (``"<verb> <code>"`` -> count),
            the benchmark's own creates and claims taken out.
        load_before: 1-minute load average before the release.
        load_after: the same once all pods ended.
    """

    kind: str
    n: int
    tag: str
    startup: list[float] = field(default_factory=list)
    run: list[float] = field(default_factory=list)
    steps: list[dict[str, float]] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    missing: int = 0
    lease_requests: Counter[str] = field(default_factory=Counter)
    load_before: float = 0.0
    load_after: float = 0.0


def claims_first(kind: str) -> bool:
    """Whether ``kind``'s lease is claimed before its pod may start."""
    return kind.endswith("claim first")


def pod_body(name: str, kind: str, baseline: Path | None = None) -> dict[str, Any]:
    """The pod of one kind: held back from scheduling, one container.

    Args:
        name: the pod's (and its lease's) name.
        kind: one of :data:`KINDS` or :data:`BASE_KINDS`.
        baseline: the folder whose ``leasehold`` package the baseline kinds import.
    """
    command = ["sh", "-c", COMMAND]
    env: list[dict[str, Any]] = []
    if kind != KINDS[0]:
        command = ["leasehold", "run", "--", *command]
        if kind in BASE_KINDS:
            assert baseline is not None
            command = [sys.executable, "-m", "leasehold.cli", *command[1:]]
            env.append({"name": "PYTHONPATH", "value": str(baseline)})
        env += [
            {
                "name": names.ENV_NAMESPACE,
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
            },
            {"name": names.ENV_LEASE, "value": name},
            {"name": names.ENV_JOB, "value": name},
            {"name": names.ENV_HOLDER, "value": name},
            {"name": names.ENV_FENCING_TOKEN, "value": "1"},
            {"name": names.ENV_LEASE_DURATION, "value": str(LEASE_SECONDS)},
            {"name": names.ENV_POD_UID, "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench-round": name.rsplit("-", 1)[0]}},
        "spec": {
            "schedulerName": HOLD_SCHEDULER,
            "restartPolicy": "Never",
            "containers": [{"name": "worker", "image": "local", "command": command, "env": env}],
        },
    }


def lease_requests(before: Any, after: Any) -> Counter[str]:
    """JobLease requests between two scrapes, by verb and HTTP code: ``"PATCH 422"`` -> count."""
    out: Counter[str] = Counter()
    for sign, scrape in ((-1, before), (1, after)):
        for s in scrape.samples:
            if (
                s.name == "apiserver_request_total"
                and s.labels.get("resource") == names.PLURAL_JOB_LEASES
                and s.labels.get("verb") not in ("WATCH", "LIST")
            ):
                out[f"{s.labels.get('verb')} {s.labels.get('code')}"] += sign * round(s.value)
    return +out


def measure(
    h: Harness,
    runner: PodRunner,
    ns: str,
    kind: str,
    n: int,
    tag: str,
    baseline: Path | None = None,
) -> Round:
    """Create ``n`` held pods of ``kind`` (and their leases), release them at once, time them."""
    store = LeaseStore(h.admin)
    core = client.CoreV1Api(h.admin)
    prefix = f"{tag}-"
    pod_names = [f"{prefix}{i}" for i in range(n)]
    leased = kind != KINDS[0]
    uids: dict[str, str] = {}
    leases: dict[str, StoredLease] = {}

    def make(name: str) -> None:
        if leased:
            leases[name] = store.create(
                ns, name, job_name=name, lease_duration_seconds=LEASE_SECONDS
            )
        made: Any = core.create_namespaced_pod(ns, cast(Any, pod_body(name, kind, baseline)))
        uids[name] = made.metadata.uid
        if leased and claims_first(kind):
            claim(store, leases[name], uids[name])

    with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(make, pod_names))
    local = threading.local()

    def release(name: str) -> None:
        if not hasattr(local, "core"):
            local.core = client.CoreV1Api(new_client(h.kubeconfig))
            local.store = LeaseStore(local.core.api_client)
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": DEFAULT_NODE},
        }
        local.core.create_namespaced_pod_binding(name, ns, binding, _preload_content=False)
        if leased and not claims_first(kind):
            claim(local.store, leases[name], uids[name])

    result = Round(kind, n, tag, load_before=os.getloadavg()[0])
    before = apiserver_samples(h.admin)
    with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(release, pod_names))
    wait_ended(core, ns, tag, n)
    time.sleep(1.0)  # the completions' requests are counted
    result.load_after = os.getloadavg()[0]
    requests = lease_requests(before, apiserver_samples(h.admin))
    if leased and not claims_first(kind):
        requests.subtract({"PATCH 200": n})  # the benchmark's claims
    result.lease_requests = +requests
    for name in pod_names:
        folder = runner.pod_dir(ns, name)
        figures = read_pod(folder) if folder is not None else None
        if folder is None or figures is None:
            result.missing += 1
            continue
        startup, run, steps = figures
        result.startup.append(startup)
        result.run.append(run)
        with contextlib.suppress(OSError, ValueError):
            result.cpu.append(float((folder / CPU_FILE).read_text()))
        if steps is not None:
            result.steps.append(steps)
    return result


def claim(store: LeaseStore, lease: StoredLease, uid: str) -> None:
    """Claim ``lease`` for its pod (token 1, bound to ``uid``) as the operator does: one PATCH."""
    claimed = store.claim(
        lease.namespace, lease.name, lease.name, observed=lease, holder_uid=uid, token=1
    )
    if not isinstance(claimed, Accepted):
        raise RuntimeError(f"claim of {lease.namespace}/{lease.name} refused: {claimed}")


def wait_ended(core: Any, ns: str, tag: str, n: int, timeout: float = 300.0) -> None:
    """Wait until the round's ``n`` pods have ended (``Succeeded`` or ``Failed``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods: Any = core.list_namespaced_pod(ns, label_selector=f"bench-round={tag}")
        ended = [p for p in pods.items if p.status and p.status.phase in ("Succeeded", "Failed")]
        if len(ended) >= n:
            return
        time.sleep(0.5)
    log(f"startup: round {tag} not ended after {timeout:g} s")


def read_pod(folder: Path) -> tuple[float, float, dict[str, float] | None] | None:
    """A pod's (command start - spawn, exit - spawn, the wrapper's steps) from its folder."""
    try:
        spawned = float((folder / STARTED_FILE).read_text())
        exited = float((folder / EXITED_FILE).read_text())
        text = (folder / "log").read_text(errors="replace")
    except (OSError, ValueError):
        return None
    stamps = [float(line) for line in text.splitlines() if _STAMP.match(line.strip())]
    if not stamps:
        return None
    return stamps[0] - spawned, exited - spawned, parse_line(text)


def schedule(
    sizes: Sequence[int], rounds: int, kinds: Sequence[str] = KINDS
) -> Iterator[tuple[int, int, str]]:
    """``(n, round, kind)`` in order; the kinds' order reversed every other round."""
    for n in sizes:
        for r in range(rounds):
            for kind in kinds if r % 2 == 0 else tuple(reversed(kinds)):
                yield n, r, kind


def run(h: Harness, sizes: Sequence[int], rounds: int, baseline: Path | None = None) -> list[Round]:
    """Every round of :func:`schedule` on one pod runner; returns them in order.

    Args:
        h: the run's harness.
        sizes: pods released at once, per size.
        rounds: rounds per kind and size.
        baseline: a folder holding another ``leasehold`` package: its wrapper
            runs as :data:`BASE_KINDS` in the same rounds.
    """
    ns = h.namespace("startup")
    grant_worker_rights(h, ns)
    runner = PodRunner(h.kubeconfig, h.workdir / "podrunner-startup")
    out: list[Round] = []
    try:
        runner.start()
        time.sleep(1.0)
        kinds = (*KINDS, *BASE_KINDS) if baseline is not None else KINDS
        for n, r, kind in schedule(sizes, rounds, kinds):
            tag = f"s{kinds.index(kind)}n{n}r{r}"
            h.note_load(f"startup {kind} x{n} round {r + 1}")
            log(f"startup: {n} x {kind}, round {r + 1}")
            out.append(measure(h, runner, ns, kind, n, tag, baseline))
    finally:
        runner.stop()
    return out


def _p(values: Sequence[float], q: str) -> float:
    summary: Summary = summarize(list(values))
    return float(getattr(summary, q))


def section(rounds: Sequence[Round]) -> list[str]:
    """The Markdown of the part: one row per kind and size (rounds pooled), ratios to ``sh -c``."""
    lines = [
        "### `leasehold run` start-up vs `sh -c`",
        "",
        f"Pods of `sh -c '{COMMAND}'`, alone or under `leasehold run` (lease"
        f" {LEASE_SECONDS} s), started by the pod runner; n pods released at once"
        " (bound to the node by 16 threads). Start-up: the command's own `date +%s.%N`"
        " minus the runner's stamp right before it spawned the process; run: the"
        " process's exit seen by the runner minus the same stamp. Steps: the wrapper's"
        " own start-up line, p50 over the pods (process = interpreter start up to"
        " `main`, imports, environment = lease env and HTTP client, confirm = the"
        " confirm renewal and any wait for the claim, child = the shim and the"
        " command's fork). CPU: user + system seconds of the pod's process tree (the"
        " runner's `wait4`), mean per pod. Lease requests: the API server's count in the round, the"
        " benchmark's own creates and claims taken out, by verb and HTTP code, per pod.",
        "",
    ]
    groups: dict[tuple[int, str], list[Round]] = {}
    for r in rounds:
        groups.setdefault((r.n, r.kind), []).append(r)
    rows = []
    order = (*KINDS, *BASE_KINDS)
    for (n, kind), mine in sorted(groups.items(), key=lambda kv: (kv[0][0], order.index(kv[0][1]))):
        startup = [x for r in mine for x in r.startup]
        run_ = [x for r in mine for x in r.run]
        cpu = [x for r in mine for x in r.cpu]
        base_cpu = [x for r in groups.get((n, KINDS[0]), []) for x in r.cpu]
        steps = [s for r in mine for s in r.steps]
        base = [x for r in groups.get((n, KINDS[0]), []) for x in r.run]
        base_start = [x for r in groups.get((n, KINDS[0]), []) for x in r.startup]
        requests: Counter[str] = Counter()
        for r in mine:
            requests.update(r.lease_requests)
        pods = sum(r.n for r in mine)
        step_text = " / ".join(
            f"{_p([s[k] for s in steps if k in s], 'p50'):.3f}" if steps else "-" for k in STEPS
        )
        counts = (
            f"{sum(s.get('tries', 0) for s in steps) / len(steps):.2f} /"
            f" {sum(s.get('reads', 0) for s in steps) / len(steps):.2f}"
            if steps
            else "-"
        )
        rows.append(
            [
                kind,
                str(n),
                str(len(mine)),
                f"{_p(startup, 'p50'):.3f}",
                f"{_p(startup, 'p99'):.3f}",
                f"+{_p(startup, 'p50') - _p(base_start, 'p50'):.3f}" if base_start else "-",
                f"{_p(run_, 'p50'):.2f}",
                f"{_p(run_, 'p50') / _p(base, 'p50'):.2f}x" if base else "-",
                f"{_p(run_, 'p99') / _p(base, 'p99'):.2f}x" if base else "-",
                f"{_p(cpu, 'mean'):.3f}" if cpu else "-",
                f"{_p(cpu, 'mean') - _p(base_cpu, 'mean'):.3f}" if cpu and base_cpu else "-",
                step_text,
                counts,
                " ".join(f"{k} {v / pods:.2f}" for k, v in sorted(requests.items())) or "-",
                " / ".join(f"{r.load_before:.1f}-{r.load_after:.1f}" for r in mine),
                str(sum(r.missing for r in mine)),
            ]
        )
    lines += [
        markdown_table(
            [
                "kind",
                "n at once",
                "rounds",
                "start-up p50 s",
                "start-up p99 s",
                "vs sh -c p50 s",
                "run p50 s",
                "run p50 vs sh -c",
                "run p99 vs sh -c",
                "CPU s/pod (mean)",
                "CPU s/pod above sh -c",
                "steps p50 s: " + " / ".join(STEPS),
                "confirm renewals / reads per pod",
                "lease requests per pod",
                "load 1m before-after (per round)",
                "missing",
            ],
            rows,
        ),
        "",
    ]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the options, start a local control plane, run, print (and write) the section."""
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__)
    parser.add_argument("--sizes", default="1,20,100", help="pods released at once per round")
    parser.add_argument("--rounds", type=int, default=2, help="rounds per kind and size")
    parser.add_argument("--output", type=Path, help="also write the section to this file")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a folder holding another leasehold package (e.g. from `git archive REV"
        " operator/leasehold`, its operator/ folder): its wrapper runs side by side",
    )
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="leasehold-startup-") as tmp:
        work = Path(tmp)
        log("starting a local control plane")
        with local_cluster(work) as cluster:
            h = Harness(cluster, work, QUICK)
            install_crds(h)
            started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
            rounds = run(h, sizes, args.rounds, args.baseline)
    text = "\n".join(
        [
            f"Run {started}, `python -m bench.startup --sizes {args.sizes} --rounds"
            f" {args.rounds}{' --baseline ' + str(args.baseline) if args.baseline else ''}`,"
            " one fresh local control plane and pod runner.",
            "",
            *section(rounds),
        ]
    )
    print(text, flush=True)
    if args.output is not None:
        args.output.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
