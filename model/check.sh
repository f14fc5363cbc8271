#!/usr/bin/env bash
# Check the Promela models with Spin: the lifecycle protocol (model/lifecycle.pml),
# a LeasedCronJob's runs in one fencing domain (model/schedules.pml; S_INDEXED:
# a run of several completions, its index leases inside its range), an
# Indexed job's index lease beside a job of its old name (model/indexes.pml),
# a work-queue job's slot leases after its first success (model/workqueue.pml),
# and two LeasedJobs queued by Kueue in a quota for one (model/queue.pml).
#
# Usage: model/check.sh [quick|deep|mutations]
#   quick  bitstate search (a 2^26-bit table, 8 MB) of every scenario together, then
#          each seeded mutation (a bitstate search): Spin must report its
#          violation (default)
#   deep   exhaustive searches (-DCOLLAPSE), one per scenario (the protocol
#          alone, then with each of the user scenarios) and a few more, with
#          bounds MODEL_DEEP (Spin -D flags; default the model's own, RENEWS=1
#          D=4 TMAX=9), up to MODEL_MEMLIM_MB (default 6000) of memory each,
#          then the mutations, each an exhaustive search at the same bounds
#   mutations  only the seeded mutations, as in deep
#   schedules  only schedules.pml, indexes.pml, workqueue.pml and queue.pml, as in deep
# In every mode schedules.pml, indexes.pml, workqueue.pml and queue.pml are searched exhaustively
# (-DCOLLAPSE): one search per concurrency policy with its scenarios (quick:
# the fast ones; deep: each at the bounds MODEL_SCHED_DEEP, default the
# model's own, D=4 TMAX=9, two runs), then their mutations.
# MODEL_MUTATIONS (space-separated names) limits the mutations run; unset: all.
# Prints one line per run: name, verdict, states stored, seconds.
# Exit 1 when the correct model has an error or a mutation is not caught.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mode="${1:-quick}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$here/lifecycle.pml" "$here/schedules.pml" "$here/indexes.pml" "$here/workqueue.pml" "$here/queue.pml" "$work/"
cd "$work"
all="-DS_RECREATE -DS_REPLACE -DS_FOREIGN -DS_HANDOVER -DS_SUSPEND -DS_EXCUSE -DS_SCALE -DS_CREATE"

# run NAME EXPECT PANFLAGS -- SPINFLAGS...: build pan and search; EXPECT: ok|caught;
# PML: the model (default lifecycle.pml)
run() {
  local name="$1" expect="$2" panflags="$3" pml="${PML:-lifecycle.pml}"; shift 4
  if [[ "$expect" == caught && -n "${MODEL_MUTATIONS:-}" && " $MODEL_MUTATIONS " != *" $name "* ]]; then
    return 0
  fi
  rm -f "$pml.trail"
  spin "$@" -a "$pml" >/dev/null
  # shellcheck disable=SC2086
  gcc -O2 -w -DSAFETY -DNOFAIR $panflags -o pan pan.c
  local out start end errors states
  start=$(date +%s.%N)
  out="$(./pan -m"${PAN_M:-100000}" -w"${PAN_W:-27}" 2>&1 || true)"
  end=$(date +%s.%N)
  errors="$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' <<<"$out")"
  states="$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' <<<"$out")"
  mem="$(sed -n 's/^ *\([0-9.]*\)[[:space:]]*total actual memory usage.*/\1/p' <<<"$out")"
  local verdict
  if [[ "$errors" == 0 ]]; then verdict=ok; else verdict=caught; fi
  if [[ "$expect" == ok ]] && grep -qE 'reached -DMEMLIM bound|max search depth too small' <<<"$out"; then
    verdict="incomplete: $(grep -m1 -oE 'reached -DMEMLIM bound|max search depth too small' <<<"$out")"
    errors=incomplete
  fi
  if [[ "$verdict" == caught ]]; then
    local what
    what="$(grep -m1 -E 'assertion violated|invalid end state' <<<"$out" || true)"
    what="${what#pan:1: }"
    verdict="caught: ${what:0:100}"
    # The counterexample: Spin replays the trail pan wrote and must hit the
    # same violation; its length is printed.
    local steps=0
    if [[ -f "$pml.trail" ]] && spin "$@" -t "$pml" 2>&1 | grep -qE 'assertion violated|invalid end state'; then
      steps="$(wc -l <"$pml.trail")"
    else
      verdict="no trail: ${verdict}"
      errors=0
    fi
    verdict="${verdict} trail=${steps}"
  fi
  printf '%-28s %-70s states=%s memMB=%s seconds=%.1f\n' "$name" "$verdict" "$states" "$mem" "$(echo "$end - $start" | bc)"
  if [[ "$expect" == ok && "$errors" != 0 ]] || [[ "$expect" == caught && "$errors" == 0 ]]; then
    echo "model/check.sh: $name: expected $expect" >&2
    if [[ -f "$pml.trail" ]]; then spin "$@" -t -p "$pml" | tail -40 >&2 || true; fi
    failed=1
  fi
}

failed=0
# The bounds of the exhaustive searches: the model's defaults (RENEWS=1 D=4
# TMAX=9), written out.
deep="${MODEL_DEEP:--DRENEWS=1 -DD=4 -DTMAX=9}"
exact="-DCOLLAPSE -DMEMLIM=${MODEL_MEMLIM_MB:-6000}"
if [[ "$mode" == mutations || "$mode" == schedules ]]; then
  :
elif [[ "$mode" == deep ]]; then
  # Exhaustive: -DCOLLAPSE stores each state as indices into per-process
  # tables (exact: no hash compaction or bitstate loss); a search that hits
  # -DMEMLIM or the depth bound is reported incomplete and fails. One search
  # per scenario (the protocol alone, then with each user scenario) at the
  # bounds MODEL_DEEP, then the protocol with two renewals per worker, and
  # the pair of scenarios whose interaction the model once found wanting
  # (suspend and excuse). bench/model-check.md gives the figures of each.
  for scenario in "" S_RECREATE S_REPLACE S_FOREIGN S_HANDOVER S_SUSPEND S_EXCUSE S_SCALE S_CREATE; do
    # shellcheck disable=SC2086
    PAN_W="${PAN_W:-27}" run "correct${scenario:+-${scenario#S_}}" ok "$exact" -- $deep ${scenario:+-D$scenario}
  done
  # shellcheck disable=SC2086
  PAN_W="${PAN_W:-27}" run correct-RENEWS2 ok "$exact" -- $(sed 's/-DRENEWS=[0-9]*//' <<<"$deep") -DRENEWS=2
  # shellcheck disable=SC2086
  PAN_W="${PAN_W:-27}" run correct-SUSPEND-EXCUSE ok "$exact" -- $deep -DS_SUSPEND -DS_EXCUSE
  # The held create (no lease yet) with what races it: a suspension, a
  # pre-created pod, the job deleted and created again.
  for scenario in S_SUSPEND S_FOREIGN S_RECREATE; do
    # shellcheck disable=SC2086
    PAN_W="${PAN_W:-27}" run "correct-CREATE-${scenario#S_}" ok "$exact" -- $deep -DS_CREATE -D$scenario
  done
  # The held create decided on a stale view (STALE_VIEW: a lease the cache
  # misses), with a peer replica: too large for an exhaustive search in
  # 6 GB (64 M states stored at 4 GB), so a bitstate search (a 2^30-bit
  # table, 128 MB): no error found is not a proof here.
  # shellcheck disable=SC2086
  PAN_W=30 run correct-CREATE-HANDOVER-STALE-VIEW ok "-DBITSTATE" -- $deep -DS_CREATE -DS_HANDOVER -DSTALE_VIEW
else
  PAN_W=26 run correct ok "-DBITSTATE" -- $all
fi
# An index lease's held create (IndexLeaseCreator._first_attempt) is decided
# on the lease cache and the pod watch's memory: a view that may miss the
# lease at any token (ANY_VIEW, once). Exhaustive in every mode but
# schedules (1.2 M states, 7 s).
if [[ "$mode" != schedules ]]; then
  # shellcheck disable=SC2086
  PAN_W="${PAN_W:-27}" run correct-CREATE-ANY-VIEW ok "$exact" -- $deep -DS_CREATE -DSTALE_VIEW -DANY_VIEW
fi
# Each invariant's seeded bugs: name, the scenario that exposes it and the
# mutation (Spin -D flags), then what the quick mode adds (smaller bounds
# where the bitstate search reaches the counterexample sooner; PAN_W=n: a
# larger bit table). In the deep and mutations modes each is an exhaustive
# search at the bounds of the deep searches (MODEL_DEEP): the search that
# finds no error in the correct model finds the mutation's.
mutations=(
  # With S_FOREIGN: since the claim binds its pod, a push lease is held
  # unbound only while a token whose pod name someone else took is claimed
  # and released (the burn); elsewhere the UID check alone refuses a stale
  # completion (a UID is bound under one token only: inv 9).
  "complete-no-token-check|-DS_FOREIGN -DCOMPLETE_NO_TOKEN_CHECK|"
  "complete-twice|-DCOMPLETE_TWICE|"
  "rearm-resets-token|-DS_RECREATE -DREARM_RESETS_TOKEN|"
  "target-no-fence|-DTARGET_NO_FENCE|"
  "stop-by-name|-DS_RECREATE -DSTOP_BY_NAME|"
  "no-local-deadline|-DNO_LOCAL_DEADLINE|"
  "deadline-from-reply|-DDEADLINE_FROM_REPLY|"
  # In the quick mode with a larger bit table (128 MB) and two renewals: at
  # 2^27 bits the bitstate search once missed it.
  "reclaim-no-precondition|-DRECLAIM_NO_PRECONDITION|-DRENEWS=2 PAN_W=30"
  "adopt-any|-DS_FOREIGN -DADOPT_ANY|"
  "no-uid-check|-DS_REPLACE -DNO_UID_CHECK|"
  "renew-binds|-DS_FOREIGN -DS_REPLACE -DRENEW_BINDS|"
  # The claim binds the pod made for its token in the same write (the pod is
  # created first): a lost claim's pod (deleted, its process still running)
  # refused only by its UID (inv 9: a token's writes come only from the pod
  # its claim bound), and a claim judged before a take-over that lands for
  # the new incarnation without the jobUID test (inv 1; a handed-over
  # replica's claim in flight).
  "lost-pod-no-uid-check|-DS_SUSPEND -DNO_UID_CHECK|"
  "claim-any-incarnation|-DS_RECREATE -DS_HANDOVER -DCLAIM_ANY_INCARNATION|-DTMAX=4"
  "claim-suspended|-DS_SUSPEND -DCLAIM_SUSPENDED|-DTMAX=2"
  "suspend-no-cap|-DS_SUSPEND -DSUSPEND_NO_CAP|-DD=2 -DTMAX=2"
  "excuse-while-held|-DS_EXCUSE -DEXCUSE_WHILE_HELD|"
  "excuse-twice|-DS_EXCUSE -DEXCUSE_TWICE|-DD=3 -DTMAX=4"
  # A take-over or resume that makes the lease claimable at once, while the
  # worker the operator stopped or suspended may still write (what the
  # exhaustive search found; the code waits: JobService.earlier_hold_wait).
  "no-hold-wait-recreate|-DS_RECREATE -DNO_HOLD_WAIT|-DTMAX=3"
  "no-hold-wait-suspend|-DS_SUSPEND -DNO_HOLD_WAIT|-DTMAX=3"
  # An elastic Indexed job scaled down past the index, then up (S_SCALE): the
  # scale-up resumes the suspended lease only after the hold wait, and the
  # next claim is above the removed worker's token. Seeded: the resume
  # without the wait, the lease handed back at the old token (inv 6), and
  # the index's lease made anew at its base token (inv 2).
  "no-hold-wait-scale|-DS_SCALE -DNO_HOLD_WAIT|-DTMAX=3"
  "scale-reopen-old-token|-DS_SCALE -DSCALE_REOPEN_OLD_TOKEN|"
  "scale-recreate-at-base|-DS_SCALE -DSCALE_RECREATE_AT_BASE|"
  # A job's first lease created held by its pod, made first (S_CREATE, issue
  # 29): the create landing on a lease that exists (another replica's held
  # create for the same pod: inv 2), a pod of the name made by someone else
  # taken for the held create (inv 1: it completes), and the created lease
  # suspended as its job is yet held (the operator's guard and the CRD's
  # create rule removed: inv 7).
  "held-create-overwrites|-DS_CREATE -DS_HANDOVER -DHELD_CREATE_OVERWRITES|"
  "held-adopt-any|-DS_CREATE -DS_FOREIGN -DHELD_ADOPT_ANY|"
  "held-create-suspended|-DS_CREATE -DS_SUSPEND -DHELD_CREATE_SUSPENDED|"
  # A refused held create, on a stale view, that claims whatever unheld
  # lease it read for its pod: not only this incarnation's, just below the
  # pod's token (inv 2: a token issued again).
  "held-keep-any|-DS_CREATE -DS_HANDOVER -DSTALE_VIEW -DHELD_KEEP_ANY|"
  # The same two on an index lease's view (ANY_VIEW: a lease at any token
  # missed): inv 2 both.
  "held-keep-any-view|-DS_CREATE -DSTALE_VIEW -DANY_VIEW -DHELD_KEEP_ANY|"
  "held-overwrites-any-view|-DS_CREATE -DSTALE_VIEW -DANY_VIEW -DHELD_CREATE_OVERWRITES|"
  # schedules.pml (a fourth field: the model): exhaustive in every mode, at
  # MODEL_SCHED_DEEP. Invariant A (two runs hold together, at the store or
  # in time) for Forbid and Replace, B (token ranges) for every policy.
  "failed-retry-final|-DS_FORBID -DFAILED_RETRY_FINAL||schedules.pml"
  "failed-retry-final-replace|-DS_REPLACE -DFAILED_RETRY_FINAL||schedules.pml"
  "closed-excuse|-DS_FORBID -DS_EXCUSE -DCLOSED_EXCUSE||schedules.pml"
  "closed-suspend|-DS_FORBID -DS_SUSPEND -DCLOSED_EXCUSE||schedules.pml"
  "untaken-final|-DS_FORBID -DUNTAKEN_FINAL||schedules.pml"
  "untaken-final-replace|-DS_REPLACE -DUNTAKEN_FINAL||schedules.pml"
  "no-ceiling|-DS_ALLOW -DS_EXCUSE -DNO_CEILING||schedules.pml"
  # The rule the code has today: Forbid waits only while an earlier run's
  # lease is held (plan.forbid_wait); a run suspended while held is unheld,
  # its worker still in its window (docs/model.md).
  "forbid-no-hold-wait|-DS_FORBID -DS_SUSPEND -DFORBID_NO_HOLD_WAIT||schedules.pml"
  "replace-no-hold-wait|-DS_REPLACE -DREPLACE_NO_HOLD_WAIT||schedules.pml"
  # A run of several completions (S_INDEXED): Forbid/Replace judge and close
  # only its first index lease; an index lease's take-over that does not
  # read its run's lease first; the cron job's one list made before its
  # closes (the code lists again after them: CronActor._list_again).
  "first-index-only|-DS_FORBID -DS_INDEXED -DBACKOFF=0 -DTMAX=4 -DFIRST_INDEX_ONLY||schedules.pml"
  "first-index-only-replace|-DS_REPLACE -DS_INDEXED -DBACKOFF=0 -DTMAX=4 -DFIRST_INDEX_ONLY||schedules.pml"
  "index-no-run-check|-DS_FORBID -DS_INDEXED -DBACKOFF=0 -DTMAX=4 -DNO_RUN_CHECK||schedules.pml"
  "index-list-before-close|-DS_REPLACE -DS_INDEXED -DBACKOFF=0 -DTMAX=4 -DLIST_BEFORE_CLOSE||schedules.pml"
  "stop-by-name-index|-DS_COLLIDE -DSTOP_BY_NAME_INDEX||indexes.pml"
  "suspend-by-name-index|-DS_COLLIDE -DS_SUSPEND -DSUSPEND_BY_NAME_INDEX||indexes.pml"
  # workqueue.pml: invariant W (no claim on a slot once the job is done with it)
  "wq-no-stop|-DNO_WQ_STOP||workqueue.pml"
  # queue.pml (Kueue): Q1 the gate, Q2 the quota, Q3 the fence, Q4 no hang
  "queue-no-gate|-DNO_GATE||queue.pml"
  "queue-no-gate-pull|-DS_PULL -DNO_GATE||queue.pml"
  "queue-unset-first|-DUNSET_BEFORE_RELEASE||queue.pml"
  "queue-unset-first-pull|-DS_PULL -DUNSET_BEFORE_RELEASE||queue.pml"
  "queue-resume-old-token|-DRESUME_OLD_TOKEN||queue.pml"
  "queue-unfenced-evict|-DUNFENCED_EVICT||queue.pml"
  "queue-no-finish|-DNO_WL_FINISH||queue.pml"
  "queue-no-fence|-DS_SHARED -DQ_NO_FENCE||queue.pml"
)

# schedules.pml (a LeasedCronJob's runs) and indexes.pml: exhaustive in
# every mode. The correct model, one search per concurrency policy with the
# scenarios (docs/model.md, "The schedules model"); the quick mode runs the
# ones that end in seconds, at smaller bounds where given.
sdeep="${MODEL_SCHED_DEEP:--DD=4 -DTMAX=9}"
# their hash tables: 2^24 slots (128 MB) in the quick mode, 2^26 (512 MB) else
sw=26
if [[ "$mode" == quick ]]; then sw=24; fi
if [[ "$mode" != mutations ]]; then
  # name|Spin flags|model|quick: "-" to leave it out of the quick mode, else
  # the flags the quick mode adds (smaller bounds)
  correct_more=(
    "sched-forbid|-DS_FORBID -DS_EXCUSE -DS_SUSPEND|schedules.pml|-DTMAX=6"
    "sched-replace|-DS_REPLACE -DS_EXCUSE -DS_SUSPEND|schedules.pml|-DTMAX=6"
    "sched-allow|-DS_ALLOW -DS_EXCUSE|schedules.pml|-DTMAX=6"
    "sched-allow-suspend|-DS_ALLOW -DS_SUSPEND|schedules.pml|-"
    "sched-allow-target|-DS_ALLOW -DTARGET|schedules.pml|-"
    "sched-forbid-3runs|-DS_FORBID -DNR=3|schedules.pml|-"
    "sched-replace-3runs|-DS_REPLACE -DNR=3|schedules.pml|-"
    "sched-allow-3runs|-DS_ALLOW -DNR=3 -DTMAX=4|schedules.pml|-"
    "sched-forbid-indexed|-DS_FORBID -DS_INDEXED -DBACKOFF=0 -DTMAX=4|schedules.pml|"
    "sched-replace-indexed|-DS_REPLACE -DS_INDEXED -DBACKOFF=0 -DTMAX=4|schedules.pml|"
    "sched-allow-indexed|-DS_ALLOW -DS_INDEXED -DBACKOFF=0 -DTMAX=4 -DTARGET|schedules.pml|-"
    "index|-DS_INDEX|indexes.pml|"
    "index-collide|-DS_COLLIDE|indexes.pml|"
    "index-suspend|-DS_SUSPEND|indexes.pml|"
    "index-collide-suspend|-DS_COLLIDE -DS_SUSPEND|indexes.pml|"
    "workqueue||workqueue.pml|"
    "queue||queue.pml|"
    "queue-pull|-DS_PULL|queue.pml|"
    "queue-shared|-DS_SHARED|queue.pml|"
    "queue-pull-shared|-DS_PULL -DS_SHARED|queue.pml|-"
    "queue-3evictions|-DNEV=3|queue.pml|-"
  )
  for m in "${correct_more[@]}"; do
    IFS='|' read -r name flags pml quick <<<"$m"
    if [[ "$mode" == quick && "$quick" == - ]]; then continue; fi
    if [[ "$mode" == quick ]]; then flags="$flags $quick"; fi
    bounds=""
    if [[ "$pml" == schedules.pml ]]; then bounds="$sdeep"; fi
    # a bound the search gives replaces the default's
    for f in $flags; do
      if [[ "$f" == -D*=* ]]; then bounds="$(sed "s/${f%%=*}=[0-9]*//" <<<"$bounds")"; fi
    done
    # shellcheck disable=SC2086
    PML="$pml" PAN_W="${PAN_W_SCHED:-$sw}" run "$name" ok "$exact" -- $bounds $flags
  done
fi
for m in "${mutations[@]}"; do
  IFS='|' read -r name flags quick pml <<<"$m"
  if [[ "$mode" == schedules && -z "$pml" ]]; then continue; fi
  if [[ -n "$pml" ]]; then
    bounds=""
    if [[ "$pml" == schedules.pml ]]; then bounds="$sdeep"; fi
    # a bound the mutation gives replaces the default's
    for f in $flags; do
      if [[ "$f" == -D*=* ]]; then bounds="$(sed "s/${f%%=*}=[0-9]*//" <<<"$bounds")"; fi
    done
    # shellcheck disable=SC2086
    PML="$pml" PAN_W="${PAN_W_SCHED:-$sw}" run "$name" caught "$exact" -- $bounds $flags
  elif [[ "$mode" == quick ]]; then
    w=27 spinq=()
    for f in $quick; do
      if [[ "$f" == PAN_W=* ]]; then w="${f#PAN_W=}"; else spinq+=("$f"); fi
    done
    # shellcheck disable=SC2086
    PAN_W="$w" run "$name" caught "-DBITSTATE" -- $flags "${spinq[@]}"
  else
    # shellcheck disable=SC2086
    PAN_W="${PAN_W:-27}" run "$name" caught "$exact" -- $deep $flags
  fi
done
exit "$failed"
