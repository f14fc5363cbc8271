/*
 * LeasedJobs queued by Kueue, for Spin: a ClusterQueue with quota for ONE
 * job, two queued LeasedJobs (each its own JobLease: its own fencing
 * domain), each with a Kueue Workload the operator creates and owns; Kueue
 * admits a pending Workload when the quota is free and evicts an admitted
 * one at any time (a preemption by the other job, or any other eviction:
 * the same write, Evicted=True); the operator's reconcile of each job (one
 * read of its Workload, then one write, as the code's serialised reconcile
 * of one object), its expiry judge, the jobs' workers, and a fenced target
 * shared by both jobs.
 *
 * The integration's rules (docs/model.md, "Queued by Kueue"):
 *   - the gate: a queued job claims only while its Workload is admitted
 *     (quota reserved, not evicted) as its reconcile read it;
 *   - an eviction ends the running attempt by the fenced suspend
 *     (LeaseStore.suspend: unheld in one write, the ended attempt uncounted:
 *     cap + 1), and only once no attempt holds the lease (suspended and
 *     unheld) is the Workload's quota reservation unset, so Kueue may admit
 *     another Workload in its place;
 *   - re-admission resumes the lease (LeaseStore.resume) and the next claim
 *     takes the next token;
 *   - a finished job (Succeeded, or its attempts exhausted) marks its
 *     Workload Finished, which frees the quota.
 *
 * Time plays no part: a worker may stall, write or complete at any moment,
 * and the expiry judge may reclaim a held lease at any moment (what a
 * timely reclaim waits for, the worker's deadline, is lifecycle.pml's, as is
 * the hold wait of a resume: S_SUSPEND there). So every worker may outlive
 * its hold: a preempted or reclaimed worker that keeps running (a zombie,
 * e.g. a process on a partitioned node) still writes to the target and
 * completes. Workers are named by their token (push mode: pod <job>-<token>).
 *
 * Invariants (assertions):
 *   Q1 (gate): no claim by a job whose Workload holds no quota reservation;
 *   Q2 (quota): at most one queued job's lease is held at a time (holders;
 *       a zombie holds nothing);
 *   Q3 (fence): the target never accepts a write under a token lower than
 *       one it accepted in that domain, and the store never accepts the
 *       completion of a preempted attempt (a token a fenced suspend ended);
 *   Q4 (no hang): in a state where nothing can move, both jobs are
 *       finished and both Workloads are marked Finished (a preempted job is
 *       re-admitted and finishes); the environment is bounded (NEV
 *       evictions, each job's attempts), so every run ends in such a state.
 *
 * Scenarios: -DS_PULL (a pool claims any lease the store lets it: the gate
 * must then be the store's, the lease suspended while the gate is closed;
 * the operator does not queue pull-mode jobs today, QueueNotSupported, but
 * any client with claim rights is such a claimant); -DS_SHARED (the two jobs are runs of one
 * LeasedCronJob: one fencing domain, the second run's tokens above the
 * first's range, one bar at the target).
 * Mutations: -DNO_GATE (the gate ignored), -DUNSET_BEFORE_RELEASE (the
 * reservation unset on the eviction, before the fenced suspend),
 * -DRESUME_OLD_TOKEN (the resume hands the lease back at the preempted
 * token), -DUNFENCED_EVICT (batch/v1's eviction: the pod stopped, the lease
 * kept; the reservation unset once the pod is gone), -DNO_WL_FINISH (a
 * finished job's Workload is never marked Finished), -DQ_NO_FENCE (the
 * target without its fence). model/check.sh expects Spin to catch each.
 */

#ifndef NEV
#define NEV 2      /* evictions (preemptions) in a run */
#endif
#define MAXATT 2   /* each job's spec.maxAttempts (counted attempts) */
/* Tokens per job: at most MAXATT + NEV (a claim per counted attempt, and
 * one more per eviction of a held attempt: cap + 1); the Workers name
 * tokens 1..5. */
#if MAXATT + NEV > 5
#error the Workers name tokens up to 5
#endif
#define RANGE 4    /* S_SHARED: the second run's tokens start above the first's range */

#define RUNNING 0
#define SUCCEEDED 1
#define FAILED 2

/* Each job's JobLease. */
byte tk[2];      /* spec.fencingToken */
byte cp[2];      /* spec.maxFencingToken */
bool hd[2];      /* held */
bool cm[2];      /* a completion (Succeeded) was recorded */
bool sp[2];      /* spec.suspended */
byte pt[2];      /* ghost: the highest token a fenced suspend ended, 0: none */

/* Each job's LeasedJob and Workload. */
byte ph[2];      /* the job's phase */
bool wx[2];      /* the Workload exists */
bool qr[2];      /* status.admission set (QuotaReserved=True, Admitted=True) */
bool ev[2];      /* Evicted=True */
bool wf[2];      /* Finished=True */
bool wv[2];      /* the Workload changed since the job's reconcile read it */
bool dirty[2];   /* a watch event the job's reconcile has not read yet */
byte nev = 0;    /* evictions so far */

/* Each job's workers, by token: 0 none (never started, or ended), 1 runs,
 * 2 runs and made its write. */
byte wk[12];
#define W(j, t) wk[(j) * 6 + (t)]

/* The fenced target: the highest token it accepted, per domain (one bar
 * under S_SHARED), and the ghost of what it ever accepted. */
#ifdef S_SHARED
#define DOM(j) 0
#define GTOK(j, t) ((j) * RANGE + (t))
#else
#define DOM(j) (j)
#define GTOK(j, t) (t)
#endif
byte t_max[2];
byte g_max[2];

/* Reduction: a worker that can change nothing any more is no worker (0):
 * one whose token is below its lease's (its completion is refused for
 * good: tokens only rise) and whose write was made or would be refused by
 * the fence (its token below the bar, which only rises). */
#ifdef Q_NO_FENCE
#define FENCED_OUT(j, t) (false)
#else
#define FENCED_OUT(j, t) (GTOK(j, t) < t_max[DOM(j)])
#endif
#define REAP1(j, t) if :: W(j, t) != 0 && t < tk[j] && (W(j, t) == 2 || FENCED_OUT(j, t)) -> W(j, t) = 0 :: else -> skip fi
#define REAP(j) REAP1(j, 1); REAP1(j, 2); REAP1(j, 3); REAP1(j, 4)

inline touch(j) { dirty[j] = true }
inline wtouch(j) { wv[j] = true; dirty[j] = true }

#ifdef UNFENCED_EVICT
/* (the mutation) the pod deleted; the lease kept as it is */
#define SUSPEND(j) sp[j] = true; touch(j)
#else
/* LeaseStore.suspend: unheld in one write; a held attempt ends uncounted
 * (cap + 1) and its token is marked (the ghost pt) */
#define SUSPEND(j) if :: hd[j] -> cp[j]++; pt[j] = tk[j] :: else -> skip fi; hd[j] = false; sp[j] = true; touch(j)
#endif
#ifdef UNFENCED_EVICT
/* batch/v1 under Kueue: the eviction deletes the pod and keeps no lease; a
 * pod deleted is gone for Kueue at once. */
#define RELEASED(j) (true)
#else
#define RELEASED(j) (sp[j] && !hd[j])
#endif

/* LeaseStore.claim: unheld, no completion, below the cap, not suspended;
 * the pod of the new token starts. */
inline claim(j) {
  assert(qr[j]);          /* Q1: only under a quota reservation */
  assert(!hd[1 - j]);     /* Q2: one holder within the quota */
  tk[j]++; hd[j] = true; W(j, tk[j]) = 1; touch(j); REAP(j)
}
#define EXHAUSTED(j) (!hd[j] && tk[j] >= cp[j])
#define CLAIMABLE(j) (!hd[j] && !cm[j] && tk[j] < cp[j] && !sp[j] && ph[j] == RUNNING)

/* Kueue (its scheduler and workload controller; the ClusterQueue's quota
 * is one job): admit a pending Workload while no other Workload holds the
 * quota (a reservation not finished), evict an admitted one (up to NEV). */
#define HOLDS_QUOTA(k) (qr[k] && !wf[k])
active proctype Kueue() {
end:
  do
  :: atomic { wx[0] && !qr[0] && !wf[0] && !HOLDS_QUOTA(1) -> qr[0] = true; ev[0] = false; wtouch(0) }
  :: atomic { wx[1] && !qr[1] && !wf[1] && !HOLDS_QUOTA(0) -> qr[1] = true; ev[1] = false; wtouch(1) }
  :: atomic { qr[0] && !ev[0] && !wf[0] && nev < NEV -> ev[0] = true; nev++; wtouch(0) }
  :: atomic { qr[1] && !ev[1] && !wf[1] && nev < NEV -> ev[1] = true; nev++; wtouch(1) }
  :: timeout ->   /* nothing can move: Q4 */
       assert(ph[0] != RUNNING && ph[1] != RUNNING && wf[0] && wf[1]); break
  od
}

/* A job's reconcile: one read of its Workload (the cache), then one
 * write planned from it and from the lease. Lease writes are conditioned on
 * the lease (the store's tests), so the lease is judged at the write; the
 * Workload writes are conditioned on the Workload as read (a change since
 * refuses them: 409, and the change is a watch event: the next reconcile).
 * Reconciles of one job are serialised (one process per job), so between
 * this job's read and write only Kueue, the workers and the expiry judge
 * move, and none of them makes a lease held (but S_PULL's claims, on a
 * lease suspended whenever the reservation may be unset). */
proctype Operator(byte j) {
  bool rq = false, rev = false;   /* the Workload as read: reserved, evicted */
end:
  do
  :: atomic { dirty[j] -> dirty[j] = false; wv[j] = false; rq = qr[j]; rev = ev[j] }
     atomic {
       if
       :: !wx[j] -> wx[j] = true; touch(j)   /* create the Workload */
       :: wx[j] && ph[j] == RUNNING && cm[j] -> ph[j] = SUCCEEDED; touch(j)
       :: wx[j] && ph[j] == RUNNING && !cm[j] && EXHAUSTED(j) -> ph[j] = FAILED; touch(j)   /* AttemptsExhausted */
       :: ph[j] != RUNNING && !wf[j] ->   /* mark the Workload Finished */
#ifndef NO_WL_FINISH
            if :: !wv[j] -> wf[j] = true; wtouch(j) :: else -> skip fi
#else
            skip
#endif
       :: ph[j] == RUNNING && !cm[j] && !EXHAUSTED(j) && rev ->
            /* evicted: the fenced suspend; once it landed (a later reconcile
             * reads the lease suspended and unheld), the reservation unset */
            if
#ifdef UNSET_BEFORE_RELEASE
            :: rq && !wv[j] -> qr[j] = false; wtouch(j)   /* (the mutation: unset first) */
            :: !(rq && !wv[j]) && !sp[j] -> SUSPEND(j)
#else
            :: !sp[j] -> SUSPEND(j)
            :: sp[j] && rq && RELEASED(j) && !wv[j] -> qr[j] = false; wtouch(j)
#endif
            :: else -> skip
            fi
       :: ph[j] == RUNNING && !cm[j] && !EXHAUSTED(j) && rq && !rev && sp[j] ->   /* admitted: LeaseStore.resume */
#ifdef RESUME_OLD_TOKEN
            /* (the mutation: handed back at the preempted token, to a new pod) */
            if :: pt[j] == tk[j] && tk[j] > 0 -> hd[j] = true; W(j, tk[j]) = 1 :: else -> skip fi;
#endif
            sp[j] = false; touch(j)
#ifndef S_PULL
       :: ph[j] == RUNNING && CLAIMABLE(j) &&
#ifndef NO_GATE
            rq && !rev &&   /* the gate */
#endif
            true -> claim(j)   /* push mode: the operator claims for the pod it creates */
#endif
       :: else -> skip
       fi }
  od
}

/* The operator's expiry judge: a held lease whose worker stopped renewing
 * is reclaimed (unheld, token kept; the attempt counts). Untimed: at any
 * moment, so the worker may run on as a zombie. */
active proctype Expiry() {
end:
  do
  :: atomic { hd[0] && !cm[0] -> hd[0] = false; touch(0) }
  :: atomic { hd[1] && !cm[1] -> hd[1] = false; touch(1) }
  od
}

#ifdef S_PULL
/* A worker pool (pull mode): claims any lease the store lets it claim. */
active proctype Pool() {
end:
  do
  :: atomic { CLAIMABLE(0) -> claim(0) }
  :: atomic { CLAIMABLE(1) -> claim(1) }
  od
}
#endif

/* Worker t of job j: its one guarded write (at the fenced target), its
 * completion (LeaseStore.complete: holder and token), or its end (a
 * crash, a lost completion, a failed renewal): any of them at any time,
 * however its hold ended. */
inline write(j, t) {
  atomic { W(j, t) == 1 ->
    W(j, t) = 2;
#ifndef Q_NO_FENCE
    if :: GTOK(j, t) >= t_max[DOM(j)] ->
#endif
         assert(GTOK(j, t) >= g_max[DOM(j)]);   /* Q3: never below what it accepted */
         t_max[DOM(j)] = GTOK(j, t);
         if :: GTOK(j, t) > g_max[DOM(j)] -> g_max[DOM(j)] = GTOK(j, t) :: else -> skip fi;
         REAP(0); REAP(1)
#ifndef Q_NO_FENCE
    :: else -> skip
    fi
#endif
  }
}
inline complete(j, t) {
  atomic { W(j, t) != 0 ->
    if
    :: hd[j] && tk[j] == t && !cm[j] ->
         assert(t > pt[j]);   /* Q3: never a preempted attempt's completion */
         cm[j] = true; hd[j] = false; touch(j)
    :: else -> skip   /* refused: not the holder's token */
    fi;
    W(j, t) = 0 }
}
inline quit(j, t) { atomic { W(j, t) != 0 -> W(j, t) = 0 } }

proctype Workers(byte j) {
end:
  do
  :: write(j, 1)
  :: write(j, 2)
  :: write(j, 3)
  :: write(j, 4)
  :: complete(j, 1)
  :: complete(j, 2)
  :: complete(j, 3)
  :: complete(j, 4)
  :: quit(j, 1)
  :: quit(j, 2)
  :: quit(j, 3)
  :: quit(j, 4)
  :: write(j, 5)
  :: complete(j, 5)
  :: quit(j, 5)
  od
}

init {
  atomic {
    cp[0] = MAXATT; cp[1] = MAXATT;
#ifndef NO_GATE
    /* a queued job's gate is closed until its Workload is admitted: its
     * lease is suspended (the code plans the job as spec.suspend: true), so
     * the store refuses every claim until the admission resumes it */
    sp[0] = true; sp[1] = true;
#endif
    dirty[0] = true; dirty[1] = true;
    run Operator(0); run Operator(1);
    run Workers(0); run Workers(1)
  }
}
