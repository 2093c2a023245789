package pglocal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// StandbyOptions configure AddStandby.
type StandbyOptions struct {
	// Sync makes the standby the primary's synchronous standby: the
	// primary acknowledges a commit only once the standby has flushed it
	// (synchronous_standby_names, synchronous_commit = on). The zero value
	// streams asynchronously, where a commit acknowledged by the primary
	// may be lost when the standby is promoted.
	Sync bool
	// SlotSync makes the standby keep copies of the primary's failover
	// logical slots (PostgreSQL 17+), so that a subscriber of such a slot
	// resumes on the standby once it is promoted: a physical slot on the
	// primary that the standby streams from (primary_slot_name),
	// hot_standby_feedback, sync_replication_slots with a dbname in
	// primary_conninfo, and on the primary synchronized_standby_slots
	// naming that physical slot, so that no logical walsender sends a
	// change the standby has not received. On an older server it is an
	// error (ErrNoSlotSync). The zero value syncs nothing: a logical slot
	// of the primary is gone on the promoted standby.
	SlotSync bool
}

// ErrNoSlotSync reports StandbyOptions.SlotSync on a server older than
// PostgreSQL 17, which cannot sync logical slots to a standby.
var ErrNoSlotSync = errors.New("pglocal: logical slot sync needs PostgreSQL 17 or newer (sync_replication_slots)")

// sqlVersionNum is the server's version as a number (170011 for 17.11).
const sqlVersionNum = "SHOW server_version_num"

// VersionNum returns the running cluster's server_version_num (150014,
// 170011, …).
func (c *Cluster) VersionNum(ctx context.Context) (int, error) {
	out, err := c.psql(ctx, sqlVersionNum)
	if err != nil {
		return 0, fmt.Errorf("pglocal: server version: %w", err)
	}
	n, err := strconv.Atoi(out)
	if err != nil {
		return 0, fmt.Errorf("pglocal: server version %q: %w", out, err)
	}
	return n, nil
}

// AddStandby adds a streaming standby of primary to the set: a base backup
// taken with pg_basebackup -R (which writes standby.signal and the
// primary_conninfo), started on a port of its own. The standby has every
// database of the primary as of the backup and replays the rest as it
// streams; Promote makes it a primary on a new timeline.
func (s *Set) AddStandby(ctx context.Context, primary *Cluster, opts StandbyOptions) (*Cluster, error) {
	dir := filepath.Join(s.root, fmt.Sprintf("pg%d", len(s.Clusters)))
	name := fmt.Sprintf("standby%d", len(s.Clusters))
	slot := name + "_slot"
	backup := []string{"-D", dir, "-h", "127.0.0.1", "-p", strconv.Itoa(primary.Port), "-U", "postgres",
		"-X", "stream", "-c", "fast", "-R", "--no-sync"}
	if opts.SlotSync {
		v, err := primary.VersionNum(ctx)
		if err != nil {
			return nil, err
		}
		if v < 170000 {
			return nil, fmt.Errorf("%w (the primary on port %d runs %d)", ErrNoSlotSync, primary.Port, v)
		}
		// The backup streams through the physical slot it creates, so
		// that the primary keeps every WAL record the standby has not
		// received from the backup on.
		backup = append(backup, "-C", "-S", slot)
	}
	if err := run(ctx, primary.cred, filepath.Join(primary.bin, "pg_basebackup"), backup...); err != nil {
		return nil, fmt.Errorf("pglocal: base backup of the cluster on port %d: %w", primary.Port, err)
	}
	// The backup's postgresql.auto.conf holds the primary's port and the
	// primary_conninfo -R wrote; start rewrites the file, so the
	// conninfo goes in again, naming the standby for
	// synchronous_standby_names (and, to sync slots, a database the slot
	// sync worker connects to: any will do, slots of every database are
	// synced).
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=%s", primary.Port, name)
	settings := map[string]string{"hot_standby": "on"}
	if opts.SlotSync {
		conninfo += " dbname=postgres"
		settings["primary_slot_name"] = "'" + slot + "'"
		settings["hot_standby_feedback"] = "on"
		settings["sync_replication_slots"] = "on"
	}
	settings["primary_conninfo"] = "'" + conninfo + "'"
	c := &Cluster{Dir: dir, bin: primary.bin, cred: primary.cred}
	if err := c.start(ctx, Options{Settings: settings}); err != nil {
		return nil, err
	}
	s.Clusters = append(s.Clusters, c)
	if opts.SlotSync {
		if err := primary.Configure(ctx, map[string]string{"synchronized_standby_slots": "'" + slot + "'"}); err != nil {
			return nil, err
		}
	}
	want := "async"
	if opts.Sync {
		want = "sync"
		if err := primary.Configure(ctx, map[string]string{
			"synchronous_standby_names": "'" + name + "'",
			"synchronous_commit":        "on",
		}); err != nil {
			return nil, err
		}
	}
	// A reload takes effect when the postmaster gets to it: the standby
	// is ready once the primary streams to it as asked.
	q := "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming' AND application_name = '" + name + "'"
	for {
		got, err := primary.psql(ctx, q)
		if err == nil && got == want {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("pglocal: standby %s not streaming as %s (%q, %v): %w", name, want, got, err, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// SyncSlots wakes a SlotSync standby's slot sync worker, which sleeps up
// to 30 s when the primary's slots did not change, so that it syncs them
// now: a reload of the configuration sets its latch. (The manual
// pg_sync_replication_slots() refuses to run beside the worker.) It
// reports nothing: a caller waits for the slots it needs, as it would
// for the worker.
func (c *Cluster) SyncSlots(ctx context.Context) {
	_, _ = c.psql(ctx, "SELECT pg_reload_conf()")
}

// psql runs one query on the cluster's postgres database with psql and
// returns its unaligned output.
func (c *Cluster) psql(ctx context.Context, sql string) (string, error) {
	out, err := exec.CommandContext(ctx, filepath.Join(c.bin, "psql"), "-XAtqc", sql, c.DSN("postgres")).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("psql: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// Configure appends settings to the cluster's postgresql.auto.conf (a line
// later in the file wins) and, when the cluster runs, reloads them.
func (c *Cluster) Configure(ctx context.Context, settings map[string]string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	path := filepath.Join(c.Dir, "postgresql.auto.conf")
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pglocal: configure: %w", err)
	}
	_, err = f.WriteString(ConfLines(settings))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("pglocal: configure: %w", err)
	}
	if c.down {
		return nil
	}
	return run(ctx, c.cred, filepath.Join(c.bin, "pg_ctl"), "-D", c.Dir, "reload")
}

// Promote promotes a standby to primary (pg_ctl promote) and waits until
// it accepts writes.
func (c *Cluster) Promote(ctx context.Context) error {
	return run(ctx, c.cred, filepath.Join(c.bin, "pg_ctl"), "-D", c.Dir, "-w", "-t", "60", "promote")
}

// Kill ends the cluster as a crash of its machine would: SIGKILL to the
// postmaster and to every process it started, with no shutdown checkpoint.
// It returns once they are gone, so that Restart starts it again as it was
// (crash recovery, the same timeline, writable unless it was a standby).
func (c *Cluster) Kill(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down {
		return nil
	}
	pidFile, err := os.ReadFile(filepath.Join(c.Dir, "postmaster.pid"))
	if err != nil {
		return fmt.Errorf("pglocal: kill: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(pidFile), "\n", 2)[0]))
	if err != nil {
		return fmt.Errorf("pglocal: kill: postmaster.pid: %w", err)
	}
	// A crash ends every process at once. Killed one by one, the
	// postmaster could fork a backend for a client reconnecting after its
	// first backend died, before its own SIGKILL: that backend, in no
	// list, would go on serving (and committing) on the "crashed" server.
	// Stopped first, it forks nothing; its children are listed only then.
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	for {
		st, ok := procStat(pid)
		if !ok || st.state == 'T' || st.state == 'Z' {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pglocal: kill: postmaster %d not stopped: %w", pid, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
	procs := append(childrenOf(pid), pid)
	for _, p := range procs {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	c.down = true
	for _, p := range procs {
		for syscall.Kill(p, 0) == nil && !zombie(p) {
			select {
			case <-ctx.Done():
				return fmt.Errorf("pglocal: kill: process %d still runs: %w", p, ctx.Err())
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	// A killed postmaster can stay a zombie when the process it was
	// reparented to does not reap it, and a server starting finds its
	// pid alive and refuses the data directory; after a crash of the
	// machine no such process exists, which removing the file restores.
	// The same holds for the socket's lock file.
	for _, f := range []string{"postmaster.pid", fmt.Sprintf(".s.PGSQL.%d.lock", c.Port)} {
		if err := os.Remove(filepath.Join(c.Dir, f)); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("pglocal: kill: %w", err)
		}
	}
	return nil
}

// childrenOf lists the processes whose parent is pid, from /proc.
func childrenOf(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := procStat(p); ok && st.ppid == pid {
			out = append(out, p)
		}
	}
	return out
}

type stat struct {
	state byte
	ppid  int
}

// procStat reads a process's state and parent from /proc/PID/stat.
func procStat(pid int) (stat, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return stat{}, false
	}
	// The command name is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return stat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return stat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	return stat{state: f[0][0], ppid: ppid}, true
}

// zombie reports a process that has exited and waits for its parent's wait.
func zombie(pid int) bool {
	st, ok := procStat(pid)
	return !ok || st.state == 'Z'
}
