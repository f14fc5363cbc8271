/*
 * The leasehold lifecycle protocol, for Spin: one job name (one fencing
 * domain, the JobLease), its incarnations, their pods and workers, two
 * operator replicas, a fenced target and a discretised clock.
 *
 * Transitions map to the code as listed in docs/architecture.md ("The model
 * of the protocol"). Seeded protocol bugs (mutations) are switched on with
 * -D<NAME>; model/check.sh runs each one and expects Spin to catch it.
 * Scenarios (-DS_RECREATE, -DS_REPLACE, -DS_FOREIGN, -DS_HANDOVER) switch on
 * what users and the cluster do besides the protocol: delete and recreate the
 * job, replace a pod under its name, pre-create a pod under the next name,
 * hand the operator's leadership over.
 *
 * Time: `now` is real time in ticks. A worker's local deadline is
 * sent + D - WM measured on its own clock, which may run slow by up to E
 * ticks over one window; the operator's expiry is seen + D + OM on its clock,
 * which may run fast by up to E ticks. The protocol needs D-WM+E < D+OM-E.
 */

#ifndef D
#define D 4        /* leaseDurationSeconds */
#endif
#ifndef WM
#define WM 2       /* the worker's margin before its deadline */
#endif
#define OM 1       /* the operator's expiry margin */
#define E 1        /* the clock-rate error over one window, in ticks */
#ifndef TMAX
#define TMAX 9     /* time bound */
#endif
#ifndef RENEWS
#define RENEWS 1   /* renewals per worker */
#endif
#define MAXATT 2   /* spec.maxAttempts of each incarnation */
#define NUID 6     /* pod UIDs 1..NUID-1 */
#define NTOK 6     /* pod names <job>-1 .. <job>-(NTOK-1) */
#define NOBODY 9   /* owner of a pod no job created */
#define UNSEEN 255

#ifdef NO_LOCAL_DEADLINE
#define IN_WINDOW(dl) (true)
#else
#define IN_WINDOW(dl) (now <= dl)
#endif
/* A pod's renew is accepted only when the lease is bound to its own UID: a
 * pod never binds (the operator does, to the pod it created; a pull claim
 * binds its claimant in the claim). RENEW_BINDS is the rule before the fix
 * (an unbound lease bound by the first renewal): a pod the operator did not
 * create could bind itself between the claim and the release on 409. */
#ifdef NO_UID_CHECK
#define UID_OK(uid) (true)
#define RENEW_BIND(uid) l_huid = uid
#elif defined(RENEW_BINDS)
#define UID_OK(uid) (l_huid == 0 || l_huid == uid)
#define RENEW_BIND(uid) l_huid = uid
#else
#define UID_OK(uid) (l_huid == uid)
#define RENEW_BIND(uid) skip
#endif

#define RUNNING 0
#define SUCCEEDED 1
#define FAILED 2
#define DELETED 3

byte now = 0;

/* The JobLease: the fencing domain of the job name; it outlives the job. */
byte l_tok = 0;       /* fencing token */
bool l_held = false;  /* holderIdentity set (its name is <job>-<l_tok>) */
byte l_huid = 0;      /* spec.holderUID, 0 while unbound */
byte l_inc = 0;       /* spec.jobUID: the incarnation it serves */
byte l_base = 0;      /* spec.baseFencingToken */
byte l_cap = 0;       /* spec.maxFencingToken */
byte l_ctok = 0;      /* completion token, 0: none */
byte l_ver = 0;       /* resourceVersion */

/* The LeasedJob of that name: job_uid 0 while none exists; incarnations 1, 2. */
byte job_uid = 1;
byte job_phase[3];
byte pending_stop = 0;  /* a deleted incarnation's stop, not yet delivered */

/* Pods by name (= token) and by UID. */
byte pod_uid[NTOK];
byte uid_owner[NUID];
bool killed[NUID];
byte next_uid = 1;

/* Operator replicas: one leads (peering); each has its own view. */
byte leader = 0;
byte o_seen_ver[2];
byte o_seen_t[2];

/* The fenced target and the ghost state of the invariants. */
byte t_max = 0;        /* the target's bar */
byte g_tmax = 0;       /* highest token the target ever accepted */
byte max_issued = 0;   /* highest token ever claimed in the domain */
byte completions[3];   /* accepted completions per incarnation */

inline bump() { l_ver = (l_ver + 1) % 250 }

proctype Worker(byte uid; byte tok; bool renewing) {
  byte dl = 0;          /* local deadline (real ticks); 0: no window yet */
  byte sent, renews = 0;
  bool ok, wlate, wpend = false, wdup = false, wrote = false, cpend = false, csent = false;
  do
  :: renewing && !killed[uid] && renews < RENEWS && !csent ->
       renews++; sent = now;
       if
       :: atomic {   /* the renew request lands: LeaseStore.renew */
            ok = (l_held && l_tok == tok && UID_OK(uid));
            if :: ok -> RENEW_BIND(uid); bump() :: else -> skip fi
          }
          if
          :: ok ->       /* the reply arrives: Renewer, worker/timing.py */
#ifdef DEADLINE_FROM_REPLY
               sent = now;
#endif
               if :: dl = sent + D - WM :: dl = sent + D - WM + E fi
          :: skip        /* the reply is lost */
          fi
       :: skip           /* the request is lost */
       fi;
       ok = false; sent = 0
  :: atomic { !killed[uid] && !wrote && dl != 0 && !csent && IN_WINDOW(dl) ->
       wpend = true; wrote = true;   /* the guarded effect starts (its lease check) */
       /* ghost: the worker is past its deadline, or its hold ended */
       wlate = ((now > dl) || !(l_held && l_tok == tok && l_huid == uid)) }
  :: wpend ->   /* the write lands at the fenced target, maybe twice */
       atomic {
#ifndef TARGET_NO_FENCE
         if :: tok >= t_max ->
#endif
              assert(tok >= g_tmax);                    /* inv 3 */
              assert(!(wlate && max_issued > tok));     /* inv 5 */
              if :: tok > t_max -> t_max = tok :: else -> skip fi;
              if :: tok > g_tmax -> g_tmax = tok :: else -> skip fi
#ifndef TARGET_NO_FENCE
         :: else -> skip
         fi
#endif
       }
       if :: wpend = false :: !wdup -> wdup = true fi
  :: wpend -> wpend = false   /* the write is lost */
  :: !killed[uid] && !csent && (dl != 0 || !renewing) && (!renewing || IN_WINDOW(dl))
     -> csent = true; cpend = true
  :: cpend ->   /* the completion lands: LeaseStore.complete */
       atomic {
#ifdef COMPLETE_NO_TOKEN_CHECK
         ok = (l_held && l_ctok == 0 && (l_huid == uid || l_huid == 0));
#else
         ok = (l_held && l_tok == tok && l_huid == uid && l_ctok == 0);
#endif
#ifdef COMPLETE_TWICE
         ok = (l_held && l_tok == tok && l_huid == uid);
#endif
         if
         :: ok ->
              completions[l_inc]++;
              assert(tok == l_tok && uid_owner[uid] == l_inc && completions[l_inc] <= 1); /* inv 1 */
              l_ctok = tok; bump()
         :: else -> skip
         fi;
         ok = false
       }
       if :: cpend = false :: skip fi   /* delivered once, or again later */
  :: cpend -> cpend = false             /* lost */
  :: !wpend && !cpend -> break          /* the pod ends */
  od
}

proctype Operator(byte r) {
  byte judged, ct, cinc, buid;
  bool jpend = false, cpod = false, bpend = false;
  do
  :: leader == r && o_seen_ver[r] != l_ver ->   /* the lease watch: ExpiryClock.observe */
       atomic { o_seen_ver[r] = l_ver; o_seen_t[r] = now }
  :: atomic { leader == r && job_uid != 0 && l_inc != job_uid && !cpod ->   /* LeaseStore.rearm */
       l_inc = job_uid; l_held = false; l_huid = 0; l_ctok = 0;
#ifdef REARM_RESETS_TOKEN
       l_tok = 0;
#endif
       l_base = l_tok; l_cap = l_tok + MAXATT; bump() }
  :: atomic { leader == r && job_uid != 0 && l_inc == job_uid && job_phase[job_uid] == RUNNING &&
       !l_held && l_ctok == 0 && l_tok < l_cap && !cpod && !bpend && next_uid < NUID - 1 ->
       /* LeaseStore.claim (push mode), then the pod */
       l_tok++; l_held = true; l_huid = 0; bump();
       assert(l_tok > max_issued);   /* inv 2 */
       max_issued = l_tok; ct = l_tok; cinc = l_inc; cpod = true }
  :: cpod ->   /* create pod <job>-<ct>: reconcile._create_pod; 409 adopted only if ours */
       atomic {
         if
         :: pod_uid[ct] != 0 ->
              if
#ifdef ADOPT_ANY
              :: true ->
#else
              :: uid_owner[pod_uid[ct]] == cinc ->
#endif
                   buid = pod_uid[ct]; bpend = true
              :: else ->   /* PodNameTaken: release the token */
                   if :: l_held && l_tok == ct && l_huid == 0 -> l_held = false; bump()
                      :: else -> skip fi
              fi
         :: else ->
              pod_uid[ct] = next_uid; uid_owner[next_uid] = cinc;
              run Worker(next_uid, ct, true);
              buid = next_uid; next_uid++; bpend = true
         fi;
         cpod = false; cinc = 0
       }
  :: bpend -> atomic {   /* LeaseStore.bind */
       if :: l_held && l_tok == ct && l_huid == 0 -> l_huid = buid; bump() :: else -> skip fi;
       bpend = false; buid = 0 }
  :: atomic { leader == r && !jpend && l_held && l_ctok == 0 && o_seen_ver[r] != UNSEEN &&
       now >= o_seen_t[r] + D + OM - E ->   /* expired: ExpiryClock.expired */
       judged = o_seen_ver[r]; jpend = true }
  :: jpend -> atomic {   /* LeaseStore.reclaim: resourceVersion precondition */
       if
#ifdef RECLAIM_NO_PRECONDITION
       :: l_held && l_ctok == 0 ->
#else
       :: l_ver == judged ->
#endif
            l_held = false; l_huid = 0; bump()
       :: else -> skip
       fi;
       jpend = false; judged = 0 }
  :: atomic { leader == r && job_uid != 0 && l_inc == job_uid && job_phase[job_uid] == RUNNING &&
       l_ctok != 0 -> job_phase[job_uid] = SUCCEEDED }   /* reconcile: the completion ends the job */
  :: atomic { leader == r && job_uid != 0 && l_inc == job_uid && job_phase[job_uid] == RUNNING &&
       !l_held && l_ctok == 0 && l_tok >= l_cap && !cpod ->   /* reconcile: AttemptsExhausted */
       assert(l_tok >= l_base + MAXATT);   /* inv 4: a job fails only after its attempts */
       job_phase[job_uid] = FAILED }
  :: pending_stop != 0 -> atomic {   /* LeaseStore.stop of a deleted incarnation */
       if
#ifndef STOP_BY_NAME
       :: l_inc == pending_stop ->
#else
       :: true ->
#endif
            l_held = false; l_huid = 0; l_cap = l_tok; bump()
       :: else -> skip
       fi;
       pending_stop = 0 }
#ifdef S_HANDOVER
  :: atomic { leader == r ->   /* peering hand-over: the other replica counts afresh */
       leader = 1 - r; o_seen_ver[1 - r] = UNSEEN }
#endif
  :: timeout -> break
  od
}

/* Users and the cluster: delete and recreate the job, replace a pod under
 * its name, pre-create a pod under the next name. */
proctype User() {
  bool recreated = false, replaced = false, foreign = false;
  byte n;
  do
#ifdef S_RECREATE
  :: atomic { job_uid == 1 && !recreated -> job_phase[1] = DELETED; job_uid = 0; pending_stop = 1 }
  :: atomic { job_uid == 0 && !recreated && pending_stop == 0 -> job_uid = 2; recreated = true }
  :: atomic { job_uid == 0 && !recreated -> job_uid = 2; recreated = true }   /* the stop still in flight */
#endif
#ifdef S_REPLACE
  :: atomic { !replaced && l_tok > 0 && pod_uid[l_tok] != 0 && next_uid < NUID ->   /* kubectl replace --force */
       n = l_tok; killed[pod_uid[n]] = true; uid_owner[next_uid] = uid_owner[pod_uid[n]];
       pod_uid[n] = next_uid; replaced = true;
       run Worker(next_uid, n, true); next_uid++ }
#endif
#ifdef S_FOREIGN
  :: atomic { !foreign && l_tok + 1 < NTOK && pod_uid[l_tok + 1] == 0 && next_uid < NUID ->
       n = l_tok + 1; pod_uid[n] = next_uid; uid_owner[next_uid] = NOBODY; foreign = true;
       run Worker(next_uid, n, false); next_uid++ }
#endif
  :: break
  od
}

active proctype Clock() {
  do
  :: now < TMAX -> now++
  :: now == TMAX -> break
  od
}

init {
  o_seen_ver[0] = UNSEEN; o_seen_ver[1] = UNSEEN;
  atomic {
    run Operator(0);
#ifdef S_HANDOVER
    run Operator(1);
#endif
    run User()
  }
}
