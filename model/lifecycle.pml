/*
 * The leasehold lifecycle protocol, for Spin: one job name (one fencing
 * domain, the JobLease), its incarnations, their pods and workers, two
 * operator replicas, a fenced target and a discretised clock.
 *
 * Transitions map to the code as listed in docs/model.md ("Transitions and
 * the code"). Seeded protocol bugs (mutations) are switched on with
 * -D<NAME>; model/check.sh runs each one and expects Spin to catch it.
 * Scenarios (-DS_RECREATE, -DS_REPLACE, -DS_FOREIGN, -DS_HANDOVER,
 * -DS_SUSPEND, -DS_EXCUSE, -DS_SCALE) switch on what users and the cluster do
 * besides the protocol: delete and recreate the job, replace a pod under its
 * name, pre-create a pod under the next name, hand the operator's leadership
 * over, suspend and resume the job, excuse an ended attempt (a disruption),
 * scale an elastic Indexed job down past this lease's index and up again
 * (the lease is then one index's: plan.indexed.removed_indexes).
 * -DS_CREATE starts with no lease at all (a new job name): the operator
 * creates it, either unheld (as before) or already held by the first
 * attempt's pod, created first (the held create, issue 29).
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
#define NUID 6     /* pod UIDs 1..NUID-1 (W8 and the Clock's EXPIRE list them: 1..5) */
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

/* S_SCALE: the index is at or above spec.completions (a scale-down removed
 * it): the planner plans it no claim; its lease is suspended at the store.
 * Mutations of the scale-up: SCALE_REOPEN_OLD_TOKEN (the lease handed back
 * to the removed worker at its old token instead of a resume and a claim
 * above it: inv 6 catches its renewal), SCALE_RECREATE_AT_BASE (the index's
 * lease made anew at its base token, the old token not carried: inv 2). */
#ifdef S_SCALE
#define SCALED_OUT (scaled_out)
#else
#define SCALED_OUT (false)
#endif

/* The CRD: a suspended lease cannot be claimed. */
#ifdef CLAIM_SUSPENDED
#define UNSUSPENDED (true)
#else
#define UNSUSPENDED (!l_susp)
#endif

#define RUNNING 0
#define SUCCEEDED 1
#define FAILED 2
#define DELETED 3

byte now = 0;

/* The JobLease: the fencing domain of the job name; it outlives the job. */
#ifdef S_CREATE
#ifdef ANY_VIEW
byte any_view_creates = 0;  /* held creates decided on a view that missed the lease */
#endif
bool l_abs = true;    /* no JobLease of the name yet (a create answers 409 once there is) */
#else
bool l_abs = false;
#endif
byte l_tok = 0;       /* fencing token */
bool l_held = false;  /* holderIdentity set (its name is <job>-<l_tok>) */
byte l_huid = 0;      /* spec.holderUID, 0 while unbound */
byte l_inc = 0;       /* spec.jobUID: the incarnation it serves */
byte l_base = 0;      /* spec.baseFencingToken */
byte l_cap = 0;       /* spec.maxFencingToken */
byte l_ctok = 0;      /* completion token, 0: none */
bool l_susp = false;  /* spec.suspended */
byte l_lut = 0;       /* spec.lastUncountedToken, 0: none */
byte l_rtok = 0;      /* annotation leasehold.dev/last-reclaimed-token (written by
                       * the reclaim itself): the last token judged expired */
/* resourceVersion, as what the operator's conditional writes compare: per
 * replica, "changed since the watch last showed it" (or never shown) and
 * "unchanged since the expiry was judged". Two bits instead of a counter, so
 * states that differ only in how many writes happened are one state. */
bool o_stale[2] = true;
bool o_jok[2];

/* The LeasedJob of that name: job_uid 0 while none exists; incarnations 1, 2. */
byte job_uid = 1;
byte job_phase[3];
bool job_susp = false;  /* the job's spec.suspend */
bool scaled_out = false;  /* S_SCALE: the index is removed (at or above spec.completions) */
byte j_stok = 0;        /* status.attemptHistory: the token whose attempt a suspension ended */
byte pending_stop = 0;  /* a deleted incarnation's stop, not yet delivered */

/* Pods by name (= token) and by UID. */
byte pod_uid[NTOK];
byte uid_owner[NUID];
bool killed[NUID];
byte next_uid = 1;

/* Each worker's state that other steps than its own must put in canonical
 * form (the Clock when a window closes, the User when it kills a pod), by
 * UID; the rest (requests and writes in flight) is the Worker's own. */
byte w_dl[NUID];      /* its local deadline, real ticks; 0: no open window
                       * (also the ghost of invariant 8) */
byte w_tok[NUID];     /* ghost: the token of its open window, 0: none */
bool w_rnw[NUID];     /* it renews (a pod the operator created, or one
                       * replaced under such a name); set when it starts */
byte w_ren[NUID];     /* renewals done (a round trip ended) */
bool w_wr[NUID];      /* its guarded effect started (one per worker) */
bool w_cs[NUID];      /* its completion was sent */

/* Operator replicas: one leads (peering); each has its own view. */
byte leader = 0;
byte o_seen_t[2] = UNSEEN;  /* when the watch last showed a change; UNSEEN: not yet */

/* The fenced target and the ghost state of the invariants. */
byte t_max = 0;        /* the target's bar */
byte g_tmax = 0;       /* highest token the target ever accepted */
byte max_issued = 0;   /* highest token ever claimed in the domain */
byte completions[3];   /* accepted completions per incarnation */
byte b_uid[NTOK];      /* ghost: the pod UID the claim of each token bound (0: none) */
byte g_unc = 0;        /* attempts of this incarnation that use no budget */

/* A take-over or resume makes the lease claimable again only once its
 * current token's worker surely stopped (protocol.hold_may_outlive, the
 * operator's JobService.earlier_hold_wait): the hold was never there, was
 * completed or reclaimed, or the operator saw the lease unchanged for the
 * expiry bound. NO_HOLD_WAIT: at once (the rule before the model found it). */
#define HOLD_MAY_OUTLIVE (l_tok != 0 && l_ctok == 0 && l_rtok != l_tok && (!l_susp || l_lut == l_tok))
#define QUIET(r) (o_seen_t[r] != UNSEEN && !o_stale[r] && now >= o_seen_t[r] + D + OM - E)
#ifdef NO_HOLD_WAIT
#define HOLD_ENDED(r) (true)
#else
#define HOLD_ENDED(r) (!HOLD_MAY_OUTLIVE || QUIET(r))
#endif

inline bump() { o_stale[0] = true; o_stale[1] = true; o_jok[0] = false; o_jok[1] = false }

/* Reduction: a worker that can start nothing more (no renewal, no guarded
 * effect, no completion: it was killed, sent its completion, or renews and
 * has no open window, no renewal left and none in flight) has its
 * bookkeeping (renewals done, effect started, completion sent) put to one
 * value, the values that keep it so. These three are read only by the
 * guards of those starts, each of which is false either way: renew needs
 * !killed, !w_cs and a renewal left; the effect needs !killed, !w_cs and an
 * open window; the completion needs !killed, !w_cs and, for a renewing
 * worker, an open window. Its requests, writes and completions in flight
 * are not touched (they still land), nor is its window ghost. */
inline wfin(i) {
  if
  :: killed[i] || w_cs[i] || (w_rnw[i] && w_dl[i] == 0 && w_ren[i] >= RENEWS) ->
       w_ren[i] = RENEWS; w_wr[i] = true; w_cs[i] = true
  :: else -> skip
  fi
}

/* Reduction: a window that closed (w_dl < now: the worker's own guards need
 * now <= w_dl, and invariant 8 counts a window open only while
 * now <= w_dl) is the same as no window: w_dl and its ghost token go to 0
 * at the tick that closes it (0 < now from the first tick on, and no window
 * opens before it: a deadline is at least 1). Not under NO_LOCAL_DEADLINE,
 * whose worker writes after its deadline (and marks the write late by it). */
#ifdef NO_LOCAL_DEADLINE
#define EXPIRE(i) skip
#else
#define EXPIRE(i) if :: w_dl[i] != 0 && w_dl[i] < now -> w_dl[i] = 0; w_tok[i] = 0; wfin(i) :: else -> skip fi
#endif
/* Reduction: the operator's watch time counts only through
 * now >= o_seen_t + D + OM - E (the expiry and QUIET); once that holds it
 * holds at every later tick, so the exact time is dropped: 0 satisfies it
 * from then on (now >= D + OM - E already). A real 0 seen then is past the
 * bound as well: the same class. UNSEEN stays. */
#define SEEN_PAST(r) if :: o_seen_t[r] != UNSEEN && now >= o_seen_t[r] + D + OM - E -> o_seen_t[r] = 0 :: else -> skip fi

/* inv 8's check for the worker uid getting a window under tok: worker i is
 * uid itself, or not under tok, or killed, or its window closed */
#define W8(i) (i == uid || w_tok[i] != tok || killed[i] || w_dl[i] < now)

/* Reduction: every step is one atomic statement from the loop's top (the
 * original's guard-then-effect steps and its local choices after a landing
 * kept the pod at an inner control point: a state of its own, though only
 * this pod's later steps read what it decided). A renewal's three steps
 * (request sent, request lands, reply arrives or is lost) are kept apart, as
 * before, by rp; while one is in flight the pod takes no other step (as in
 * the original, whose renewal was one sequence inside one loop branch). The
 * pod never ends: a pod that ends is one that takes no further step, which
 * every state here still allows (the loop's top is a valid end state). */
proctype Worker(byte uid; byte tok) {
  byte sent = 0;        /* the renew request's start (real ticks) while in flight */
  byte rp = 0;          /* renewal: 0 none in flight, 1 request sent, 2 reply in flight */
  /* Reduction: wlate and wdup are read only while wpend; they go back to
   * false with it. sent and rp go back to 0 when the round trip ends. */
  bool wlate = false, wpend = false, wdup = false, cpend = false;
end:
  do
  :: atomic { rp == 0 && w_rnw[uid] && !killed[uid] && w_ren[uid] < RENEWS && !w_cs[uid] ->
       sent = now; rp = 1 }
       /* (A lost request is the same as one never sent: not modelled twice.) */
  :: atomic { rp == 1 ->   /* the renew request lands: LeaseStore.renew */
       if
       :: l_held && l_tok == tok && UID_OK(uid) ->
            assert(l_lut != tok);   /* inv 6 */
            assert(b_uid[tok] == uid);   /* inv 9: only the pod its claim bound */
            RENEW_BIND(uid); bump(); rp = 2
       :: else ->
            sent = 0; rp = 0;
            if :: w_ren[uid] < RENEWS -> w_ren[uid]++ :: else -> skip fi; wfin(uid)
       fi }
  :: atomic { rp == 2 ->   /* the reply arrives: Renewer, worker/timing.py */
#ifdef DEADLINE_FROM_REPLY
       sent = now;
#endif
       /* inv 8: one worker per token at a time: no other live pod has an
        * open window under this token (a pod replaced under its name,
        * whose process still runs, must not get one) */
       assert(W8(1) && W8(2) && W8(3) && W8(4) && W8(5));
       /* (A killed pod's window is never read: its guards need !killed, and
        * invariant 8 passes it; kept at 0.) */
       if
       :: !killed[uid] ->
            if :: w_dl[uid] = sent + D - WM :: w_dl[uid] = sent + D - WM + E fi;
            w_tok[uid] = tok
       :: else -> skip
       fi;
       sent = 0; rp = 0;
       if :: w_ren[uid] < RENEWS -> w_ren[uid]++ :: else -> skip fi; wfin(uid) }
  :: atomic { rp == 2 ->   /* the reply is lost */
       sent = 0; rp = 0;
       if :: w_ren[uid] < RENEWS -> w_ren[uid]++ :: else -> skip fi; wfin(uid) }
  :: atomic { rp == 0 && !killed[uid] && !w_wr[uid] && w_dl[uid] != 0 && !w_cs[uid] && IN_WINDOW(w_dl[uid]) ->
       wpend = true; w_wr[uid] = true;   /* the guarded effect starts (its lease check) */
       /* ghost: the worker is past its deadline, or a newer token was issued */
       wlate = ((now > w_dl[uid]) || max_issued > tok) }
  :: atomic { rp == 0 && wpend ->   /* the write lands at the fenced target, maybe twice */
#ifndef TARGET_NO_FENCE
       if :: tok >= t_max ->
#endif
            assert(tok >= g_tmax);                    /* inv 3 */
            assert(!(wlate && max_issued > tok));     /* inv 5 */
            if :: tok > t_max -> t_max = tok :: else -> skip fi;
            if :: tok > g_tmax -> g_tmax = tok :: else -> skip fi
#ifndef TARGET_NO_FENCE
       :: else -> skip
       fi;
#endif
       if :: wpend = false; wdup = false; wlate = false :: !wdup -> wdup = true fi }
  :: atomic { rp == 0 && wpend -> wpend = false; wdup = false; wlate = false }   /* the write is lost */
  :: atomic { rp == 0 && !killed[uid] && !w_cs[uid] && (w_dl[uid] != 0 || !w_rnw[uid]) &&
       (!w_rnw[uid] || IN_WINDOW(w_dl[uid])) ->
       w_cs[uid] = true; cpend = true; wfin(uid) }
  :: atomic { rp == 0 && cpend ->   /* the completion lands: LeaseStore.complete */
       if
#ifdef COMPLETE_TWICE
       :: l_held && l_tok == tok && l_huid == uid ->
#elif defined(COMPLETE_NO_TOKEN_CHECK)
       :: l_held && l_ctok == 0 && (l_huid == uid || l_huid == 0) ->
#else
       :: l_held && l_tok == tok && l_huid == uid && l_ctok == 0 ->
#endif
            completions[l_inc]++;
            assert(tok == l_tok && uid_owner[uid] == l_inc && completions[l_inc] <= 1); /* inv 1 */
            assert(b_uid[tok] == uid);   /* inv 9 */
            assert(l_lut != tok);   /* inv 6 */
            l_ctok = tok; bump()
       :: else -> skip
       fi;
       if :: cpend = false :: skip fi }   /* delivered once, or again later */
  :: atomic { rp == 0 && cpend -> cpend = false }   /* lost */
  od
}

/* Reduction: as the Worker's, every step is one atomic statement from the
 * loop's top (the original's "cpod -> atomic {...}" stopped at a state of
 * its own between the guard, true until this replica's own step makes it
 * false, and the effect). An attempt is two steps: the pod <job>-<ct> is
 * created (or found: a 409) under the token ct the claim will take, then the
 * claim, pinned to ct and to the incarnation cinc, binds its UID buid in the
 * same write (cpend between them; burn: the pod of that name is not ours, so
 * the token is claimed unbound and released, rpend between those two). ct,
 * cinc and buid go back to 0 once the claim is decided (nothing reads them
 * until the next create sets them). */
proctype Operator(byte r) {
  byte ct = 0, cinc = 0, buid = 0;
  bool jpend = false, cpend = false, burn = false, rpend = false, hpend = false;
  do
  :: atomic { leader == r && o_stale[r] ->   /* the lease watch: ExpiryClock.observe */
       o_stale[r] = false; o_seen_t[r] = now }
#ifndef NO_HOLD_WAIT
  :: atomic { leader == r && job_uid != 0 && l_inc != job_uid && !cpend && !rpend && l_held &&
       HOLD_MAY_OUTLIVE ->   /* an earlier incarnation's pod holds it: LeaseStore.stop first */
       l_held = false; l_huid = 0; l_cap = l_tok; bump() }
#endif
  :: atomic { leader == r && job_uid != 0 && !l_abs && l_inc != job_uid && !cpend && !rpend && !hpend && HOLD_ENDED(r) ->   /* LeaseStore.rearm */
       /* Reduction: completions[] is read only at l_inc, and l_inc never
        * comes back to an incarnation it left (0, then 1, then 2): the count
        * of the one it leaves is dropped. */
       completions[l_inc] = 0;
       l_inc = job_uid; l_held = false; l_huid = 0; l_ctok = 0;
#ifdef REARM_RESETS_TOKEN
       l_tok = 0;
#endif
       l_base = l_tok; l_cap = l_tok + MAXATT; l_susp = job_susp; l_lut = 0; g_unc = 0; bump() }
  :: atomic { leader == r && job_uid != 0 && l_inc == job_uid && job_phase[job_uid] == RUNNING &&
       !job_susp && !SCALED_OUT && !l_held && l_ctok == 0 && l_tok < l_cap && !cpend && !rpend &&
       !hpend && next_uid < NUID - 1 && UNSUSPENDED ->
       /* Attempts.claim_and_start: the pod first, under the next token; a
        * 409 is claimed for only if the pod is this incarnation's */
       ct = l_tok + 1; cinc = l_inc; cpend = true;
       if
       :: pod_uid[ct] != 0 ->
            if
#ifdef ADOPT_ANY
            :: true ->
#else
            :: uid_owner[pod_uid[ct]] == cinc ->
#endif
                 buid = pod_uid[ct]
            :: else -> burn = true   /* PodNameTaken: move past the token */
            fi
       :: else ->
            pod_uid[ct] = next_uid; uid_owner[next_uid] = cinc; w_rnw[next_uid] = true;
            run Worker(next_uid, ct);
            buid = next_uid; next_uid++
       fi }
  :: atomic { cpend ->   /* LeaseStore.claim: the token test (ct - 1), the jobUID test and the CRD */
       if
       :: l_tok + 1 == ct &&
#ifndef CLAIM_ANY_INCARNATION
          l_inc == cinc &&
#endif
          !l_held && l_ctok == 0 && l_tok < l_cap && UNSUSPENDED ->
            l_tok++; l_held = true; bump();
            l_huid = buid;   /* claim and bind, one write (0 for a burn) */
            b_uid[l_tok] = l_huid;
            /* Reduction: l_rtok, j_stok and l_lut are read only as "== l_tok"
             * (HOLD_MAY_OUTLIVE, the excuse's guard; inv 6's "l_lut != tok" is
             * checked only where tok == l_tok, or after inv 1 already failed) and
             * "l_lut < l_tok" (the excuse); each is at most the old l_tok, below
             * the new one, and l_tok never goes down (but under
             * REARM_RESETS_TOKEN, whose next claim fails inv 2 right here), so
             * 0 is the same value to every later read. */
            l_rtok = 0; j_stok = 0; l_lut = 0;
            assert(l_tok > max_issued);   /* inv 2 */
            assert(!l_susp);              /* inv 7 */
            max_issued = l_tok;
            if :: burn -> rpend = true :: else -> ct = 0 fi
       :: else ->
            if
            :: buid != 0 && !(l_tok == ct && l_huid == buid) && pod_uid[ct] == buid ->
                 /* lost: the pod never holds; deleted at once (UID precondition).
                  * Its process may still run for a while (or be killed now). */
                 pod_uid[ct] = 0;
                 if
                 :: killed[buid] = true; w_dl[buid] = 0; w_tok[buid] = 0; wfin(buid)
                 :: skip
                 fi
            :: else -> skip   /* bound by another replica's claim, or a burn that lost */
            fi;
            ct = 0
       fi;
       cpend = false; cinc = 0; buid = 0; burn = burn && rpend }
#ifdef S_CREATE
  /* No lease yet. The plain create (JobActor._create_lease): unheld, at
   * token 0, suspended as the job's spec.suspend says; a 409 (a lease
   * exists) is read and planned on, nothing written. */
  :: atomic { leader == r && l_abs && job_uid != 0 && job_phase[job_uid] == RUNNING &&
       !cpend && !rpend && !hpend ->
       l_abs = false; l_inc = job_uid; l_base = 0; l_cap = MAXATT; l_susp = job_susp; bump() }
  /* The held create (JobActor._first_attempt, Attempts.start_with_new_lease):
   * on the operator's view, possibly stale, of the job not suspended, the
   * first attempt's pod <job>-1 is created first (a 409 is used only if the
   * pod is this incarnation's, else nothing: the plain create above), then
   * the lease is created already held by it and bound to its UID. */
  :: atomic { leader == r && job_uid != 0 && job_phase[job_uid] == RUNNING &&
#ifdef STALE_VIEW
       /* The operator decides on its cache and the job's status.leaseName,
        * which may miss a lease that exists: a new incarnation's view of the
        * old one's, or a peer replica's fresh create (its token at most 1).
        * With ANY_VIEW it may miss any lease, at any token: an index lease's
        * held create (IndexLeaseCreator._first_attempt) is decided on the
        * lease cache and the pod watch's memory, which an index lease of an
        * earlier token whose pods are gone can escape (once, a bound: each
        * such create makes a pod). */
#ifdef ANY_VIEW
       (l_abs || any_view_creates == 0) &&
#else
       (l_abs || l_inc != job_uid || l_tok <= 1) &&
#endif
#else
       l_abs &&
#endif
#ifndef HELD_CREATE_SUSPENDED
       !job_susp &&
#endif
       !SCALED_OUT && !cpend && !rpend && !hpend && next_uid < NUID - 1 ->
#ifdef ANY_VIEW
       if :: !l_abs -> any_view_creates++ :: else -> skip fi;
#endif
       ct = 1; cinc = job_uid;
       if
       :: pod_uid[ct] != 0 ->
            if
#ifdef HELD_ADOPT_ANY
            :: true ->
#else
            :: uid_owner[pod_uid[ct]] == cinc ->
#endif
                 buid = pod_uid[ct]; hpend = true   /* an earlier reconcile's pod: a restart */
            :: else -> ct = 0; cinc = 0   /* someone else's pod: the plain create */
            fi
       :: else ->
            pod_uid[ct] = next_uid; uid_owner[next_uid] = cinc; w_rnw[next_uid] = true;
            run Worker(next_uid, ct);
            buid = next_uid; next_uid++; hpend = true
       fi }
  /* The create lands: a create is refused when the name exists (409), so
   * it is a claim from "no lease", atomic at the store. */
  :: atomic { hpend ->
       if
#ifdef HELD_CREATE_OVERWRITES
       :: true ->
#else
       :: l_abs ->
#endif
            l_abs = false; l_inc = cinc; l_base = ct - 1; l_cap = l_base + MAXATT;
            l_tok = ct; l_held = true; l_huid = buid; l_ctok = 0;
#ifdef HELD_CREATE_SUSPENDED
            l_susp = job_susp;   /* copied from the job, held all the same */
#else
            l_susp = false;
#endif
            l_rtok = 0; j_stok = 0; l_lut = 0; b_uid[l_tok] = l_huid;
            assert(l_tok > max_issued);   /* inv 2 */
            assert(!l_susp);              /* inv 7 */
            max_issued = l_tok; bump()
       :: else ->   /* 409: the lease is read; kept only if bound to this very pod */
            if
#ifdef HELD_KEEP_ANY
            :: !l_held && l_ctok == 0 && pod_uid[ct] == buid ->
#else
            :: l_inc == cinc && l_tok + 1 == ct && !l_held && l_ctok == 0 && l_tok < l_cap &&
               UNSUSPENDED && pod_uid[ct] == buid ->
#endif
                 /* this incarnation's unheld lease just below the pod's token (a
                  * peer's plain create): claimed for this pod, bound to it, one
                  * write with its token test (Attempts.start_with_new_lease) */
                 l_tok = ct; l_held = true; l_huid = buid; b_uid[l_tok] = l_huid;
                 l_rtok = 0; j_stok = 0; l_lut = 0;
                 assert(l_tok > max_issued);   /* inv 2 */
                 assert(!l_susp);              /* inv 7 */
                 max_issued = l_tok; bump()
            :: !(l_tok == ct && l_huid == buid) && pod_uid[ct] == buid &&
               !(l_inc == cinc && l_tok + 1 == ct && !l_held && l_ctok == 0 && l_tok < l_cap &&
                 UNSUSPENDED) ->
                 pod_uid[ct] = 0;   /* deleted (UID precondition); its process may run on */
                 if
                 :: killed[buid] = true; w_dl[buid] = 0; w_tok[buid] = 0; wfin(buid)
                 :: skip
                 fi
            :: else -> skip
            fi
       fi;
       hpend = false; ct = 0; cinc = 0; buid = 0 }
  /* The create is never sent (the operator restarted after the pod's
   * create): the pod waits, unbound, for a lease (its renewals are refused:
   * 404); the next reconcile finds the pod its own and creates the lease
   * held by it (the step above, its 409 branch on the pod). */
  :: atomic { hpend -> hpend = false; ct = 0; cinc = 0; buid = 0 }
#endif
  :: atomic { rpend ->   /* the burnt token released (LeaseStore.release) */
       if :: l_held && l_tok == ct && l_huid == 0 -> l_held = false; bump()
          :: else -> skip fi;
       rpend = false; burn = false; ct = 0 }
  :: atomic { leader == r && !jpend && l_held && l_ctok == 0 && o_seen_t[r] != UNSEEN &&
       now >= o_seen_t[r] + D + OM - E ->   /* expired: ExpiryClock.expired */
       o_jok[r] = !o_stale[r]; jpend = true }
  :: atomic { jpend ->   /* LeaseStore.reclaim: resourceVersion precondition */
       if
#ifdef RECLAIM_NO_PRECONDITION
       :: l_held && l_ctok == 0 ->
#else
       :: o_jok[r] ->
#endif
            l_held = false; l_huid = 0; l_rtok = l_tok; bump()
       :: else -> skip
       fi;
       jpend = false; o_jok[r] = false }
  :: atomic { leader == r && job_uid != 0 && l_inc == job_uid && job_phase[job_uid] == RUNNING &&
       l_ctok != 0 -> job_phase[job_uid] = SUCCEEDED }   /* reconcile: the completion ends the job */
  :: atomic { leader == r && job_uid != 0 && l_inc == job_uid && job_phase[job_uid] == RUNNING &&
       !SCALED_OUT && !l_held && l_ctok == 0 && l_tok >= l_cap && !cpend && !rpend ->   /* reconcile: AttemptsExhausted */
       assert(l_tok >= l_base + MAXATT + g_unc);   /* inv 4: a job fails only after its attempts */
       job_phase[job_uid] = FAILED }
#ifdef S_SUSPEND
  :: atomic { leader == r && job_uid != 0 && l_inc == job_uid && job_phase[job_uid] == RUNNING &&
       job_susp && !l_susp && l_ctok == 0 ->   /* LeaseStore.suspend */
       if
       :: l_held ->   /* the running attempt ends, uses no budget */
#ifndef SUSPEND_NO_CAP
            l_cap++;
#endif
            g_unc++; j_stok = l_tok; l_lut = l_tok;
            assert(g_unc + l_base <= l_tok)   /* inv 4: only attempts that ran */
       :: else -> skip
       fi;
       l_held = false; l_huid = 0; l_susp = true; bump() }
  :: atomic { leader == r && job_uid != 0 && l_inc == job_uid && !job_susp && !SCALED_OUT &&
       l_susp && HOLD_ENDED(r) -> l_susp = false; bump() }   /* LeaseStore.resume */
#endif
#ifdef S_SCALE
  /* A scale-down: the removed index's lease is suspended (the same write as
   * a job's suspend: unheld, no claim, the ended attempt uses no budget)
   * before its pod is deleted; a completion that landed first stands. */
  :: atomic { leader == r && job_uid != 0 && l_inc == job_uid && job_phase[job_uid] == RUNNING &&
       scaled_out && !l_susp && l_ctok == 0 ->   /* plan.indexed._scale_down_steps */
       if
       :: l_held -> l_cap++; g_unc++; j_stok = l_tok; l_lut = l_tok;
            assert(g_unc + l_base <= l_tok)   /* inv 4: only attempts that ran */
       :: else -> skip
       fi;
       l_held = false; l_huid = 0; l_susp = true; bump() }
  /* A scale-up: the index is planned again; its suspended lease is resumed
   * once the removed worker's hold surely ended, then claimed above it. */
  :: atomic { leader == r && job_uid != 0 && l_inc == job_uid && !job_susp && !scaled_out &&
       l_susp && HOLD_ENDED(r) ->
#if defined(SCALE_REOPEN_OLD_TOKEN)
       /* handed back to the removed worker, at its old token */
       if :: pod_uid[l_tok] != 0 && l_lut == l_tok -> l_held = true; l_huid = pod_uid[l_tok]
          :: else -> skip fi;
#elif defined(SCALE_RECREATE_AT_BASE)
       /* a new lease object at the base token: the old token not carried */
       l_tok = l_base; l_cap = l_base + MAXATT; l_lut = 0; l_rtok = 0; g_unc = 0;
#endif
       l_susp = false; bump() }   /* LeaseStore.resume */
#endif
#ifdef S_EXCUSE
  :: atomic { leader == r && job_uid != 0 && l_inc == job_uid && job_phase[job_uid] == RUNNING &&
       l_ctok == 0 && l_tok > l_base &&
#ifndef EXCUSE_WHILE_HELD
       !l_held &&
#endif
#ifndef EXCUSE_TWICE
       l_lut < l_tok &&   /* the CRD: once per token */
#endif
       j_stok != l_tok &&   /* not one a suspension ended: failure_policy.verdict */
       !cpend && !rpend -> /* an ended attempt was disrupted: LeaseStore.excuse */
       l_cap++; l_lut = l_tok; g_unc++; bump();
       assert(g_unc + l_base <= l_tok) }   /* inv 4: only attempts that ran */
#endif
  /* (One stop request, delivered once: the original's guard outside the
   * atomic let two replicas both take it and the second land it with
   * pending_stop already 0, a request nobody sent.) */
  :: atomic { pending_stop != 0 ->   /* LeaseStore.stop of a deleted incarnation */
       if
#ifndef STOP_BY_NAME
       :: l_inc == pending_stop ->
#else
       :: !l_abs ->   /* (no lease: a 404) */
#endif
            l_held = false; l_huid = 0; l_cap = l_tok; bump()
       :: else -> skip
       fi;
       pending_stop = 0 }
#ifdef S_HANDOVER
  :: atomic { leader == r ->   /* peering hand-over: the other replica counts afresh */
       leader = 1 - r; o_seen_t[1 - r] = UNSEEN; o_stale[1 - r] = true;
       o_seen_t[r] = UNSEEN; o_stale[r] = true }   /* (reset again if it leads again) */
#endif
  :: timeout -> break
  od
}

/* Users and the cluster: delete and recreate the job, replace a pod under
 * its name, pre-create a pod under the next name.
 * Reduction: the User never ends (the original could end at any point, a
 * copy of every later state with the User gone; a User that ends is one
 * that takes no further step, which every state here allows), and n, a
 * temporary, goes back to 0 in the step that used it. */
proctype User() {
  bool recreated = false, replaced = false, foreign = false, suspended = false, scaled = false;
  byte n = 0;
end:
  do
#ifdef S_RECREATE
  :: atomic { job_uid == 1 && !recreated -> job_phase[1] = DELETED; job_uid = 0; pending_stop = 1; job_susp = false }
  :: atomic { job_uid == 0 && !recreated && pending_stop == 0 -> job_uid = 2; recreated = true }
  :: atomic { job_uid == 0 && !recreated -> job_uid = 2; recreated = true }   /* the stop still in flight */
#endif
#ifdef S_SUSPEND
  :: atomic { job_uid != 0 && !suspended -> job_susp = true; suspended = true }   /* spec.suspend: true */
  :: atomic { job_susp -> job_susp = false }                                     /* and false again */
#endif
#ifdef S_SCALE
  /* spec.completions (with spec.parallelism) lowered past the index, once, and raised again */
  :: atomic { job_uid != 0 && !scaled -> scaled_out = true; scaled = true }
  :: atomic { scaled_out -> scaled_out = false }
#endif
#ifdef S_REPLACE
  :: atomic { !replaced && l_tok > 0 && pod_uid[l_tok] != 0 && next_uid < NUID ->   /* kubectl replace --force */
       /* the old pod's object is gone; its process may still run (a node
        * that does not hear of the deletion) or be killed at once */
       n = l_tok;
       if
       :: killed[pod_uid[n]] = true;
          /* a killed pod's window is read by nobody (its own guards need
           * !killed; invariant 8 passes it): closed, and its bookkeeping
           * canonical (wfin) */
          w_dl[pod_uid[n]] = 0; w_tok[pod_uid[n]] = 0; wfin(pod_uid[n])
       :: skip
       fi;
       uid_owner[next_uid] = uid_owner[pod_uid[n]];
       pod_uid[n] = next_uid; replaced = true; w_rnw[next_uid] = true;
       run Worker(next_uid, n); next_uid++; n = 0 }
#endif
#ifdef S_FOREIGN
  /* a pod the operator did not create: it does not renew (w_rnw false), so
   * it has no window and starts no effect; its renewal count and effect
   * flag are set to what wfin would give (never read for it) */
  :: atomic { !foreign && l_tok + 1 < NTOK && pod_uid[l_tok + 1] == 0 && next_uid < NUID ->
       n = l_tok + 1; pod_uid[n] = next_uid; uid_owner[next_uid] = NOBODY; foreign = true;
       w_ren[next_uid] = RENEWS; w_wr[next_uid] = true;
       run Worker(next_uid, n); next_uid++; n = 0 }
#endif
  :: false   /* (no scenario: nothing to do) */
  od
}

/* Reduction: a tick is one atomic step (the original's "now < TMAX ->
 * now++" held the Clock between guard and increment, a state of its own),
 * and the Clock does not end at TMAX (it just has no step left: the
 * original's copy of every state at TMAX, with the Clock ended, is gone).
 * The tick also drops what it made unreadable: closed windows (EXPIRE) and
 * watch times past the expiry bound (SEEN_PAST). */
active proctype Clock() {
end:
  do
  :: atomic { now < TMAX -> now++;
       EXPIRE(1); EXPIRE(2); EXPIRE(3); EXPIRE(4); EXPIRE(5);
       SEEN_PAST(0); SEEN_PAST(1) }
  od
}

init {
  atomic {
    run Operator(0);
#ifdef S_HANDOVER
    run Operator(1);
#endif
    run User()
  }
}
