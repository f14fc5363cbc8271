// Command leasehold-porcupine judges a chaos history (testing/chaos) with the
// porcupine linearizability checker, independently of the project's own
// checker (testing/chaos/checker.py).
//
// The history is the chaos run's JSON-lines file. Each lease and each fenced
// target key is one partition, modelled as a compare-and-swap register:
//
//   - a lease record (token, holder, completion): the lease watch's states
//     ("observed", in the store's order), pull claims, and the workers'
//     completions, accepted or refused, are CAS operations on it;
//
//   - a target key (the highest token it accepted): the workers' fenced
//     writes, accepted or refused as stale, are CAS operations on it.
//
//   - a LeasedCronJob (its runs, ordered by schedule time: a run's lease is
//     labelled with its cron job, "cron" in the records, and its job is
//     <cron>-<unix minutes>): the watch's states of its run leases, in the
//     store's order, and every token a run's worker was granted (its writes,
//     completions, pull claims). Two invariants: with Forbid or Replace, no two
//     runs' leases are held at once (a run of several completions holds its
//     index leases together: each is a run lease of the same run); every token of a later run is above every
//     token of an earlier run. With Replace, also: no write of a run is
//     accepted whose lease check began ("check_raw") after a later run's claim
//     was seen by the watch.
//
// Operations whose answer was lost ("write-unknown", "complete-unknown") may
// or may not have taken effect (a nondeterministic step, no return time).
// Calls and returns are the records' "call" and "t" fields: monotonic
// seconds of one machine (the raw clock, so processes under libfaketime agree).
//
// Usage: leasehold-porcupine [-html FILE] [-timeout 60s] HISTORY.jsonl
// Prints one JSON verdict on stdout; exit 0 linearizable, 1 not, 2 unknown
// (timeout) or bad input. With -html, a visualisation of the failing
// partitions is written to FILE when the history is not linearizable.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// record is one line of the history; only the fields this checker reads.
type record struct {
	Kind       string      `json:"kind"`
	T          float64     `json:"t"`
	Call       *float64    `json:"call"`
	CheckRaw   *float64    `json:"check_raw"`
	Lease      string      `json:"lease"`
	Cron       *string     `json:"cron"`
	JobName    string      `json:"job_name"`
	Policy     string      `json:"policy"`
	Base       *int64      `json:"base"`
	Job        string      `json:"job"`
	Key        string      `json:"key"`
	Holder     *string     `json:"holder"`
	Token      int64       `json:"token"`
	Ok         *bool       `json:"ok"`
	Reason     string      `json:"reason"`
	Completion *completion `json:"completion"`
}

type completion struct {
	Token   int64  `json:"token"`
	Holder  string `json:"holder"`
	Outcome string `json:"outcome"`
}

// kind of operation.
const (
	opObserved = "observed" // the store held this state (watch order: Seq)
	opClaim    = "claim"    // a pull claim was granted (Token, Holder)
	opComplete = "complete" // a completion (Token, Holder) and its answer
	opWrite    = "write"    // a fenced write to a target key under Token
	opRun      = "run"      // a cron job: the store held this state of a run's lease (Seq)
	opUse      = "use"      // a cron job: a run's worker used a token (and, Check, its lease)
	resOk      = "ok"       // accepted
	resRefused = "refused"  // refused for a reason the register decides
	resFree    = "unjudged" // refused for a reason outside the register
	resUnknown = "unknown"  // the answer was lost
)

// input of one operation. State fields name the observed state.
type input struct {
	Part   string
	Op     string
	Seq    int
	Token  int64
	Holder string
	Done   *completion
	// a cron job's operations
	Run     int64  // the run's schedule time (unix minutes)
	Held    bool   // opRun: the run's lease is held in this state
	Lease   string // opRun: which lease of the run (its own, or an index lease of a run of several completions)
	Granted bool   // opRun: Token was granted (held, completed or above the lease's base)
	Check   bool   // opUse: an accepted write whose lease check must precede later runs' claims
	Policy  string // the cron job's concurrencyPolicy
}

// cronState: a cron job's runs. Maps are never changed in place (porcupine
// keeps earlier states); the model compares states with reflect.DeepEqual.
type cronState struct {
	Seq     int              // run-lease states linearized so far
	Held    map[string]int64 // the run leases held now, each with its run
	Claimed int64            // the latest run ever seen held (0: none)
	Low     map[int64]int64  // per run: its lowest granted token
	High    map[int64]int64  // per run: its highest granted token
}

func exclusive(policy string) bool { return policy == "Forbid" || policy == "Replace" }

func copyMap[V any](m map[int64]V) map[int64]V {
	n := make(map[int64]V, len(m)+1)
	for k, v := range m {
		n[k] = v
	}
	return n
}

// grant: run r used token t; every earlier run's tokens must be below t and
// every later run's above it.
func grant(s cronState, r, t int64) (bool, cronState) {
	for q, high := range s.High {
		if (q < r && high >= t) || (q > r && s.Low[q] <= t) {
			return false, s
		}
	}
	if low, ok := s.Low[r]; ok && low <= t && t <= s.High[r] {
		return true, s
	}
	n := s
	n.Low, n.High = copyMap(s.Low), copyMap(s.High)
	if low, ok := n.Low[r]; !ok || t < low {
		n.Low[r] = t
	}
	if high, ok := n.High[r]; !ok || t > high {
		n.High[r] = t
	}
	return true, n
}

func cronStep(s cronState, in input) (bool, cronState) {
	switch in.Op {
	case opRun:
		if in.Seq != s.Seq+1 {
			return false, s
		}
		n := s
		n.Seq = in.Seq
		if _, was := n.Held[in.Lease]; in.Held != was {
			held := make(map[string]int64, len(s.Held)+1)
			for lease, run := range s.Held {
				held[lease] = run
			}
			if in.Held {
				for _, run := range held {
					if exclusive(in.Policy) && run != in.Run {
						return false, s // two runs of a Forbid or Replace cron job hold at once
					}
				}
				held[in.Lease] = in.Run // (a run's index leases may hold together)
			} else {
				delete(held, in.Lease)
			}
			n.Held = held
		}
		if in.Held && in.Run > n.Claimed {
			n.Claimed = in.Run
		}
		if in.Granted {
			return grant(n, in.Run, in.Token)
		}
		return true, n
	case opUse:
		if in.Check && s.Claimed > in.Run {
			return false, s // a lease check after a later run's claim, then an accepted write
		}
		return grant(s, in.Run, in.Token)
	}
	return false, s
}

// state of a partition: a lease record or (High only) a target key.
type state struct {
	Seq         int    // observed states linearized so far
	Token       int64  // the lease's fencing token
	Holder      string // "" when unheld
	TokenHolder string // who held Token ("" if not known)
	DoneToken   int64
	DoneHolder  string
	DoneOutcome string // "" while not completed
	High        int64  // a target key's highest accepted token
}

func (s state) done() bool { return s.DoneOutcome != "" }

// observe: may the store go from s to the observed state in? The rules of
// the lease record: a token never goes back; one holder per token; a
// Succeeded completion never changes; only a Failed one may be reopened.
func observe(s state, in input) (bool, state) {
	if in.Seq != s.Seq+1 || in.Token < s.Token {
		return false, s
	}
	if s.done() {
		same := in.Done != nil && in.Done.Token == s.DoneToken && in.Done.Holder == s.DoneHolder && in.Done.Outcome == s.DoneOutcome
		if !same && !(s.DoneOutcome == "Failed" && in.Done == nil) {
			return false, s
		}
	}
	n := s
	n.Seq = in.Seq
	if in.Token > s.Token {
		n.TokenHolder = ""
	}
	n.Token, n.Holder = in.Token, in.Holder
	if in.Holder != "" {
		if n.TokenHolder != "" && n.TokenHolder != in.Holder {
			return false, s // two holders under one token
		}
		n.TokenHolder = in.Holder
	}
	n.DoneToken, n.DoneHolder, n.DoneOutcome = 0, "", ""
	if in.Done != nil {
		if in.Done.Token != in.Token || (n.TokenHolder != "" && in.Done.Holder != n.TokenHolder) {
			return false, s // a completion not under the lease's token and holder
		}
		n.TokenHolder = in.Done.Holder
		n.DoneToken, n.DoneHolder, n.DoneOutcome = in.Done.Token, in.Done.Holder, in.Done.Outcome
	}
	return true, n
}

// complete applies an accepted completion; ok false when the CAS must fail.
// A completion whose claim the register has not seen yet (token above the
// register's) is the claim and the completion together.
func complete(s state, in input) (bool, state) {
	if s.done() {
		// A retried completion whose first reply was lost is reported accepted.
		return s.DoneToken == in.Token && s.DoneHolder == in.Holder, s
	}
	if in.Token < s.Token || (in.Token == s.Token && s.Holder != in.Holder) {
		return false, s
	}
	n := s
	n.Token, n.Holder, n.TokenHolder = in.Token, "", in.Holder
	n.DoneToken, n.DoneHolder, n.DoneOutcome = in.Token, in.Holder, "Succeeded"
	return true, n
}

// claim: a granted pull claim, possibly seen by the watch already.
func claim(s state, in input) (bool, state) {
	if in.Token == s.Token && s.TokenHolder == in.Holder && !s.done() {
		return true, s
	}
	if in.Token <= s.Token || s.done() {
		return false, s
	}
	n := s
	n.Token, n.Holder, n.TokenHolder = in.Token, in.Holder, in.Holder
	return true, n
}

// write: a fenced write to a target key; equal tokens pass the fence.
func write(s state, in input) (bool, state) {
	if in.Token < s.High {
		return false, s
	}
	n := s
	n.High = in.Token
	return true, n
}

func step(st interface{}, inp interface{}, out interface{}) []interface{} {
	in := inp.(input)
	if in.Op == opRun || in.Op == opUse {
		cs, _ := st.(cronState) // the partition's initial state is a state{}
		if ok, n := cronStep(cs, in); ok {
			return []interface{}{n}
		}
		return nil
	}
	s, res := st.(state), out.(string)
	var apply func(state, input) (bool, state)
	switch in.Op {
	case opObserved:
		if ok, n := observe(s, in); ok {
			return []interface{}{n}
		}
		return nil
	case opClaim:
		apply = claim
	case opComplete:
		apply = complete
	case opWrite:
		apply = write
	}
	ok, n := apply(s, in)
	switch res {
	case resOk:
		if ok {
			return []interface{}{n}
		}
		return nil
	case resRefused:
		if ok {
			// The CAS would have succeeded (or, for a completion already
			// recorded for this holder and token, is reported accepted).
			return nil
		}
		return []interface{}{s}
	case resUnknown:
		if ok {
			return []interface{}{s, n}
		}
		return []interface{}{s}
	default: // resFree
		return []interface{}{s}
	}
}

var model = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		parts := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			key := op.Input.(input).Part
			if _, seen := parts[key]; !seen {
				keys = append(keys, key)
			}
			parts[key] = append(parts[key], op)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, parts[k])
		}
		return out
	},
	Init: func() []interface{} { return []interface{}{state{}} },
	Step: step,
	Equal: func(a, b interface{}) bool {
		if sa, ok := a.(state); ok {
			sb, ok := b.(state)
			return ok && sa == sb
		}
		return reflect.DeepEqual(a, b)
	},
	DescribeOperation: func(inp interface{}, out interface{}) string {
		in := inp.(input)
		switch in.Op {
		case opObserved:
			done := ""
			if in.Done != nil {
				done = fmt.Sprintf(" done=%d/%s/%s", in.Done.Token, in.Done.Holder, in.Done.Outcome)
			}
			return fmt.Sprintf("observed#%d token=%d holder=%q%s", in.Seq, in.Token, in.Holder, done)
		case opWrite:
			return fmt.Sprintf("write(%d) -> %s", in.Token, out)
		case opRun:
			return fmt.Sprintf("run#%d %d %s held=%v token=%d granted=%v", in.Seq, in.Run, in.Lease, in.Held, in.Token, in.Granted)
		case opUse:
			return fmt.Sprintf("use %d token=%d check=%v", in.Run, in.Token, in.Check)
		}
		return fmt.Sprintf("%s(%d, %s) -> %s", in.Op, in.Token, in.Holder, out)
	},
	DescribeState: func(st interface{}) string {
		if cs, ok := st.(cronState); ok {
			return fmt.Sprintf("#%d held=%v claimed=%d low=%v high=%v", cs.Seq, cs.Held, cs.Claimed, cs.Low, cs.High)
		}
		s := st.(state)
		if s.Seq == 0 && s.Token == 0 && s.High != 0 {
			return fmt.Sprintf("highest=%d", s.High)
		}
		done := ""
		if s.done() {
			done = fmt.Sprintf(" done=%d/%s/%s", s.DoneToken, s.DoneHolder, s.DoneOutcome)
		}
		return fmt.Sprintf("#%d token=%d holder=%q%s highest=%d", s.Seq, s.Token, s.Holder, done, s.High)
	},
}

// verdict is what the command prints.
type verdict struct {
	Result     string         `json:"result"` // Ok, Illegal or Unknown
	Operations map[string]int `json:"operations"`
	Partitions int            `json:"partitions"`
	Illegal    []string       `json:"illegal"`
	Unknown    []string       `json:"unknown"`
	HTML       string         `json:"html,omitempty"`
}

// refusedByRegister: the refusals a CAS register decides (the others, such
// as NotBound or a duplicate effect key, are outside this model).
var refusedByRegister = map[string]bool{
	"": true, "StaleToken": true, "NotHolder": true, "Completed": true,
}

func nanos(seconds float64) int64 { return int64(math.Round(seconds * 1e9)) }

// operations turns history records into porcupine operations.
func operations(records []record) []porcupine.Operation {
	var ops []porcupine.Operation
	clients := map[string]int{"watch": 0}
	client := func(name string) int {
		if id, ok := clients[name]; ok {
			return id
		}
		clients[name] = len(clients)
		return clients[name]
	}
	first, last := math.Inf(1), math.Inf(-1)
	for _, r := range records {
		if r.T != 0 {
			first, last = math.Min(first, r.T), math.Max(last, r.T)
		}
	}
	if math.IsInf(first, 1) {
		first, last = 0, 0
	}
	begin, never := nanos(first)-1, nanos(last)+1_000_000_000
	seq := map[string]int{}
	prev := map[string]string{}
	// A cron job's runs: which lease is which run, from the watch's records.
	policy := map[string]string{}
	type runOf struct {
		cron string
		run  int64
	}
	runs := map[string]runOf{}
	for _, r := range records {
		switch {
		case r.Kind == "cron-created":
			policy[*r.Cron] = r.Policy
		case r.Kind == "observed" && r.Cron != nil && *r.Cron != "":
			if minute, ok := scheduleMinute(*r.Cron, r.JobName); ok {
				runs[r.Lease] = runOf{*r.Cron, minute}
			}
		}
	}
	callOf := func(r record) int64 {
		if r.Call == nil {
			return begin
		}
		return nanos(*r.Call)
	}
	for _, r := range records {
		holder := ""
		if r.Holder != nil {
			holder = *r.Holder
		}
		switch r.Kind {
		case "observed":
			part := "lease " + r.Lease
			key := fmt.Sprintf("%d|%s|%+v", r.Token, holder, r.Completion)
			if prev[part] == key {
				continue // a renewal: the same (token, holder, completion)
			}
			prev[part] = key
			seq[part]++
			ops = append(ops, porcupine.Operation{
				ClientId: client("watch"),
				Input:    input{Part: part, Op: opObserved, Seq: seq[part], Token: r.Token, Holder: holder, Done: r.Completion},
				Call:     begin, Output: resOk, Return: nanos(r.T),
			})
			if run, ok := runs[r.Lease]; ok {
				cpart := "cron " + run.cron
				granted := holder != "" || r.Completion != nil || (r.Base != nil && r.Token > *r.Base)
				ckey := fmt.Sprintf("%v|%d|%v", holder != "", r.Token, granted)
				if prev[cpart+" "+r.Lease] != ckey {
					prev[cpart+" "+r.Lease] = ckey
					seq[cpart]++
					ops = append(ops, porcupine.Operation{
						ClientId: client("watch"),
						Input: input{Part: cpart, Op: opRun, Seq: seq[cpart], Run: run.run, Lease: r.Lease, Held: holder != "",
							Token: r.Token, Granted: granted, Policy: policy[run.cron]},
						Call: begin, Output: resOk, Return: nanos(r.T),
					})
				}
			}
		case "pull-claim":
			ops = append(ops, porcupine.Operation{
				ClientId: client(holder),
				Input:    input{Part: "lease " + r.Lease, Op: opClaim, Token: r.Token, Holder: holder},
				Call:     callOf(r), Output: resOk, Return: nanos(r.T),
			})
			if run, ok := runs[r.Lease]; ok {
				ops = append(ops, porcupine.Operation{
					ClientId: client(holder),
					Input:    input{Part: "cron " + run.cron, Op: opUse, Run: run.run, Token: r.Token},
					Call:     callOf(r), Output: resOk, Return: nanos(r.T),
				})
			}
		case "complete", "complete-unknown", "write", "write-unknown":
			in := input{Part: "lease " + r.Job, Op: opComplete, Token: r.Token, Holder: holder}
			if r.Kind == "write" || r.Kind == "write-unknown" {
				in = input{Part: "target " + r.Key, Op: opWrite, Token: r.Token, Holder: holder}
			}
			out, ret := resOk, nanos(r.T)
			switch {
			case r.Kind == "complete-unknown" || r.Kind == "write-unknown":
				out, ret = resUnknown, never
			case r.Ok == nil || !*r.Ok:
				out = resFree
				if refusedByRegister[r.Reason] {
					out = resRefused
				}
			}
			ops = append(ops, porcupine.Operation{
				ClientId: client(holder), Input: in, Call: callOf(r), Output: out, Return: ret,
			})
			if run, ok := runs[r.Job]; ok {
				// The worker held this token of the run's; an accepted write of a
				// Replace cron job's run also says its lease check passed at or
				// after check_raw.
				use := input{Part: "cron " + run.cron, Op: opUse, Run: run.run, Token: r.Token}
				call := callOf(r)
				if r.Kind == "write" && r.Ok != nil && *r.Ok && r.CheckRaw != nil && policy[run.cron] == "Replace" {
					use.Check, call = true, nanos(*r.CheckRaw)
				}
				ops = append(ops, porcupine.Operation{
					ClientId: client(holder), Input: use, Call: call, Output: resOk, Return: ret,
				})
			}
		}
	}
	return ops
}

// scheduleMinute: a run's schedule time from its job's name, <cron>-<unix minutes>.
func scheduleMinute(cron, job string) (int64, bool) {
	if !strings.HasPrefix(job, cron+"-") {
		return 0, false
	}
	minute, err := strconv.ParseInt(job[len(cron)+1:], 10, 64)
	return minute, err == nil
}

func readHistory(path string) ([]record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var records []record
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 1<<20), 1<<24)
	line := 0
	for scanner.Scan() {
		line++
		if len(scanner.Bytes()) == 0 {
			continue
		}
		var r record
		if err := json.Unmarshal(scanner.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		records = append(records, r)
	}
	return records, scanner.Err()
}

func main() {
	html := flag.String("html", "", "write porcupine's visualisation of the failing partitions here")
	timeout := flag.Duration("timeout", 60*time.Second, "time limit per partition")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: leasehold-porcupine [-html FILE] [-timeout 60s] HISTORY.jsonl")
		os.Exit(2)
	}
	records, err := readHistory(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ops := operations(records)
	m := model.ToModel()
	v := verdict{Result: "Ok", Operations: map[string]int{}, Illegal: []string{}, Unknown: []string{}}
	var failing []porcupine.Operation
	for _, part := range m.Partition(ops) {
		v.Partitions++
		for _, op := range part {
			v.Operations[op.Input.(input).Op+" "+op.Output.(string)]++
		}
		name := part[0].Input.(input).Part
		switch porcupine.CheckOperationsTimeout(m, part, *timeout) {
		case porcupine.Illegal:
			v.Illegal = append(v.Illegal, name)
			failing = append(failing, part...)
		case porcupine.Unknown:
			v.Unknown = append(v.Unknown, name)
		}
	}
	code := 0
	switch {
	case len(v.Illegal) > 0:
		v.Result, code = "Illegal", 1
	case len(v.Unknown) > 0:
		v.Result, code = "Unknown", 2
	}
	if len(failing) > 0 && *html != "" {
		_, info := porcupine.CheckOperationsVerbose(m, failing, *timeout)
		if err := porcupine.VisualizePath(m, info, *html); err != nil {
			fmt.Fprintln(os.Stderr, "visualisation:", err)
		} else {
			v.HTML = *html
		}
	}
	out, _ := json.Marshal(v)
	fmt.Println(string(out))
	os.Exit(code)
}
