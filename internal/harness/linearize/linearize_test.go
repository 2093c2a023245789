package linearize

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

// op is an operation of a hand-made history: call and return in ticks.
func op(client int, in Input, out Output, call, ret int64) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret, Metadata: Meta{Client: client, Server: "b"}}
}

func TestModel(t *testing.T) {
	w := func(k, v int) Input { return Input{Kind: Write, Key: k, Arg: v} }
	r := func(k int) Input { return Input{Kind: Read, Key: k} }
	for _, c := range []struct {
		name string
		ops  []porcupine.Operation
		ok   bool
	}{
		{"read after write", []porcupine.Operation{op(0, w(1, 5), Output{}, 0, 10), op(1, r(1), Output{Value: 5}, 20, 30)}, true},
		{"stale read after an acknowledged write", []porcupine.Operation{op(0, w(1, 5), Output{}, 0, 10), op(1, r(1), Output{Value: 0}, 20, 30)}, false},
		{"concurrent read sees either", []porcupine.Operation{op(0, w(1, 5), Output{}, 0, 30), op(1, r(1), Output{Value: 0}, 10, 20)}, true},
		{"unknown write seen", []porcupine.Operation{op(0, w(1, 5), Output{Unknown: true}, 0, Never), op(1, r(1), Output{Value: 5}, 20, 30)}, true},
		{"unknown write not seen", []porcupine.Operation{op(0, w(1, 5), Output{Unknown: true}, 0, Never), op(1, r(1), Output{Value: 0}, 20, 30)}, true},
		{"unknown write seen, then unseen", []porcupine.Operation{op(0, w(1, 5), Output{Unknown: true}, 0, Never),
			op(1, r(1), Output{Value: 5}, 20, 30), op(1, r(1), Output{Value: 0}, 40, 50)}, false},
		{"keys are independent", []porcupine.Operation{op(0, w(1, 5), Output{}, 0, 10), op(1, r(2), Output{Value: 0}, 20, 30)}, true},
		{"cas applied on the value read", []porcupine.Operation{op(0, w(1, 5), Output{}, 0, 10),
			op(1, Input{Kind: CAS, Key: 1, Old: 5, Arg: 6}, Output{OK: true}, 20, 30), op(1, r(1), Output{Value: 6}, 40, 50)}, true},
		{"cas applied on another value", []porcupine.Operation{op(0, w(1, 5), Output{}, 0, 10),
			op(1, Input{Kind: CAS, Key: 1, Old: 4, Arg: 6}, Output{OK: true}, 20, 30)}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(Model.ToModel(), c.ops); got != c.ok {
				t.Errorf("linearizable = %v, want %v", got, c.ok)
			}
		})
	}
}

// TestCheckReportsWindow: a stale read after an acknowledged write is
// reported with the faults noted, the window naming the read, and a
// visualization on disk; a failed read is dropped and a failed write is
// an unknown outcome.
func TestCheckReportsWindow(t *testing.T) {
	h := New()
	h.Note("primary killed")
	w := h.Call(Input{Kind: Write, Key: 3, Arg: h.Value()}, Meta{Client: 0, Server: "b"})
	w.Return(Output{}, nil)
	r := h.Call(Input{Kind: Read, Key: 3}, Meta{Client: 1, Server: "b (old primary)"})
	r.Return(Output{Value: 0}, nil)
	h.Call(Input{Kind: Read, Key: 3}, Meta{Client: 1}).Return(Output{Value: 7}, errors.New("connection reset"))
	h.Call(Input{Kind: Write, Key: 4, Arg: h.Value()}, Meta{Client: 1}).Return(Output{}, errors.New("connection reset"))
	if ops, unknown := h.Stats(); ops != 3 || unknown != 1 {
		t.Fatalf("%d operations, %d unknown: want 3 (the failed read dropped), 1 unknown", ops, unknown)
	}
	got := h.Check(t)
	if len(got) != 1 {
		t.Fatalf("%d violations, want 1 (key 3): %q", len(got), got)
	}
	v := got[0]
	for _, want := range []string{"primary killed", "key 3 is not linearizable", "=> client 1  read(k3) → 0", "server b (old primary)"} {
		if !strings.Contains(v, want) {
			t.Errorf("violation lacks %q:\n%s", want, v)
		}
	}
	m := regexp.MustCompile(`visualization of the history: (\S+)`).FindStringSubmatch(v)
	if m == nil {
		t.Fatalf("violation names no visualization:\n%s", v)
	}
	if fi, err := os.Stat(m[1]); err != nil || fi.Size() == 0 {
		t.Errorf("visualization %s: %v", m[1], err)
	}
	_ = os.Remove(m[1])
}
