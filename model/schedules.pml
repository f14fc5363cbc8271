/*
 * A LeasedCronJob's runs, for Spin: one cron job, its runs (each a
 * LeasedJob with its own JobLease), one fencing domain over all of them
 * (each run's token range reserved in the cron job's status and bounded by
 * its lease's spec.ceilingFencingToken), one worker at a time per run, the
 * operator, a fenced target and a discretised clock.
 *
 * A separate model from lifecycle.pml (docs/model.md, "Why a second
 * model"): lifecycle.pml checks one lease's protocol in detail (pods, UIDs,
 * bind, incarnations, replicas); here each run's lease follows the same
 * store rules in the coarser form the runs' interplay needs, so that two
 * or three runs stay exhaustively checkable.
 *
 * Policy (one of): -DS_FORBID, -DS_REPLACE, -DS_ALLOW (default S_FORBID).
 * Scenarios: -DS_EXCUSE (an ended attempt is excused: an eviction, or a
 * Failed completion a rule ignores, reopened uncounted), -DS_SUSPEND (a
 * run's spec.suspend set and cleared), -DS_INDEXED (the first run has
 * several completions: its own lease holds its range and is never claimed,
 * and its two index leases are made by its own reconciles, each inside
 * the range read from the run's lease, each taken over after a read of
 * the run's lease; NR 2).
 * Mutations: -DFAILED_RETRY_FINAL, -DCLOSED_EXCUSE, -DUNTAKEN_FINAL,
 * -DNO_CEILING, -DFORBID_NO_HOLD_WAIT, -DREPLACE_NO_HOLD_WAIT,
 * -DFIRST_INDEX_ONLY, -DNO_RUN_CHECK, -DLIST_BEFORE_CLOSE
 * (model/check.sh expects Spin to catch each).
 *
 * Time as in lifecycle.pml: a worker's deadline is sent + D - WM on a clock
 * that may run slow by E; the operator judges expiry (and waits out a hold)
 * at seen + D + OM on a clock that may run fast by E.
 */

#ifndef D
#define D 4
#endif
#define WM 2
#define OM 1
#define E 1
#ifndef TMAX
#define TMAX 9
#endif
#ifndef RENEWS
#define RENEWS 1   /* renewals per worker */
#endif
#ifndef NR
#define NR 2       /* runs of the cron job (at most 3) */
#endif
#ifndef MAXATT
#define MAXATT 1   /* spec.jobTemplate.spec.maxAttempts */
#endif
#ifndef BACKOFF
#define BACKOFF 1  /* spec.jobTemplate.spec.backoffLimit */
#endif
#define BUDGET (MAXATT + BACKOFF)
#define ROOM 1     /* RUN_UNCOUNTED_ROOM: the range's room for uncounted attempts */
/* The top of the last run's range: no token passes it in the correct model
 * (each claim stays under its lease's cap, under its ceiling, under the
 * range's top). A mutation whose caps pass their ceilings is bounded by it
 * too (the claim's guard), so its tokens do not wrap around a byte. */
#define TOKMAX (NR * (BUDGET + ROOM))

/* Lease slots. Without S_INDEXED slot k is run k's lease. With it (NR 2):
 * slot 0 is the first run's own lease (its range: made with the run,
 * never taken over or claimed), slots 2 and 3 its index leases 0 and 1,
 * slot 1 the second run's lease. */
#ifdef S_INDEXED
#if NR > 2
#error S_INDEXED models two runs
#endif
#define NL 4
#define FIRST 2   /* the slot whose run the user suspends (S_SUSPEND) */
#define RUN(s) ((s) >= 2 -> 0 : (s))
#define IDX(s) ((s) >= 2)
#else
#define NL 3
#define FIRST 0
#define RUN(s) (s)
#define IDX(s) (false)
#endif

#if !defined(S_REPLACE) && !defined(S_ALLOW) && !defined(S_FORBID)
#define S_FORBID
#endif
#if defined(S_FORBID) || defined(S_REPLACE)
#define EXCLUSIVE 1   /* invariant A applies */
#else
#define EXCLUSIVE 0
#endif

#define NONE 0
#define SUCC 1
#define FAIL 2

byte now = 0;

/* The cron job's status: status.reservedFencingToken, and how many runs
 * were started (the next run's index). */
byte c_res = 0;
byte c_next = 0;

/* Each run's JobLease (index: the run). */
byte tk[NL];    /* spec.fencingToken */
byte cp[NL];    /* spec.maxFencingToken */
byte ce[NL];    /* spec.ceilingFencingToken */
bool hd[NL];    /* holderIdentity set */
byte cm[NL];    /* completion: NONE, SUCC, FAIL */
byte fl[NL];    /* spec.failures (reopened Failed completions) */
byte lu[NL];    /* spec.lastUncountedToken, 0: none */
bool sp[NL];    /* spec.suspended */
bool tn[NL];    /* taken over by its run's LeasedJob (spec.jobUID set) */
bool rc[NL];    /* the current token's hold was reclaimed (judged expired) */
/* The operator's watch of each lease (lifecycle.pml's o_seen_t): when it
 * last saw a change. Reduction: the watch sees each write at once (the
 * write sets it: bump). The watch time is read only by guards that let
 * the operator act once now >= seen + D + OM - E (a reclaim, the end of a
 * hold wait): a watch that saw the write later only enables those later,
 * so every run with a later watch is one of these (the same steps, each
 * at a time this model allows too). lifecycle.pml keeps the watch a step
 * of its own: there a hand-over makes a new leader count afresh. */
byte sn[NL];

/* Each run's LeasedJob (index: the run): live (created, not deleted by
 * Replace), and its spec.suspend (S_SUSPEND). */
bool rl[NL];
bool rs[NL];
bool rsd[NL];   /* the user's one suspension of that run was made */

/* Each run's current worker (the pod of its last claim). */
byte wt[NL];    /* its token, 0: no worker */
byte wp[NL];    /* renewal: 0 none in flight, 1 request sent, 2 reply in flight */
byte ws[NL];    /* the renew request's start while in flight */
byte wd[NL];    /* its local deadline (real ticks), 0: no open window */
byte wn[NL];    /* renewals done */
bool we[NL];    /* its effect started */
bool wc[NL];    /* its completion was sent */
byte wo[NL];    /* its completion in flight: NONE, SUCC, FAIL */

/* Ghosts: the first token each run claimed (0: none yet), and (TARGET)
 * the fenced target's bar and the run of the write that set it.
 * Reduction: without TARGET a worker has no effect step: invariant A in
 * time is checked where a window opens (two windows overlap only if one
 * opens while the other is open), which is every state in which an effect
 * could be made while another run's worker believes it holds. */
byte gmin[NL];
byte t_max = 0;
byte t_run = 0;

#ifdef S_INDEXED
/* An index lease's reconciles (IndexedActor): made (mk), the run's lease
 * read for its create (rd, the ceiling read: rv), the run's lease read
 * before its take-over (ck, found closed: rcl). The cron job's last list of
 * the runs' leases (ls: the slots it saw; lsc: it was made after the first
 * run's own lease was closed). */
bool mk[NL];
bool rd[NL];
byte rv[NL];
bool ck[NL];
bool rcl[NL];
bool ls[NL];
bool lsc = false;
#define EX(j) (RUN(j) < c_next && (!IDX(j) || mk[j]))
#else
#define EX(j) ((j) < c_next)
#endif
/* The leases the cron job's policy judges: every lease of an earlier run
 * that exists (S_INDEXED: that its last list saw; FIRST_INDEX_ONLY, the
 * mutation: a run judged by its first index lease alone). */
#if defined(S_INDEXED) && defined(FIRST_INDEX_ONLY)
#define SEEN(j) (ls[j] && (j) != 3)
#elif defined(S_INDEXED)
#define SEEN(j) (ls[j])
#else
#define SEEN(j) EX(j)
#endif


inline bump(k) { sn[k] = now }

/* The store's rule on the cap: token <= cap <= ceiling. An excuse or a
 * suspension raises the cap only below the ceiling (NO_CEILING: there is
 * none; CLOSED_EXCUSE: the raise does not check it). */
#if defined(NO_CEILING)
#define CAP_MAY_RISE(k) (true)
#elif defined(CLOSED_EXCUSE)
/* (the mutation: only the range's top as reserved bounds the raise, not
 * the ceiling a close lowered) */
byte rt[NL];
#define CAP_MAY_RISE(k) (cp[k] + 1 <= rt[k])
#else
#define CAP_MAY_RISE(k) (cp[k] + 1 <= ce[k])
#endif

/* plan.run_is_over: no claim can take the lease again (Succeeded, or
 * closed: the ceiling at the token). */
#if defined(FAILED_RETRY_FINAL)
#define FINAL(k) (cm[k] == SUCC || ce[k] <= tk[k] || cm[k] == FAIL)
#elif defined(UNTAKEN_FINAL)
#define FINAL(k) (cm[k] == SUCC || ce[k] <= tk[k] || !tn[k])
#else
#define FINAL(k) (cm[k] == SUCC || ce[k] <= tk[k])
#endif

/* Reduction: a Succeeded lease never changes again (no reopen, excuse,
 * suspend, close or claim applies to it); of its fields only the token and
 * the floor's max(token, cap, ceiling) = ceiling are read (FINAL, HMO and
 * invariant B read the token, the completion and gmin), so cap, failures,
 * lastUncountedToken and the reclaim mark go to one value each. */
#if defined(NO_CEILING) || defined(CLOSED_EXCUSE) || defined(UNTAKEN_FINAL)
#define SUCC_CANON(k) skip   /* (a cap may pass the ceiling: the floor reads it) */
#else
#define SUCC_CANON(k) if :: cm[k] == SUCC -> cp[k] = ce[k]; fl[k] = 0; lu[k] = 0; rc[k] = false :: else -> skip fi
#endif

/* protocol.hold_may_outlive: the current token was claimed (gmin: the
 * run claimed at least once, and a token changes only by a claim), its
 * hold neither completed nor reclaimed; held, stopped, released by a
 * close, suspended, or reopened (conservative, as the code). */
#define HMO(k) (gmin[k] != 0 && cm[k] == NONE && !rc[k])
#define QUIET(k) (now >= sn[k] + D + OM - E)
#define HOLD_DONE(k) (!HMO(k) || QUIET(k))

/* For every lease j the policy judges, P(j). */
#if NL > 3
#define ALL(P) ((!SEEN(0) || P(0)) && (!SEEN(1) || P(1)) && (!SEEN(2) || P(2)) && (!SEEN(3) || P(3)))
#else
#define ALL(P) ((!SEEN(0) || P(0)) && (!SEEN(1) || P(1)) && (!SEEN(2) || P(2)))
#endif
/* S_INDEXED: the start judges a list made after the first run's own lease
 * was closed (CronActor: close, then list again), so an index lease made
 * after that list reads the close before its take-over; LIST_BEFORE_CLOSE
 * (the mutation): any list. */
#if defined(S_INDEXED) && !defined(LIST_BEFORE_CLOSE)
#define LISTED (lsc)
#else
#define LISTED (true)
#endif

/* Forbid: every earlier run's lease closed (or over) and unheld; and its
 * hold waited out as Replace's (see FORBID_NO_HOLD_WAIT below). */
#define F_DONE(j) (FINAL(j) && !hd[j] && HOLD_DONE(j))
#define F_HELD(j) (FINAL(j) && !hd[j])
#ifdef FORBID_NO_HOLD_WAIT
#define FORBID_READY (LISTED && ALL(F_HELD))
#else
#define FORBID_READY (LISTED && ALL(F_DONE))
#endif
#ifdef REPLACE_NO_HOLD_WAIT
#define REPLACE_READY (LISTED && ALL(F_HELD))
#else
#define REPLACE_READY (LISTED && ALL(F_DONE))
#endif

/* The reserved floor: max(status.reservedFencingToken, every lease's
 * token, cap and ceiling) (plan.reserved_floor). */
#ifdef NO_CEILING
#define NOCEIL 255
#define LTOP(j) (tk[j] > cp[j] -> tk[j] : cp[j])
#else
#define LTOP(j) (ce[j] > cp[j] -> (ce[j] > tk[j] -> ce[j] : tk[j]) : (cp[j] > tk[j] -> cp[j] : tk[j]))
#endif
#define FLOOR0 (EX(0) && LTOP(0) > c_res -> LTOP(0) : c_res)
#define FLOOR1 (EX(1) && LTOP(1) > FLOOR0 -> LTOP(1) : FLOOR0)
#if NL > 3
#define FLOOR2 (EX(2) && LTOP(2) > FLOOR1 -> LTOP(2) : FLOOR1)
#define FLOOR (EX(3) && LTOP(3) > FLOOR2 -> LTOP(3) : FLOOR2)
#else
#define FLOOR (EX(2) && LTOP(2) > FLOOR1 -> LTOP(2) : FLOOR1)
#endif

/* CronActor._reserve and _start_run: the run k's range from base, its
 * lease at token = cap = base (closed until taken over), ceiling at the
 * range's top. */
inline start(k) {
  j = FLOOR;
  c_res = j + BUDGET + ROOM;
  tk[k] = j; cp[k] = j;
#ifdef NO_CEILING
  ce[k] = NOCEIL;
#else
  ce[k] = j + BUDGET + ROOM;
#endif
#ifdef CLOSED_EXCUSE
  rt[k] = j + BUDGET + ROOM;
#endif
  rl[k] = true; sn[k] = now; c_next++; j = 0
}

/* Invariant A at the store: no two runs' leases held at once (two index
 * leases of one run may be). */
#define OH(k, j) (RUN(j) != RUN(k) && hd[j])
#define OW(k, j) (RUN(j) != RUN(k) && wd[j] != 0)
/* Invariant B: a claim's token is above every token of each earlier run's
 * leases (its current token: tokens only rise) and below every token of
 * each later run's (its first). */
#define BELOW(k, j) (RUN(j) >= RUN(k) || gmin[j] == 0 || tk[j] < tk[k])
#define ABOVE(k, j) (RUN(j) <= RUN(k) || gmin[j] == 0 || tk[k] < gmin[j])
#if NL > 3
#define OTHER_HELD(k) (OH(k, 0) || OH(k, 1) || OH(k, 2) || OH(k, 3))
#define OTHER_WINDOW(k) (OW(k, 0) || OW(k, 1) || OW(k, 2) || OW(k, 3))
#define ORDERED(k) (BELOW(k, 0) && BELOW(k, 1) && BELOW(k, 2) && BELOW(k, 3) && ABOVE(k, 0) && ABOVE(k, 1) && ABOVE(k, 2) && ABOVE(k, 3))
#else
#define OTHER_HELD(k) (OH(k, 0) || OH(k, 1) || OH(k, 2))
/* Invariant A in time: no other run's worker believes it holds (an open
 * window: the tick that closes one sets wd to 0). */
#define OTHER_WINDOW(k) (OW(k, 0) || OW(k, 1) || OW(k, 2))
#define ORDERED(k) (BELOW(k, 0) && BELOW(k, 1) && BELOW(k, 2) && ABOVE(k, 0) && ABOVE(k, 1) && ABOVE(k, 2))
#endif

/* Reduction: a worker that can start nothing more (no window open, no
 * renewal in flight or left, or its completion sent) and has no completion
 * in flight is the same as no worker: the slot goes to 0 (its token, and
 * what only its own guards read). A renew request it may still have had
 * in flight would carry a token the lease no longer holds for it (the
 * slot is reused only by the run's next claim, a higher token): refused,
 * as a lost one. */
inline wfree(k) {
  if
  :: wd[k] == 0 && wp[k] == 0 && wo[k] == NONE && (wc[k] || wn[k] >= RENEWS) ->
       wt[k] = 0; ws[k] = 0; wn[k] = 0; we[k] = false; wc[k] = false
  :: else -> skip
  fi
}

/* The operator's steps on run k's lease that are its LeasedJob's (the run's
 * own reconcile: take-over, claim, reopen, excuse, suspend, resume) and the
 * expiry engine's (watch, reclaim). Every step is one atomic statement from
 * the loop's top: the operator's writes are conditioned on the version they
 * read, and a write that lands only on the state it judged is one that
 * judges and writes at once. */
proctype Run(byte k) {
end:
  do
#ifdef S_INDEXED
  /* IndexedActor._create_in_run: read the run's own lease, then create the
   * index lease at its token (the range's base), capped there, with the
   * ceiling read (the range's top, or the base if the run was closed). */
  :: atomic { IDX(k) && rl[RUN(k)] && !mk[k] && !rd[k] -> rd[k] = true; rv[k] = ce[0] }
  :: atomic { IDX(k) && rd[k] && !mk[k] ->
       tk[k] = tk[0]; cp[k] = tk[0]; ce[k] = rv[k]; mk[k] = true; rd[k] = false; rv[k] = 0; bump(k) }
  /* IndexedActor._closed_with_run: before the take-over, read the run's
   * own lease; found closed, close the index lease (NO_RUN_CHECK, the
   * mutation: no read). A reconcile may act on a job read before a
   * Replace deleted it: the take-over and the claim do not wait for the
   * job (the store judges them). */
  :: atomic { IDX(k) && mk[k] && !tn[k] && !ck[k] ->
       ck[k] = true;
#ifndef NO_RUN_CHECK
       rcl[k] = (ce[0] <= tk[0])
#endif
     }
  :: atomic { IDX(k) && mk[k] && !tn[k] && ck[k] ->
       if :: rcl[k] && ce[k] > tk[k] -> cp[k] = tk[k]; ce[k] = tk[k] :: else -> skip fi;
       tn[k] = true; ck[k] = false; rcl[k] = false;
       cp[k] = (tk[k] + BUDGET < ce[k] -> tk[k] + BUDGET : ce[k]);
       bump(k) }
#endif
  :: atomic { !IDX(k) && rl[RUN(k)] && !tn[k] ->   /* LeaseStore.rearm: the run's first reconcile */
       tn[k] = true;
#ifdef UNTAKEN_FINAL
       cp[k] = tk[k] + BUDGET;   /* (the mutation: any cap) */
#else
       cp[k] = (tk[k] + BUDGET < ce[k] -> tk[k] + BUDGET : ce[k]);
#endif
       bump(k) }
  :: atomic { (IDX(k) || rl[RUN(k)]) && tn[k] && !hd[k] && !sp[k] && !rs[RUN(k)] && cm[k] == NONE && tk[k] + 1 <= cp[k] &&
       tk[k] < TOKMAX ->
       /* LeaseStore.claim (push: the operator claims for a pod), and the pod */
       /* one worker per run at a time: the slot's earlier worker can open no
        * window any more (within a run the protocol is lifecycle.pml's) */
       assert(wd[k] == 0 && (wp[k] != 2 || ws[k] + D - WM + E < now));
       tk[k]++; hd[k] = true; rc[k] = false; bump(k);
       /* Reduction: lu is read only as "< tk" (the excuse) and "== tk" (not
        * read); below the new token, 0 is the same. */
       lu[k] = 0;
       assert(!EXCLUSIVE || !OTHER_HELD(k));   /* inv A, at the store */
       assert(ORDERED(k));                     /* inv B */
       if :: gmin[k] == 0 -> gmin[k] = tk[k] :: else -> skip fi;
       /* the new pod in the slot; what the earlier worker still had in
        * flight carries a lower token: refused when it lands, as a lost one */
       wt[k] = tk[k]; wp[k] = 0; ws[k] = 0; wn[k] = 0; we[k] = false; wc[k] = false; wo[k] = NONE }
  :: atomic { RUN(k) < c_next && hd[k] && cm[k] == NONE && now >= sn[k] + D + OM - E ->   /* ExpiryClock.expired, LeaseStore.reclaim */
       hd[k] = false; rc[k] = true; bump(k) }
  :: atomic { rl[RUN(k)] && cm[k] == FAIL && fl[k] < BACKOFF ->   /* LeaseStore.reopen (counted) */
       cm[k] = NONE; fl[k]++; bump(k) }
#ifdef S_EXCUSE
  :: atomic { rl[RUN(k)] && cm[k] == FAIL && lu[k] < tk[k] && CAP_MAY_RISE(k) ->
       /* a Failed completion a rule ignores: reopen uncounted = an excuse in the same write */
       cm[k] = NONE; cp[k]++; lu[k] = tk[k]; bump(k) }
  :: atomic { rl[RUN(k)] && gmin[k] != 0 && !hd[k] && cm[k] == NONE && lu[k] < tk[k] &&
       CAP_MAY_RISE(k) ->   /* an evicted attempt: LeaseStore.excuse */
       cp[k]++; lu[k] = tk[k]; bump(k) }
#endif
#ifdef S_SUSPEND
  :: atomic { rl[RUN(k)] && rs[RUN(k)] && !sp[k] && cm[k] == NONE ->   /* LeaseStore.suspend */
       if
       :: hd[k] && CAP_MAY_RISE(k) -> cp[k]++; lu[k] = tk[k]
       :: hd[k] && !CAP_MAY_RISE(k) -> lu[k] = tk[k]   /* at the ceiling: the attempt counts */
       :: else -> skip
       fi;
       hd[k] = false; sp[k] = true; bump(k) }
  :: atomic { rl[RUN(k)] && !rs[RUN(k)] && sp[k] && HOLD_DONE(k) ->   /* LeaseStore.resume, after the hold wait */
       sp[k] = false; bump(k) }
  /* the user sets the first run's spec.suspend, once (reduction: the one a
   * later run's start depends on; a later run's own suspension and resume
   * are one lease's protocol, lifecycle.pml's S_SUSPEND) */
  :: atomic { k == FIRST && rl[RUN(k)] && !rsd[RUN(k)] -> rs[RUN(k)] = true; rsd[RUN(k)] = true }
  :: atomic { rs[RUN(k)] -> rs[RUN(k)] = false }                            /* and false again */
#endif
  od
}

/* Run k's worker: renew, the guarded effect at the fenced target,
 * complete (Succeeded or Failed), or stall (take no step). */
proctype Worker(byte k) {
end:
  do
  :: atomic { wt[k] != 0 && wp[k] == 0 && wn[k] < RENEWS && !wc[k] -> ws[k] = now; wp[k] = 1 }
  :: atomic { wp[k] == 1 ->   /* the renew lands: LeaseStore.renew, by the holder under its token */
       if
       :: hd[k] && tk[k] == wt[k] -> bump(k); wp[k] = 2
       :: else -> ws[k] = 0; wp[k] = 0; wn[k]++; wfree(k)
       fi }
  :: atomic { wp[k] == 2 ->   /* the reply arrives: a window to sent + D - WM on a slow clock */
       if :: wd[k] = ws[k] + D - WM :: wd[k] = ws[k] + D - WM + E fi;
       if
       :: wd[k] >= now -> assert(!EXCLUSIVE || !OTHER_WINDOW(k))   /* inv A, in time */
       :: else -> wd[k] = 0   /* a reply after its deadline opens no window */
       fi;
       ws[k] = 0; wp[k] = 0; wn[k]++; wfree(k) }
  :: atomic { wp[k] == 2 -> ws[k] = 0; wp[k] = 0; wn[k]++; wfree(k) }   /* the reply is lost */
#ifdef TARGET
  :: atomic { wp[k] == 0 && wd[k] != 0 && !we[k] && !wc[k] ->   /* the effect, in its window */
       we[k] = true;
       if
       :: wt[k] >= t_max ->   /* the target's fence accepts it */
            assert(RUN(k) >= t_run);   /* inv C: never an earlier run's write after a later run's */
            t_max = wt[k]; t_run = RUN(k)
       :: else -> skip
       fi }
#endif
  :: atomic { wp[k] == 0 && wd[k] != 0 && !wc[k] ->   /* complete: the window ends with it */
       wc[k] = true; wd[k] = 0; if :: wo[k] = SUCC :: wo[k] = FAIL fi }
  :: atomic { wo[k] != NONE ->   /* the completion lands: LeaseStore.complete, once */
       if
       :: hd[k] && tk[k] == wt[k] && cm[k] == NONE -> cm[k] = wo[k]; hd[k] = false; bump(k);
            SUCC_CANON(k)
       :: else -> skip
       fi;
       wo[k] = NONE; wfree(k) }
  :: atomic { wo[k] != NONE -> wo[k] = NONE; wfree(k) }   /* lost */
  od
}

/* The cron operator: at each due run, the concurrency policy at the
 * earlier runs' leases, then the reservation and the run. A run is due at
 * any moment (the schedule), the next one only after the last started. */
proctype Cron() {
  byte j = 0;
end:
  do
#ifdef S_INDEXED
  :: atomic { c_next < NR ->   /* list the runs' leases (label selector) */
       ls[0] = EX(0); ls[1] = EX(1); ls[2] = EX(2); ls[3] = EX(3); lsc = (ce[0] <= tk[0]) }
#endif
#ifdef S_FORBID
  :: atomic { c_next < NR && c_next > 0 ->   /* CronActor._close_earlier: LeaseStore.close */
       select(j : 0 .. NL - 1);
       if
       :: SEEN(j) && !FINAL(j) -> cp[j] = tk[j]; ce[j] = tk[j]; bump(j)
       :: else -> skip
       fi;
       j = 0 }
  :: atomic { c_next < NR && FORBID_READY -> start(c_next) }
#endif
#ifdef S_REPLACE
  :: atomic { c_next < NR && c_next > 0 ->   /* CronActor._replace_earlier: LeaseStore.close(release) */
       select(j : 0 .. NL - 1);
       if
       :: SEEN(j) && !(FINAL(j) && !hd[j]) -> cp[j] = tk[j]; ce[j] = tk[j]; hd[j] = false; bump(j); rl[RUN(j)] = false
       :: else -> skip
       fi;
       j = 0 }
  :: atomic { c_next < NR && REPLACE_READY -> start(c_next) }
#endif
#ifdef S_ALLOW
  :: atomic { c_next < NR -> start(c_next) }
#endif
  od
}

/* Reduction: a tick closes the windows it ends (wd < now: the worker's own
 * guards and invariant A read an open window only) and drops watch times
 * past the expiry bound (lifecycle.pml's SEEN_PAST). */
#define EXPIRE(k) if :: wd[k] != 0 && wd[k] < now -> wd[k] = 0; wfree(k) :: else -> skip fi
#define SEEN_PAST(k) if :: now >= sn[k] + D + OM - E -> sn[k] = 0 :: else -> skip fi

active proctype Clock() {
end:
  do
  :: atomic { now < TMAX -> now++;
       EXPIRE(0); EXPIRE(1); EXPIRE(2);
       SEEN_PAST(0); SEEN_PAST(1); SEEN_PAST(2);
#if NL > 3
       EXPIRE(3); SEEN_PAST(3);
#endif
       skip }
  od
}

init {
  byte j;
  atomic {
    /* The first run starts at time 0 (nothing happens before it). */
    start(0);
    run Cron();
#ifdef S_INDEXED
    run Run(2); run Worker(2);   /* the first run's index leases */
    run Run(3); run Worker(3);
#else
    run Run(0); run Worker(0);
#endif
    run Run(1); run Worker(1);
#if NR > 2
    run Run(2); run Worker(2);
#endif
  }
}
