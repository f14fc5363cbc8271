/*
 * An Indexed LeasedJob's index lease beside a single LeasedJob whose name
 * is the index lease's old name, for Spin: job "a" (Indexed; its index 0
 * needs a lease) and job "a-0" (a single job), and the deletion of job
 * "a-0", whose operator stops that job's lease (LeaseStore.stop).
 *
 * Index i's lease was named "a-i", the name of job "a-0"'s own lease: one
 * object for two jobs, and the deletion of job "a-0" stopped it by name.
 * The fix: index leases get names no LeasedJob's lease can have, and a stop
 * takes only the lease whose spec.jobName and spec.jobUID are the deleted
 * job's. -DS_COLLIDE: the old names (one object), to check that the stop's
 * own check is enough by itself. Mutation: -DSTOP_BY_NAME_INDEX (the stop
 * ignores spec.jobName: caught with -DS_COLLIDE).
 *
 * -DS_SUSPEND: job "a-0" is suspended (spec.suspend) and resumed, once;
 * its reconcile suspends its lease (LeaseStore.suspend: unheld, the cap one
 * up, no claim until resumed) only when the lease's spec.jobName is its own
 * (the actor's check before it plans; a lease serving another job is a name
 * taken). Mutation: -DSUSPEND_BY_NAME_INDEX (the suspend takes the lease by
 * name: caught with -DS_COLLIDE -DS_SUSPEND).
 *
 * Invariant I: a lease is never stopped or suspended by another job while
 * its job is live and its index still needs it (job "a" never fails, nor
 * loses its holder, because another job was deleted or suspended). Time
 * plays no part: lifecycle.pml checks each lease's protocol, suspend and
 * resume included (S_SUSPEND), which every index lease follows as its own.
 */

#define JA 1      /* job "a", index 0 */
#define JB 2      /* job "a-0" */

/* Lease objects by name: 0 is "a-0"; 1 is index 0 of "a" under the new
 * names (under S_COLLIDE, "a-0" as well: object 0). */
#ifdef S_COLLIDE
#define LA 0
#else
#define LA 1
#endif
#define LB 0

bool ex[2];     /* the lease exists */
byte jn[2];     /* spec.jobName (and jobUID): the job it serves */
bool hd[2];     /* held */
byte tk[2];     /* spec.fencingToken */
byte cp[2];     /* spec.maxFencingToken */
byte hj[2];     /* ghost: the job whose claim holds it */

bool live[3];   /* the job exists */
bool done[3];   /* the job's attempt (its index) completed */
bool stop = false;  /* job "a-0"'s stop request, sent, not yet landed */
bool sp[2];     /* spec.suspended */
bool sus = false;   /* job "a-0"'s spec.suspend */
byte suspends = 0;  /* times job "a-0" was suspended (at most once: a bound) */

/* A job's reconcile: create its lease, or take one that is its own
 * (spec.jobName); a lease of that name serving another job is not taken
 * (the name is taken: an Event, no claim). */
inline reconcile(j, l) {
  if
  :: !ex[l] -> ex[l] = true; jn[l] = j; tk[l] = 0; cp[l] = 2
  :: ex[l] && jn[l] == j && !hd[l] && !done[j] && tk[l] < cp[l] && !sp[l] && !(j == JB && sus) ->
       /* LeaseStore.claim (never while suspended) */
       tk[l]++; hd[l] = true; hj[l] = j
  :: else -> skip
  fi
}

inline finish(j, l) {   /* the holder completes */
  if
  :: hd[l] && hj[l] == j -> hd[l] = false; done[j] = true
  :: else -> skip
  fi
}

active proctype World() {
  live[JA] = true; live[JB] = true;
end:
  do
  :: atomic { live[JA] -> reconcile(JA, LA) }
  :: atomic { live[JB] -> reconcile(JB, LB) }
  :: atomic { live[JA] -> finish(JA, LA) }
  :: atomic { live[JB] -> finish(JB, LB) }
  :: atomic { live[JB] -> live[JB] = false; stop = true }   /* kubectl delete leasedjob a-0 */
  :: atomic { stop ->   /* LeaseStore.stop of job a-0's lease, by its name */
       if
#ifdef STOP_BY_NAME_INDEX
       :: ex[LB] ->
#else
       :: ex[LB] && jn[LB] == JB ->
#endif
            /* inv I: not the lease of a live job whose index needs it */
            assert(!(jn[LB] != JB && live[jn[LB]] && !done[jn[LB]]));
            hd[LB] = false; cp[LB] = tk[LB]
       :: else -> skip
       fi;
       stop = false }
#ifdef S_SUSPEND
  :: atomic { live[JB] && !sus && suspends == 0 -> sus = true; suspends++ }
  :: atomic { live[JB] && sus -> sus = false }   /* resumed */
  :: atomic { live[JB] && sus ->   /* job a-0's reconcile: LeaseStore.suspend */
       if
#ifdef SUSPEND_BY_NAME_INDEX
       :: ex[LB] && !sp[LB] ->
#else
       :: ex[LB] && jn[LB] == JB && !sp[LB] ->
#endif
            /* inv I: not the lease of a live job whose index needs it */
            assert(!(jn[LB] != JB && live[jn[LB]] && !done[jn[LB]]));
            sp[LB] = true;
            if
            :: hd[LB] -> hd[LB] = false; cp[LB]++   /* the ended attempt uses no budget */
            :: else -> skip
            fi
       :: else -> skip
       fi }
  :: atomic { live[JB] && !sus && ex[LB] && jn[LB] == JB && sp[LB] -> sp[LB] = false }
#endif
  od
}
