"""Check a recorded history of a chaos run against the lease and fencing guarantees.

Why this exists: faults (pauses, kills, clock skew, restarts, delayed and
dropped traffic) are only worth injecting if something checks, afterwards,
that no guarantee was broken. Like Jepsen's checkers, this works on a history
of operations recorded while the run went on, never on the system's own view
of itself.

A history is a list of records (dicts, one JSON line each). Kinds:

* ``observed`` — the run's lease watch saw a lease change:
  ``{"kind": "observed", "t": ..., "lease": "ns/name", "holder": str|None,
  "token": int, "completion": {"token": int, "holder": str, "outcome": str}|None,
  "job_name": "ns/job", "cron": "ns/cron"|None, "index": int|None, "base": int,
  "ceiling": int|None, "rv": int|None}`` (``rv``: the version's resourceVersion,
  etcd's revision; a version whose ``rv`` is not above the last one seen of
  that lease is a watch's replay, not a new state: it is counted as
  ``observed-again`` and not checked; what the lease belongs to is read from the object:
  ``spec.jobName``, the ``leasehold.dev/cronjob`` and ``completion-index``
  labels; never from the form of its name);
* ``cron-created`` — ``{"kind": "cron-created", "cron": "ns/name", "policy": str}``;
* ``complete`` — a worker's completion and the store's answer:
  ``{"kind": "complete", "t", "call", "job", "holder", "token", "ok": bool,
  "reason": str|None}``
* ``write`` — a fenced write to the target and its answer:
  ``{"kind": "write", "t", "call", "job", "key", "holder", "token", "ok": bool,
  "reason": str|None, "check_at": float, "deadline": float|None}`` (monotonic seconds; ``check_at``
  is when the worker's lease check before the write passed)
* ``applied`` — the target's own log of accepted writes, in commit order:
  ``{"kind": "applied", "seq": int, "key": str, "token": int}``
* ``job_end`` — how each job ended:
  ``{"kind": "job_end", "job", "phase": str|None, "reason": str|None}``
* ``pull-claim`` — a pull-mode claimer was granted the lease:
  ``{"kind": "pull-claim", "t", "call", "lease", "holder", "token"}``
* ``write-unknown``, ``complete-unknown`` — the answer was lost (counted here;
  porcupine lets them take effect or not).
* ``fault`` and any other kind are counted, not checked.

``t`` is the machine's raw monotonic clock (:func:`chaos.worker.clock`,
comparable across processes); answered operations also carry ``call`` (when
they were sent) and, when refused, ``reason`` (``StaleToken``, ``NotHolder``,
``DuplicateEffect``, ...). A write also carries ``check_raw``: the raw clock
read just before its lease check (the check passed at or after it). The
porcupine judge (:mod:`chaos.judge`) reads the same records.

Invariants (each violation is reported with the records that show it):

1. per job at most one accepted completion, under the token and holder that
   held the lease at that time (the last claim the watch saw before it; the
   watch delivers one lease's changes in the store's order), never changed;
2. per lease, tokens observed at successive claims strictly increase;
3. per target key, no accepted write carries a token lower than one accepted
   before it (in the target's commit order);
4. no job lost: every job ends ``Succeeded`` or ``Failed``, and a failed one
   says why (attempts used up, deadline, a worker's or an index's failure);
5. no accepted write was started after its worker's local deadline;
6. a LeasedCronJob with ``concurrencyPolicy`` Forbid or Replace never has two
   runs' leases held at once (in the watch's order over the namespace);
   with Replace, no write of a run is accepted whose lease check began
   (``check_raw``) after the watch saw a later run's claim (the replaced
   run's worker stops before the next run works);
7. per LeasedCronJob, every token a later run was granted (run ``<cron>-<unix
   minutes>``: the schedule time orders runs) is above every token an earlier
   run was granted. A run's granted tokens: those its lease showed held or
   completed, or above its ``baseFencingToken``, and those its workers wrote,
   completed or pull-claimed under;
8. a work-queue job (``job-created`` with ``workload: work-queue``) that
   ends ``Succeeded`` has at least one slot lease (``jobName`` the job's)
   whose watch showed a ``Succeeded`` completion: batch/v1's work queue
   succeeds on its first success, never without one;
9. Kueue (``queue-created`` with the ClusterQueue's capacity in jobs, and
   ``job-created`` with ``workload: queued-low|queued-high``): the queued
   jobs' leases held at once (in the watch's order over the namespace) never
   exceed that capacity (holders: a preempted worker that runs on holds
   nothing), and every queued job that ended has its Workload marked
   ``Finished`` (``workload-end``). A preempted attempt's completion and its
   late writes are judged by 1 and 3, as every job's.

Each lease (a plain job's, an index's, a cron run's) is its own fencing
domain for 1 and 2; the runs of a cron job share theirs (7) and one target
key (3).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Report:
    """The checker's verdict.

    Attributes:
        operations: count of records by kind (and ok/rejected for answers).
        faults: count of injected faults by kind.
        violations: human-readable violations, grouped by invariant.
    """

    operations: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    violations: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    @property
    def ok(self) -> bool:
        """Whether no invariant was violated."""
        return not any(self.violations.values())

    def table(self) -> str:
        """The report as a plain-text table."""
        lines = ["faults injected:"]
        lines += [f"  {k:<32} {v:>6}" for k, v in sorted(self.faults.items())] or ["  (none)"]
        lines.append("operations:")
        lines += [f"  {k:<32} {v:>6}" for k, v in sorted(self.operations.items())]
        lines.append("violations:")
        for name in INVARIANTS:
            found = self.violations.get(name, [])
            lines.append(f"  {name:<32} {len(found):>6}")
            lines += [f"    - {v}" for v in found[:5]]
        return "\n".join(lines)


INVARIANTS = (
    "one-completion-per-job",
    "tokens-increase-per-lease",
    "target-tokens-never-go-back",
    "no-job-lost",
    "no-effect-after-deadline",
    "cron-runs-one-at-a-time",
    "replaced-run-stops-before-next",
    "cron-run-tokens-ordered",
    "work-queue-success-completed",
    "kueue-quota-holders",
    "queued-workload-finished",
)


def _without_replays(history: list[dict[str, Any]], report: Report) -> list[dict[str, Any]]:
    """The history less the lease versions a watch delivered again (``rv`` not above the last).

    A watch made again after an API server's restart or a held connection can
    deliver versions it had delivered, or older ones from a cache catching up;
    they are no new state of the lease. A new write always has a higher
    revision, so nothing the store did is dropped.
    """
    last: dict[str, int] = {}
    kept: list[dict[str, Any]] = []
    for record in history:
        rv = record.get("rv")
        if record.get("kind") == "observed" and isinstance(rv, int):
            lease = str(record["lease"])
            if lease in last and rv <= last[lease]:
                report.operations["observed-again"] += 1
                continue
            last[lease] = rv
        kept.append(record)
    return kept


def check(history: list[dict[str, Any]]) -> Report:
    """Check a history against the invariants.

    Args:
        history: the records, in the order they were recorded (``t`` is
            monotonic seconds of one machine; ``applied`` records carry the
            target's commit sequence ``seq`` instead).

    Returns:
        The report; ``report.ok`` is the verdict.
    """
    report = Report()
    history = _without_replays(history, report)
    for record in history:
        kind = str(record.get("kind"))
        if kind == "fault":
            report.faults[str(record.get("fault"))] += 1
            continue
        if "ok" in record:
            kind = f"{kind} {'accepted' if record['ok'] else 'rejected'}"
        report.operations[kind] += 1

    _check_claims_and_completions(history, report)
    _check_target(history, report)
    _check_jobs(history, report)
    _check_deadlines(history, report)
    _check_cron_runs(history, report)
    _check_work_queues(history, report)
    _check_kueue(history, report)
    return report


def _check_kueue(history: list[dict[str, Any]], report: Report) -> None:
    """Invariant 9: queued jobs hold no more leases at once than the quota admits."""
    capacity = next((int(r["jobs"]) for r in history if r.get("kind") == "queue-created"), None)
    queued = {
        str(r["job"])
        for r in history
        if r.get("kind") == "job-created" and str(r.get("workload", "")).startswith("queued")
    }
    if capacity is None or not queued:
        return
    report.operations["queued jobs"] = len(queued)
    held: set[str] = set()
    peak = 0
    for record in history:
        kind = record.get("kind")
        if kind == "observed" and str(record.get("job_name")) in queued:
            lease = str(record["lease"])
            if record.get("holder") is None:
                held.discard(lease)
                continue
            held.add(lease)
            peak = max(peak, len(held))
            if len(held) > capacity:
                report.violations["kueue-quota-holders"].append(
                    f"{lease} held under token {record['token']} by {record['holder']} at"
                    f" t={record['t']:.3f} while {len(held) - 1} other queued leases were"
                    f" held (quota for {capacity}): {sorted(held - {lease})}"
                )
        elif kind == "workload-end":
            evictions = record.get("evictions") or {}
            for reason, count in evictions.items():
                report.operations[f"kueue evictions ({reason})"] += int(count)
    report.operations["queued leases held at once (peak)"] = peak
    ended = {
        str(r["job"])
        for r in history
        if r.get("kind") == "job_end" and r.get("phase") in ("Succeeded", "Failed")
    }
    finished = {
        str(r["job"]) for r in history if r.get("kind") == "workload-end" and r.get("finished")
    }
    for job in sorted((queued & ended) - finished):
        report.violations["queued-workload-finished"].append(
            f"{job}: the job ended but its Workload was not marked Finished"
        )


def _check_work_queues(history: list[dict[str, Any]], report: Report) -> None:
    """Invariant 8: a work queue that succeeded had a slot whose Succeeded completion was seen."""
    queues = {
        str(r["job"])
        for r in history
        if r.get("kind") == "job-created" and r.get("workload") == "work-queue"
    }
    completed = {
        str(r.get("job_name"))
        for r in history
        if r.get("kind") == "observed" and (r.get("completion") or {}).get("outcome") == "Succeeded"
    }
    for record in history:
        job = str(record.get("job"))
        ended = record.get("kind") == "job_end" and record.get("phase") == "Succeeded"
        if ended and job in queues and job not in completed:
            report.violations["work-queue-success-completed"].append(
                f"{job}: a work queue ended Succeeded without a slot's Succeeded completion"
            )


def _check_claims_and_completions(history: list[dict[str, Any]], report: Report) -> None:
    """Invariants 1 and 2, on the watch's own order (etcd order) per lease."""
    claimed: dict[str, tuple[int, str]] = {}
    last_token: dict[str, int] = {}
    completion_seen: dict[str, dict[str, Any]] = {}
    for record in history:
        if record.get("kind") != "observed":
            continue
        lease, token = str(record["lease"]), int(record["token"])
        holder, completion = record.get("holder"), record.get("completion")
        previous = last_token.get(lease)
        if previous is not None and token < previous:
            report.violations["tokens-increase-per-lease"].append(
                f"{lease}: token went down from {previous} to {token}"
            )
        if holder is not None and claimed.get(lease) != (token, str(holder)):
            before = claimed.get(lease)
            if before is not None and token <= before[0]:
                report.violations["tokens-increase-per-lease"].append(
                    f"{lease}: claim under token {token} after a claim under {before[0]}"
                )
            claimed[lease] = (token, str(holder))
        last_token[lease] = token if previous is None else max(token, previous)
        if completion is None:
            if lease in completion_seen:
                report.violations["one-completion-per-job"].append(
                    f"{lease}: the recorded completion disappeared"
                )
            continue
        first = completion_seen.setdefault(lease, completion)
        if first != completion:
            report.violations["one-completion-per-job"].append(
                f"{lease}: completion changed from {first} to {completion}"
            )
        elif first is completion:
            # The completion and the lease's token are one object version: the
            # completion must carry the token the lease had. The holder is
            # checked against the claim of that token when the watch saw it
            # (a watch that restarts can miss short-lived states).
            held = claimed.get(lease)
            if int(completion["token"]) != token or (
                held is not None and held[0] == token and str(completion["holder"]) != held[1]
            ):
                report.violations["one-completion-per-job"].append(
                    f"{lease}: completion under token {completion['token']} by"
                    f" {completion['holder']} while the lease was at token {token}"
                    f" (last claim seen: {held})"
                )
    accepted: dict[str, set[tuple[int, str]]] = defaultdict(set)
    for record in history:
        if record.get("kind") == "complete" and record.get("ok"):
            accepted[str(record["job"])].add((int(record["token"]), str(record["holder"])))
    for job, completions in accepted.items():
        if len(completions) > 1:
            report.violations["one-completion-per-job"].append(
                f"{job}: completions accepted under (token, holder) {sorted(completions)}"
            )


def _check_target(history: list[dict[str, Any]], report: Report) -> None:
    applied = sorted((r for r in history if r.get("kind") == "applied"), key=lambda r: r["seq"])
    highest: dict[str, tuple[int, int]] = {}
    for record in applied:
        key, token, seq = str(record["key"]), int(record["token"]), int(record["seq"])
        before = highest.get(key)
        if before is not None and token < before[0]:
            report.violations["target-tokens-never-go-back"].append(
                f"{key}: write #{seq} with token {token} accepted after #{before[1]} with"
                f" token {before[0]}"
            )
        if before is None or token >= before[0]:
            highest[key] = (token, seq)


def _check_jobs(history: list[dict[str, Any]], report: Report) -> None:
    for record in history:
        if record.get("kind") != "job_end":
            continue
        phase, reason = record.get("phase"), record.get("reason")
        if phase not in ("Succeeded", "Failed"):
            report.violations["no-job-lost"].append(
                f"{record['job']}: ended in phase {phase!r}, not Succeeded or Failed"
            )
        elif phase == "Failed" and reason not in (
            "AttemptsExhausted",
            "DeadlineExceeded",
            "WorkerFailed",
            "BackoffLimitExceeded",  # a worker failure with no retry left (backoffLimit 0)
            "IndexFailed",  # an Indexed job: one index used up its attempts or failed
            # attempts used up, the last one's pod never started within
            # startupDeadlineSeconds (single.py _exhausted); e.g. a Forbid run closed
            # by the next run (no new attempt) whose pod a loaded node started late
            "StartupDeadlineExceeded",
        ):
            report.violations["no-job-lost"].append(
                f"{record['job']}: failed without a reason the run allows ({reason!r})"
            )


def _check_deadlines(history: list[dict[str, Any]], report: Report) -> None:
    for record in history:
        if record.get("kind") != "write" or not record.get("ok"):
            continue
        deadline = record.get("deadline")
        if deadline is None or float(record["check_at"]) > float(deadline):
            report.violations["no-effect-after-deadline"].append(
                f"{record['job']}: write under token {record['token']} passed its lease check"
                f" at {record['check_at']:.3f}, after the worker's deadline {deadline}"
            )


def schedule_minute(cron: str, job: str) -> int | None:
    """A cron run's schedule time (unix minutes) from its job's name ``<cron>-<minutes>``."""
    tail = job[len(cron) + 1 :] if job.startswith(f"{cron}-") else ""
    return int(tail) if tail.isdigit() else None


def _check_cron_runs(history: list[dict[str, Any]], report: Report) -> None:
    """Invariants 6 and 7, per LeasedCronJob, on the watch's order over its run leases."""
    policies = {
        str(r["cron"]): str(r["policy"]) for r in history if r.get("kind") == "cron-created"
    }
    runs: dict[str, tuple[str, int]] = {}  # run lease -> (cron, schedule minute)
    for record in history:
        cron = record.get("cron")
        if record.get("kind") == "observed" and cron:
            minute = schedule_minute(str(cron), str(record.get("job_name", "")))
            if minute is not None:
                runs[str(record["lease"])] = (str(cron), minute)
    if not runs:
        return
    report.operations["cron runs (leases)"] = len(runs)
    held: dict[str, set[str]] = defaultdict(set)
    overlaps: set[tuple[str, str]] = set()
    first_claim: dict[str, float] = {}
    granted: dict[str, set[int]] = defaultdict(set)
    for record in history:
        kind = record.get("kind")
        if kind == "observed":
            lease = str(record["lease"])
            if lease not in runs:
                continue
            cron, token = runs[lease][0], int(record["token"])
            base = record.get("base")
            holder = record.get("holder")
            if (
                holder is not None
                or record.get("completion") is not None
                or (base is not None and token > int(base))
            ):
                granted[lease].add(token)
            if holder is None:
                held[cron].discard(lease)
                continue
            first_claim.setdefault(lease, float(record["t"]))
            # A run of several completions holds its index leases together:
            # only another run's lease is an overlap.
            others = {o for o in held[cron] if runs[o][1] != runs[lease][1]}
            held[cron].add(lease)
            if policies.get(cron) in ("Forbid", "Replace"):
                for other in sorted(others):
                    pair = (min(lease, other), max(lease, other))
                    if pair not in overlaps:
                        overlaps.add(pair)
                        report.violations["cron-runs-one-at-a-time"].append(
                            f"{cron} ({policies[cron]}): {lease} held under token {token}"
                            f" by {holder} at t={record['t']:.3f} while {other} was held"
                        )
        elif kind in ("write", "write-unknown", "complete", "complete-unknown"):
            if str(record.get("job")) in runs:
                granted[str(record["job"])].add(int(record["token"]))
        elif kind == "pull-claim" and str(record.get("lease")) in runs:
            granted[str(record["lease"])].add(int(record["token"]))
    # Per run (its schedule minute): its leases' tokens and first claim
    # together (a run of several completions has one lease per index).
    by_cron: dict[str, dict[int, str]] = defaultdict(dict)
    run_tokens: dict[str, set[int]] = defaultdict(set)
    run_claim: dict[str, float] = {}
    run_name: dict[str, str] = {}  # lease -> the run's name (its lowest lease name)
    for lease, (cron, minute) in sorted(runs.items()):
        name = by_cron[cron].setdefault(minute, lease)
        run_name[lease] = name
        run_tokens[name] |= granted.get(lease, set())
        if lease in first_claim:
            run_claim[name] = min(first_claim[lease], run_claim.get(name, first_claim[lease]))
    for cron, by_minute in by_cron.items():
        listed = sorted(by_minute.items())
        _check_run_tokens(cron, listed, run_tokens, report)
        if policies.get(cron) == "Replace":
            _check_replaced_writes(cron, listed, run_claim, run_name, history, report)


def _check_run_tokens(
    cron: str, runs: list[tuple[int, str]], granted: dict[str, set[int]], report: Report
) -> None:
    """Invariant 7: each run's lowest granted token is above every earlier run's highest.

    ``runs``: (schedule minute, run) in order; ``granted``: per run, the
    tokens of all its leases (its index leases' for a run of several completions).
    """
    highest: tuple[int, str] | None = None
    for _, lease in runs:
        tokens = granted.get(lease)
        if not tokens:
            continue
        if highest is not None and min(tokens) <= highest[0]:
            report.violations["cron-run-tokens-ordered"].append(
                f"{cron}: {lease} was granted token {min(tokens)}, not above token"
                f" {highest[0]} of the earlier run {highest[1]}"
            )
        if highest is None or max(tokens) > highest[0]:
            highest = (max(tokens), lease)


def _check_replaced_writes(
    cron: str,
    runs: list[tuple[int, str]],
    first_claim: dict[str, float],
    run_name: dict[str, str],
    history: list[dict[str, Any]],
    report: Report,
) -> None:
    """Invariant 6 for Replace: no accepted write checked its lease after a later run's claim.

    ``runs``: (schedule minute, run) in order; ``first_claim``: per run, the
    first claim of any of its leases; ``run_name``: each lease's run.
    """
    later_claim: dict[str, tuple[float, str]] = {}  # run lease -> first claim of any later run
    soonest: tuple[float, str] | None = None
    for _, lease in reversed(runs):
        if soonest is not None:
            later_claim[lease] = soonest
        claimed = first_claim.get(lease)
        if claimed is not None and (soonest is None or claimed < soonest[0]):
            soonest = (claimed, lease)
    for record in history:
        if record.get("kind") != "write" or not record.get("ok"):
            continue
        lease = str(record.get("job"))
        bound = later_claim.get(run_name.get(lease, lease))
        check_raw = record.get("check_raw")
        if bound is None or check_raw is None or float(check_raw) <= bound[0]:
            continue
        report.violations["replaced-run-stops-before-next"].append(
            f"{cron}: {record['job']} (token {record['token']}, {record['holder']}) checked its"
            f" lease at t={float(check_raw):.3f} and its write was accepted, after the later"
            f" run {bound[1]} was seen claimed at t={bound[0]:.3f}"
        )
