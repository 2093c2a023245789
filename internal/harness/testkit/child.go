package testkit

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
)

// Child is the test binary run again as a child process.
type Child struct {
	cmd  *exec.Cmd
	out  SyncBuffer
	done chan struct{}
	err  error // of the child's end, once done is closed
}

// StartChild runs the test binary again with env ("NAME=value") added to
// the environment. With a test name the child runs only that test
// (-test.run=^test$), which recognises env and does the child's work;
// with "" it runs no test, for a TestMain that recognises env and does
// the work itself (without starting clusters). The child's stdout and
// stderr are kept (Output) and logged if the test fails; when the test
// ends the child is killed, if it still runs, and waited for.
func StartChild(t testing.TB, test string, env ...string) *Child {
	t.Helper()
	run := "-test.run=^$"
	if test != "" {
		run = "-test.run=^" + test + "$"
	}
	c := &Child{done: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], run, "-test.count=1")
	c.cmd.Env = append(os.Environ(), env...)
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("testkit: start child %s: %v", run, err)
	}
	go func() {
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		c.Kill()
		if t.Failed() {
			if out := c.Output(); out != "" {
				t.Logf("child %s (pid %d) said:\n%s", run, c.cmd.Process.Pid, out)
			}
		}
	})
	return c
}

// RunChild is StartChild, then Wait: it returns the child's end (nil
// when it exits 0, an *exec.ExitError otherwise) and its output.
func RunChild(t testing.TB, test string, env ...string) (string, error) {
	t.Helper()
	c := StartChild(t, test, env...)
	err := c.Wait()
	return c.Output(), err
}

// Wait waits for the child to end and returns how it ended: nil when it
// exits 0, an *exec.ExitError otherwise. It may be called many times.
func (c *Child) Wait() error {
	<-c.done
	return c.err
}

// Done is closed when the child has ended.
func (c *Child) Done() <-chan struct{} { return c.done }

// Exited reports whether the child has ended.
func (c *Child) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Kill kills the child with SIGKILL, if it still runs, and waits for it.
func (c *Child) Kill() {
	if c.Exited() {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// Killed reports whether the child ended by SIGKILL (its own or Kill's).
func (c *Child) Killed() bool { return c.Exited() && Killed(c.err) }

// Killed reports whether err, from a child's Wait, says it ended by SIGKILL.
func Killed(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// Pid is the child's process ID.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Output is what the child wrote so far to stdout and stderr.
func (c *Child) Output() string { return c.out.String() }

// SyncBuffer is a bytes.Buffer that several goroutines may write while a
// test reads it: a child's output, written by exec's copying goroutine, or
// a log destination.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *SyncBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns what was written so far.
func (l *SyncBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
