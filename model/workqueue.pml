/*
 * A work-queue LeasedJob (completions unset, parallelism 2), for Spin: two
 * worker slots, each a JobLease of its own; claimants (a pool in pull mode,
 * or the operator in push mode: either takes any slot the store lets it
 * claim); holders that complete (Succeeded or Failed) or stall (their lease
 * is reclaimed); and the operator's reconcile: one read of both slot leases
 * (its list), then its writes one by one, each conditioned on the lease as
 * it read it (a lease that moved since refuses the write: 409).
 *
 * The rule (controller/plan/indexed.py _wind_down, _work_queue_end,
 * _late_stops): before any success a slot's Failed completion is reopened
 * (retried) while its cap allows; from the reconcile that reads the first
 * Succeeded completion no attempt starts, and every slot lease not held that
 * could still be claimed is stopped (LeaseStore.stop: unheld, cap := token);
 * held slots run on. The job is decided once a slot succeeded and none is
 * held; a decided job stops every lease it still owes, held or not (a claim
 * that raced the decision's read is taken back), until none is owed: then
 * the operator has nothing left to do for the job ("quiet").
 *
 * Invariant W: no claim lands on a slot lease once the job is quiet, i.e.
 * after its first success and its stops the job's slots take no claim from
 * anyone (assert in claim). A claim that lands between the first success
 * and the reconcile that reads it, or on a lease the reconcile read before
 * the claim (its stop then refused), is the window batch/v1 has too: that
 * slot is held and runs on. Mutation: -DNO_WQ_STOP (the stop of the slots
 * not held is dropped, at the first success and at the decision): caught.
 */

#define NS 2     /* slots */
#define CAP 2    /* each slot's attempts (spec.maxFencingToken at creation) */

byte tk[NS];    /* spec.fencingToken */
byte cp[NS];    /* spec.maxFencingToken */
bool hd[NS];    /* held */
byte cm[NS];    /* completion: 0 none, 1 Succeeded, 2 Failed */
bool mv[NS];    /* changed since the operator's last read (its writes' precondition) */
bool decided = false;  /* SuccessCriteriaMet */
bool quiet = false;    /* decided, and no stop owed: the operator is done with the job */

#define STOPPED(i) (!hd[i] && tk[i] >= cp[i])
#define OWES(i) (cm[i] == 0 && !STOPPED(i))
#define SUCCEEDED (cm[0] == 1 || cm[1] == 1)

/* LeaseStore.claim: unheld, no completion, below the cap (protocol.claim). */
inline claim(i) {
  atomic { !hd[i] && cm[i] == 0 && tk[i] < cp[i] ->
    assert(!quiet);   /* invariant W */
    tk[i]++; hd[i] = true; mv[i] = true }
}

inline end_attempt(i) {   /* the holder completes, or stalls and is reclaimed */
  atomic { hd[i] ->
    if
    :: cm[i] = 1
    :: cm[i] = 2
    :: skip   /* reclaimed: no completion */
    fi;
    hd[i] = false; mv[i] = true }
}

active proctype Claimants() {
end:
  do
  :: claim(0)
  :: claim(1)
  :: end_attempt(0)
  :: end_attempt(1)
  od
}

/* The stop planned for slot i from the read: after the first success, a
 * lease that could still be claimed: one not held, or any once decided. */
#ifdef NO_WQ_STOP
#define WANTS_STOP(i) (seen && OWES(i) && hd[i] && decided)
#else
#define WANTS_STOP(i) (seen && OWES(i) && (decided || !hd[i]))
#endif

inline stop(i, want) {   /* LeaseStore.stop, on the lease as read */
  atomic {
    if
    :: want && !mv[i] -> cp[i] = tk[i]; hd[i] = false; mv[i] = true
    :: else -> skip   /* it moved (409): the next reconcile reads it again */
    fi }
}

inline retry(i) {   /* before any success: reopen a Failed completion (RETRY) */
  if
  :: !seen && cm[i] == 2 && tk[i] < cp[i] -> cm[i] = 0; mv[i] = true
  :: else -> skip
  fi
}

active proctype Operator() {
  bool seen, w0, w1;
  tk[0] = 0; tk[1] = 0; cp[0] = CAP; cp[1] = CAP;
end:
  do
  :: atomic { !quiet ->   /* one reconcile's read and plan */
       mv[0] = false; mv[1] = false;
       seen = SUCCEEDED;
       decided = decided || (seen && !hd[0] && !hd[1]);
       w0 = WANTS_STOP(0); w1 = WANTS_STOP(1);
       retry(0); retry(1);
       quiet = decided && !w0 && !w1 }   /* it plans nothing more */
     stop(0, w0);
     stop(1, w1)
  od
}
