package rebalance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/harness/testkit"
	"github.com/shardkit/shardkit/router"
)

// TestMoverChild is the mover process of TestKillMoverAtEveryStep: run by
// a re-executed test binary, it moves (or rolls back) a shard and SIGKILLs
// itself at the step it is told.
func TestMoverChild(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("runs only as the child of TestKillMoverAtEveryStep")
	}
	ctx := context.Background()
	cat, err := catalog.Open(ctx, os.Getenv("CHILD_CATALOG"))
	if err != nil {
		t.Fatal(err)
	}
	kill, phase := Step(os.Getenv("CHILD_KILL")), os.Getenv("CHILD_PHASE") == "end"
	// The cutover wait is not what this test is about: on a loaded machine
	// the default 10 s has run out before the step the child dies at.
	lease, _ := time.ParseDuration(os.Getenv("CHILD_LEASE")) // "" is 0: the default
	lag, _ := time.ParseDuration(os.Getenv("CHILD_CUTOVER_LAG"))
	mv, err := New(Config{Catalog: cat, CutoverTimeout: time.Minute, DrainBound: killDrainBound, FenceLease: lease, CutoverLag: lag, hook: func(_ Move, s Step, done bool) {
		if s == kill && done == phase {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	shard, _ := strconv.Atoi(os.Getenv("CHILD_SHARD"))
	switch os.Getenv("CHILD_OP") {
	case "move":
		_, err = mv.Move(ctx, shard, os.Getenv("CHILD_TARGET"), MoveOptions{})
	case "rollback":
		_, err = mv.Rollback(ctx, shard)
	}
	// A short lease may lapse on a loaded machine before the step the
	// child dies at: the move is resumable, so try again.
	for i := 0; i < 5 && errors.Is(err, errFenceLapsed); i++ {
		if os.Getenv("CHILD_OP") == "rollback" {
			_, err = mv.Rollback(ctx, shard)
		} else {
			_, err = mv.Resume(ctx, shard)
		}
	}
	t.Fatalf("child was not killed at %s (err %v)", kill, err)
}

// runChild runs the mover in a child process that kills itself at step.
func runChild(t *testing.T, e *env, op string, shard int, target string, step Step, atEnd bool) {
	t.Helper()
	runChildLease(t, e, op, shard, target, step, atEnd, 0)
}

// runChildLease is runChild with the child's Config.FenceLease (0: default)
// and more of its environment (CHILD_CUTOVER_LAG: Config.CutoverLag).
func runChildLease(t *testing.T, e *env, op string, shard int, target string, step Step, atEnd bool, lease time.Duration, env ...string) {
	t.Helper()
	phase := "begin"
	if atEnd {
		phase = "end"
	}
	env = append([]string{childEnv + "=1", "CHILD_CATALOG=" + e.catalogDSN, "CHILD_OP=" + op,
		"CHILD_SHARD=" + strconv.Itoa(shard), "CHILD_TARGET=" + target, "CHILD_KILL=" + string(step), "CHILD_PHASE=" + phase, "CHILD_LEASE=" + lease.String()}, env...)
	out, err := testkit.RunChild(t, "TestMoverChild", env...)
	if !testkit.Killed(err) {
		t.Fatalf("child %s killed at %s/%s: want SIGKILL, got %v\n%s", op, step, phase, err, out)
	}
}

// killDrainBound is the kill test's movers' Config.DrainBound. Its
// writers write as fast as the servers take them, and at load 17 on two
// cores a target applied 254 KiB/s of the 408 KiB/s written: with the
// default 1 s the move refused to fence (a *catchUpError, nothing fenced)
// and the test, which kills movers rather than measures them, failed. A
// longer fenced window is within the writers' bound (a minute).
const killDrainBound = 10 * time.Second

func TestKillMoverAtEveryStep(t *testing.T) {
	if testing.Short() {
		t.Skip("kills mover processes at every step (their concurrency is between processes; the first make test stage runs it)")
	}
	ctx := context.Background()
	e := newEnv(t, 2, 2, 2) // shard 0 on s0, shard 1 on s1
	seedPhotos(t, e, 0, 3000)
	seedPhotos(t, e, 1, 3000)
	mv := e.mover(t, Config{CutoverTimeout: time.Minute, DrainBound: killDrainBound})
	w := newRawWriter(t, e, []int{0, 1})
	w.bound = time.Minute // a killed mover may leave the shard fenced until it is resumed
	stop := w.run(ctx)
	defer stop()

	var kills []kill
	for _, s := range onlineSteps[1:] {
		kills = append(kills, kill{"move", s, true, false})
	}
	kills = append(kills,
		kill{"move", stepBarrier, false, false}, kill{"move", stepCopying, false, false}, kill{"move", stepCopiedSnapshot, false, false},
		kill{"rollback", stepRbBarrier, true, false}, kill{"rollback", stepRbApplied, true, false},
		kill{"rollback", stepRbFlipped, false, false}, kill{"rollback", stepRbCleaned, false, false},
		kill{"undo", stepRbUndo, false, false}, kill{"undo", stepRbUndo, true, false})
	for i := range kills {
		kills[i].resume = i%2 == 0 // killed moves alternate: resumed and completed, or rolled back
	}
	// The kills run in two sequences side by side, on shards 0 and 1: the
	// moves of two shards share nothing but the servers and the catalog,
	// and each sequence checks only its own shard's replication objects.
	half := len(kills) / 2
	t.Run("shards", func(t *testing.T) {
		for shard, ks := range [][]kill{kills[:half], kills[half:]} {
			t.Run(fmt.Sprintf("shard_%d", shard), func(t *testing.T) {
				t.Parallel()
				killSequence(t, e, mv, w, shard, ks)
			})
		}
	})
	if left := e.leftovers(t); len(left) > 0 {
		t.Errorf("left behind after both sequences: %v", left)
	}
	stop()
	w.check(t)
	t.Logf("writer: %d ops, %d failed, longest write %v", w.ops, len(w.failures), w.maxWait)
}

// kill is one step of TestKillMoverAtEveryStep: a child mover running op
// (move, rollback, or undo: the rollback of a move stopped after its copy)
// killed at the beginning or end of step; a killed move is then resumed
// and completed, or rolled back.
type kill struct {
	op     string
	step   Step
	atEnd  bool
	resume bool
}

// killSequence runs kills one after the other on shard, each from where
// the one before left the shard, and checks after each that the shard is
// active in one place with nothing of its moves left behind, and that
// every write to it acknowledged so far is there.
func killSequence(t *testing.T, e *env, mv *Mover, w *rawWriter, shard int, kills []kill) {
	ctx := context.Background()
	for _, k := range kills {
		name := fmt.Sprintf("%s_%s_%v", k.op, k.step, k.atEnd)
		from := e.placement(t, shard).Server
		to := map[string]string{"s0": "s1", "s1": "s0"}[from]
		if k.op == "rollback" {
			// A reversible move to roll back.
			if _, err := mv.Move(ctx, shard, to, MoveOptions{}); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		if k.op == "undo" {
			// A move stopped after its copy, whose rollback is killed too.
			runChild(t, e, "move", shard, to, stepCopiedSnapshot, true)
			runChild(t, e, "rollback", shard, to, k.step, k.atEnd)
		} else {
			runChild(t, e, k.op, shard, to, k.step, k.atEnd)
		}
		open, err := mv.j.open(ctx, shard)
		if err != nil {
			t.Fatalf("%s: after the kill: %v", name, err)
		}
		var m Move
		switch {
		case k.op == "rollback" || k.op == "undo":
			m, err = mv.Rollback(ctx, shard)
		case k.resume:
			if m, err = mv.Resume(ctx, shard); err == nil {
				m, err = mv.Complete(ctx, shard)
			}
		default:
			m, err = mv.Rollback(ctx, shard)
		}
		if err != nil {
			t.Fatalf("%s: finishing move %d (%s at %s): %v", name, open.ID, open.State, open.Step, err)
		}
		if m.open() {
			t.Fatalf("%s: move %d still %s", name, m.ID, m.State)
		}
		p := e.placement(t, shard)
		if p.State != router.StateActive {
			t.Errorf("%s: shard %d is %s", name, shard, p.State)
		}
		other := map[string]string{"s0": "s1", "s1": "s0"}[p.Server]
		if e.schemaOn(t, other, shard) {
			t.Errorf("%s: shard %d served by %s but its schema is still on %s", name, shard, p.Server, other)
		}
		if left := e.leftoversOf(t, shard); len(left) > 0 {
			t.Errorf("%s: left behind: %v", name, left)
		}
		w.checkSoFar(t, shard, name)
		t.Logf("%s: move %d %s, shard %d on %s", name, m.ID, m.State, shard, p.Server)
	}
}
