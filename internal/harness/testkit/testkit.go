// Package testkit holds the helpers every package's tests share and that
// need nothing of shardkit: waiting on a condition (Eventually) and
// running the test binary again as a child process (StartChild), for
// tests whose concurrency is between processes or that kill one.
//
// Tests wait on conditions, never on fixed sleeps: the machines that run
// them are often loaded, and a budget only matters when the test fails.
package testkit

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Wait is the budget for a condition the code under test reaches on its
// own within moments on an idle machine (a router hearing of a map
// change, a goroutine reaching a lock). It is long because it costs
// nothing when the condition holds, and a loaded machine stretches
// moments into seconds.
const Wait = 30 * time.Second

// deadlineMargin is how long before the test binary's -timeout Eventually
// gives up, so that the test fails with its own message rather than the
// binary's panic and goroutine dump.
const deadlineMargin = 5 * time.Second

// Eventually checks cond until it holds and fails the test if it does not
// within timeout (or shortly before the test binary's deadline, if that
// comes first). It checks again at once, then backs off to every 25 ms,
// so a condition that holds soon is seen soon without spinning on a
// loaded machine. cond may call t.Fatal (from the test's goroutine).
func Eventually(t testing.TB, timeout time.Duration, cond func() bool) {
	t.Helper()
	Until(t, timeout, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

var errNotYet = errors.New("the condition does not hold")

// Until is Eventually for a check that says what is still wrong: it
// returns nil once the condition holds, else an error describing the
// state, and the failure message carries the last one (a connection still
// refused, the tables still cold).
func Until(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	if d, ok := deadlineOf(t); ok && d.Add(-deadlineMargin).Before(deadline) {
		deadline = d.Add(-deadlineMargin)
	}
	pause := time.Millisecond
	for checks := 1; ; checks++ {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testkit: still after %v (%d checks; budget %v): %v",
				time.Since(start).Round(time.Millisecond), checks, timeout, err)
		}
		time.Sleep(pause)
		pause = min(2*pause, 25*time.Millisecond)
	}
}

// deadlineOf is the test binary's deadline (-timeout), when t has one.
func deadlineOf(t testing.TB) (time.Time, bool) {
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		return d.Deadline()
	}
	return time.Time{}, false
}

// ModuleRoot returns the directory of the go.mod above the test's package:
// where tests that read the whole module (its packages, its docs) start.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's package directory")
		}
		dir = parent
	}
}
