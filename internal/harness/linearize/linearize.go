// Package linearize records histories of single-row reads and writes and
// checks them with porcupine: each key is a register, an operation's call
// and return times bound where it may take effect, and a write that
// failed may or may not have happened. Tests inject faults (a move's flip,
// a primary killed, a switchover) while clients record, then Check.
//
//	h := linearize.New()
//	c := h.Call(linearize.Input{Kind: linearize.Read, Key: k}, linearize.Meta{Client: 1, Server: "b"})
//	v, err := read()
//	c.Return(linearize.Output{Value: v}, err)
//	…
//	for _, v := range h.Check(t) { t.Error(v) }
//
// A violation's message is the smallest window that shows it: the first
// operation that cannot be placed and the operations on its key around
// it, each with its client, server and map versions, after the faults
// the test noted. Porcupine's HTML visualization of the history is
// written to a temporary file, named in the message, that outlives the
// test.
package linearize

import (
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Kind is an operation on a register.
type Kind int

// The operations on a register.
const (
	Read  Kind = iota // the value
	Write             // set the value to Arg
	CAS               // set the value to Arg if it is Old
)

// Input is an operation's call.
type Input struct {
	Kind     Kind
	Key      int
	Arg, Old int // Write: Arg; CAS: Old → Arg
}

// Output is an operation's result.
type Output struct {
	Value   int  // Read: the value read
	OK      bool // CAS: applied
	Unknown bool // a Write or CAS that failed: it may or may not have taken effect
}

// Meta is where an operation went, for the report of a violation.
type Meta struct {
	Client        int
	Server        string // where the client's map placed the key at the call
	Before, After int64  // the client's map version at the call and at the return
	Shard         int
	Err           string // the error of an unknown outcome, or a note
	Final         bool   // the operator's read of the final state
}

// Never is the return time of an operation whose outcome is unknown: it
// may take effect at any time after its call.
const Never = math.MaxInt64

// Model is a linearizable register per key, initially 0; an unknown
// outcome may or may not have been applied.
var Model = porcupine.NondeterministicModel{
	Partition: partition,
	Init:      func() []any { return []any{0} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(int), input.(Input), output.(Output)
		switch in.Kind {
		case Read:
			if out.Value == s {
				return []any{s}
			}
			return nil
		case Write:
			if out.Unknown {
				return []any{s, in.Arg}
			}
			return []any{in.Arg}
		default:
			switch {
			case out.Unknown && s == in.Old:
				return []any{s, in.Arg}
			case out.Unknown:
				return []any{s}
			case out.OK && s == in.Old:
				return []any{in.Arg}
			case !out.OK && s != in.Old:
				return []any{s}
			}
			return nil
		}
	},
	DescribeOperation: describe,
	DescribeState:     func(state any) string { return fmt.Sprint(state) },
	DescribeOperationMetadata: func(info any) string {
		if m, ok := info.(Meta); ok {
			return fmt.Sprintf("client %d, server %s, map v%d→v%d, shard %d %s", m.Client, m.Server, m.Before, m.After, m.Shard, m.Err)
		}
		return ""
	},
}

func partition(history []porcupine.Operation) [][]porcupine.Operation {
	by := map[int][]porcupine.Operation{}
	for _, op := range history {
		k := op.Input.(Input).Key
		by[k] = append(by[k], op)
	}
	keys := make([]int, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	out := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		out = append(out, by[k])
	}
	return out
}

func describe(input, output any) string {
	in, out := input.(Input), output.(Output)
	switch {
	case in.Kind == Read:
		return fmt.Sprintf("read(k%d) → %d", in.Key, out.Value)
	case in.Kind == Write && out.Unknown:
		return fmt.Sprintf("write(k%d, %d) → unknown", in.Key, in.Arg)
	case in.Kind == Write:
		return fmt.Sprintf("write(k%d, %d) → ok", in.Key, in.Arg)
	case out.Unknown:
		return fmt.Sprintf("cas(k%d, %d→%d) → unknown", in.Key, in.Old, in.Arg)
	}
	return fmt.Sprintf("cas(k%d, %d→%d) → %v", in.Key, in.Old, in.Arg, out.OK)
}

// History is a recorded history, safe for concurrent clients.
type History struct {
	start time.Time

	mu     sync.Mutex
	ops    []porcupine.Operation
	events []event
	next   int
	last   map[int]int
}

// event is a fault the test injected, for a violation's report.
type event struct {
	at   int64
	what string
}

// New starts a history; its clock starts now.
func New() *History {
	return &History{start: time.Now(), last: map[int]int{}}
}

// Now is the history's clock.
func (h *History) Now() int64 { return int64(time.Since(h.start)) }

// Value returns a value no write of the history used before: values
// written are unique, so a read says which write it saw.
func (h *History) Value() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.next++
	return h.next
}

// Last is the value the latest successful read of key returned (0 if
// none), a likely old value for a compare-and-set.
func (h *History) Last(key int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last[key]
}

// Note records a fault or change of topology at the current time.
func (h *History) Note(format string, args ...any) {
	at := h.Now()
	h.mu.Lock()
	h.events = append(h.events, event{at: at, what: fmt.Sprintf(format, args...)})
	h.mu.Unlock()
}

// Pending is an operation called and not yet returned.
type Pending struct {
	h    *History
	in   Input
	call int64
	// Meta is recorded with the operation; set its After (and anything
	// learnt during the call) before Return.
	Meta Meta
}

// Call records an operation's call at the current time.
func (h *History) Call(in Input, meta Meta) *Pending {
	return &Pending{h: h, in: in, Meta: meta, call: h.Now()}
}

// Return records the operation's return at the current time. A read that
// failed is dropped (it had no effect); a write or compare-and-set that
// failed is recorded as unknown, taking effect at any time after its
// call or never, whatever out says.
func (p *Pending) Return(out Output, err error) {
	ret := p.h.Now()
	if err != nil {
		if p.in.Kind == Read {
			return
		}
		out = Output{Unknown: true}
		ret = Never
		p.Meta.Err = err.Error()
	}
	p.h.mu.Lock()
	defer p.h.mu.Unlock()
	if p.in.Kind == Read {
		p.h.last[p.in.Key] = out.Value
	}
	p.h.ops = append(p.h.ops, porcupine.Operation{ClientId: p.Meta.Client, Input: p.in, Call: p.call, Output: out, Return: ret, Metadata: p.Meta})
}

// Discard forgets the operation: a write the caller knows had no effect
// (refused before anything was sent to a server), which as an unknown
// outcome would only widen the checker's search. The caller checks its
// claim (Seen: no read may return the value it would have written).
func (p *Pending) Discard() {}

// Final records the operator's read of key's final state, made after
// every client stopped: every acknowledged write must be part of it.
// client is a ClientId no client of the history uses.
func (h *History) Final(client, key, value int, meta Meta) {
	meta.Final, meta.Client = true, client
	call := h.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: Input{Kind: Read, Key: key}, Call: call, Output: Output{Value: value}, Return: h.Now(), Metadata: meta})
}

// Seen reports the values successful reads returned, the final state's
// included: a value written by a call that failed says it took effect.
func (h *History) Seen() map[int]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[int]bool{}
	for _, op := range h.ops {
		if op.Input.(Input).Kind == Read {
			seen[op.Output.(Output).Value] = true
		}
	}
	return seen
}

// Len is the number of operations recorded.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops)
}

// Stats counts the history's operations and its unknown outcomes.
func (h *History) Stats() (ops, unknown int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, op := range h.ops {
		if op.Output.(Output).Unknown {
			unknown++
		}
	}
	return len(h.ops), unknown
}

// Count counts the successful operations of the history for which keep
// holds.
func (h *History) Count(keep func(in Input, m Meta) bool) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, op := range h.ops {
		if !op.Output.(Output).Unknown && keep(op.Input.(Input), op.Metadata.(Meta)) {
			n++
		}
	}
	return n
}

// Check checks each key's history with porcupine and returns, for each
// key that is not linearizable, its smallest failing window, preceded by
// the faults noted and followed by the path of the HTML visualization.
// A key whose check times out fails the test.
func (h *History) Check(t testing.TB) []string {
	t.Helper()
	h.mu.Lock()
	ops := append([]porcupine.Operation(nil), h.ops...)
	events := append([]event(nil), h.events...)
	h.mu.Unlock()
	model := Model.ToModel()
	var out []string
	var bad []porcupine.Operation // the operations of the keys that fail
	for _, part := range model.Partition(ops) {
		r := porcupine.CheckOperationsTimeout(model, part, checkBudget)
		if r == porcupine.Unknown {
			t.Errorf("key %d: the check timed out after %v (%d operations)", part[0].Input.(Input).Key, checkBudget, len(part))
			continue
		}
		if r == porcupine.Ok {
			continue
		}
		out = append(out, SmallestWindow(model, part))
		bad = append(bad, part...)
	}
	if len(out) == 0 {
		return nil
	}
	var b strings.Builder
	for _, e := range events {
		fmt.Fprintf(&b, "%v  %s\n", time.Duration(e.at).Round(time.Millisecond), e.what)
	}
	faults := b.String()
	path := visualize(model, bad, events)
	for i := range out {
		out[i] = faults + out[i] + path
	}
	return out
}

// checkBudget bounds the check of one key's history. A linearizable
// history of the tests' size checks in well under a second; an illegal
// one makes porcupine try every order of its unknown outcomes, which the
// budget cuts short (a key whose check times out fails the test too).
const checkBudget = 20 * time.Second

// visualize writes porcupine's visualization of the history to a
// temporary file that outlives the test and returns a line naming it.
func visualize(model porcupine.Model, ops []porcupine.Operation, events []event) string {
	_, info := porcupine.CheckOperationsVerbose(model, ops, checkBudget)
	var notes []porcupine.Annotation
	for _, e := range events {
		notes = append(notes, porcupine.Annotation{Tag: "faults", Start: e.at, Description: e.what})
	}
	info.AddAnnotations(notes)
	f, err := os.CreateTemp("", "shardkit-linearize-*.html")
	if err != nil {
		return fmt.Sprintf("(no visualization: %v)\n", err)
	}
	defer f.Close()
	if err := porcupine.Visualize(model, info, f); err != nil {
		return fmt.Sprintf("(no visualization: %v)\n", err)
	}
	return fmt.Sprintf("porcupine's visualization of the history: %s\n", f.Name())
}

// SmallestWindow finds the earliest operation whose call makes the key's
// history (the operations called up to it) non-linearizable, and prints
// it with the operations on the key around it: who read what, from which
// server, at which map version.
func SmallestWindow(model porcupine.Model, part []porcupine.Operation) string {
	part = append([]porcupine.Operation(nil), part...)
	sort.Slice(part, func(i, j int) bool { return part[i].Call < part[j].Call })
	lo, hi := 1, len(part) // the prefix of length hi is illegal
	for lo < hi {
		mid := (lo + hi) / 2
		if porcupine.CheckOperationsTimeout(model, part[:mid], 5*time.Second) == porcupine.Illegal {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	bad := part[hi-1]
	var b strings.Builder
	fmt.Fprintf(&b, "key %d is not linearizable; the first operation that cannot be placed:\n", bad.Input.(Input).Key)
	// The last operations called before the failing one, those that
	// overlap it or returned in the 30 ms before its call, and the
	// unknown outcomes called in the second before it: at most the last
	// 20 of them.
	from := bad.Call - int64(30*time.Millisecond)
	var window []porcupine.Operation
	for i, op := range part[:hi] {
		switch {
		case i >= hi-10,
			op.Return != Never && op.Return >= from,
			op.Return == Never && op.Call >= bad.Call-int64(time.Second):
			window = append(window, op)
		}
	}
	if bad.Metadata.(Meta).Final {
		// The final state: the last writes acknowledged before it.
		window = window[:0]
		for _, op := range part[:hi] {
			if in := op.Input.(Input); in.Kind != Read && op.Return != Never {
				window = append(window, op)
			}
		}
		window = append(window, bad)
	}
	window = window[max(len(window)-20, 0):]
	for _, op := range window {
		mark := "  "
		if op.Call == bad.Call && op.ClientId == bad.ClientId {
			mark = "=>"
		}
		m := op.Metadata.(Meta)
		ret := "never"
		if op.Return != Never {
			ret = time.Duration(op.Return).Round(time.Microsecond).String()
		}
		who := fmt.Sprintf("client %d", m.Client)
		if m.Final {
			who = "final   "
		}
		fmt.Fprintf(&b, "%s %s  %-34s  call %v  return %v  server %s  map v%d→v%d  shard %d %s\n", mark, who,
			model.DescribeOperation(op.Input, op.Output), time.Duration(op.Call).Round(time.Microsecond), ret, m.Server, m.Before, m.After, m.Shard, m.Err)
	}
	return b.String()
}
