package rebalance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardkit/shardkit/catalog"
)

// TestErrorKinds: every failure a caller acts on is a *MoveError whose
// Kind errors.Is matches, whatever cause it wraps, and the causes' own
// messages survive.
func TestErrorKinds(t *testing.T) {
	m := &Move{ID: 7, Shard: 3, Source: "s0", Target: "s1"}
	stepErr := func(cause error) error { return stoppedAt(m, stepCaughtUp, cause) }
	refused := func(cause error) error {
		err := cause
		asMoveErrorTo(&err, 3, "s1")
		return err
	}
	preflight := (&Report{Shard: 3, Source: "s0", Target: "s1", Checks: []Check{
		{Name: checkWalLevel, Err: &checkError{Check: checkWalLevel, Server: "s1", Detail: "is replica", Err: ErrNotLogical}},
		{Name: checkNoMigration, Err: &checkError{Check: checkNoMigration, Err: errMigrationRunning}},
		{Name: checkReplicaIdentity},
	}}).err()
	cases := []struct {
		name  string
		err   error
		kind  error
		is    []error // besides the kind
		inMsg string
	}{
		{"lag gate", stepErr(&lagGateError{Best: time.Second, Bound: time.Millisecond, Tries: 3}), ErrCutoverAborted, nil, "Config.CutoverLag"},
		{"catch-up", stepErr(&catchUpError{Drain: -1, Bound: time.Second, Waited: time.Minute}), ErrCutoverAborted, nil, "Config.DrainBound"},
		{"cutover timeout", stepErr(fmt.Errorf("%w (slot x)", errCutoverTimeout)), ErrCutoverAborted, nil, "final LSN"},
		{"fence lapsed", stepErr(errFenceLapsed), ErrCutoverAborted, nil, "Config.FenceLease"},
		{"prepared transactions", stepErr(fmt.Errorf("server s0: %w (gid)", ErrPreparedTransactions)), ErrPreparedTransactions, nil, "resolver.Resolver"},
		{"step timeout", stepErr(&timeoutError{What: "copy", After: time.Minute, Err: context.DeadlineExceeded}), ErrStopped, []error{context.DeadlineExceeded}, "did not finish in time"},
		{"any other step failure", stepErr(errors.New("boom")), ErrStopped, nil, "stopped at step caught_up: boom"},
		{"mismatch", refused(&mismatchError{Schema: "shard_0003", Table: "photos"}), ErrMismatch, nil, "shard_0003.photos"},
		{"no move", refused(fmt.Errorf("shardkit: shard 3: %w", errNoMove)), ErrWrongState, nil, "no unfinished move"},
		{"same server", refused(fmt.Errorf("shardkit: shard 3 on s1: %w", ErrSameServer)), ErrSameServer, nil, "already on the target"},
		{"move in progress", refused(fmt.Errorf("shardkit: shard 3: %w", ErrMoveInProgress)), ErrMoveInProgress, nil, "unfinished move"},
		{"target not active", refused(fmt.Errorf("shardkit: target %q is draining: %w", "s1", errTargetNotActive)), ErrPreflight, nil, "not active"},
		{"preflight", preflight, ErrPreflight, []error{ErrNotLogical, catalog.ErrProvisionRunning}, "(2 failed)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var me *MoveError
			if !errors.As(c.err, &me) || me.Kind != c.kind || me.Shard != 3 {
				t.Fatalf("%v: want a *MoveError of shard 3 and kind %q, got %#v", c.err, c.kind, me)
			}
			for _, want := range append([]error{c.kind}, c.is...) {
				if !errors.Is(c.err, want) {
					t.Errorf("%v: errors.Is(%q) is false", c.err, want)
				}
			}
			for _, k := range kinds {
				if k != c.kind && !isAmong(k, c.is) && errors.Is(c.err, k) {
					t.Errorf("%v: also of kind %q", c.err, k)
				}
			}
			if msg := c.err.Error(); !strings.Contains(msg, c.inMsg) {
				t.Errorf("message %q lacks %q", msg, c.inMsg)
			}
		})
	}
	// A journalled move's failure names the move, its step and its servers.
	var me *MoveError
	if err := stepErr(errors.New("boom")); !errors.As(err, &me) || me.ID != 7 || me.Step != stepCaughtUp || me.Target != "s1" {
		t.Errorf("step failure %#v", me)
	}
}

func isAmong(err error, errs []error) bool {
	for _, e := range errs {
		if e == err {
			return true
		}
	}
	return false
}

// TestJournalStepNames: the names the journal stores are unchanged, so a
// catalog journalled by an earlier shardkit resumes; and each mode's order
// is the one its steps run in.
func TestJournalStepNames(t *testing.T) {
	names := func(steps []Step) []string {
		out := make([]string, len(steps))
		for i, s := range steps {
			out[i] = string(s)
		}
		return out
	}
	for _, c := range []struct {
		name  string
		steps []Step
		want  string
	}{
		{"online", onlineSteps, "created map_moving target_schema publication copied_snapshot indexes subscribed caught_up reverse_slot fenced barrier applied sequences sealed flipped reverse"},
		{"offline", offlineSteps, "created map_moving target_schema fenced barrier copied_offline indexes verified sequences flipped"},
		{"rollback", rollbackSteps, "reverse rb_fenced rb_barrier rb_applied rb_sequences rb_sealed rb_flipped rb_cleaned"},
	} {
		if got := fmt.Sprint(names(c.steps)); got != "["+c.want+"]" {
			t.Errorf("%s steps %s, want [%s]", c.name, got, c.want)
		}
	}
	for s, want := range map[Step]string{stepCleaned: "cleaned", stepRbUndo: "rb_undo"} {
		if string(s) != want {
			t.Errorf("step %q, want %q", s, want)
		}
	}
}
