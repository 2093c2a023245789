package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/testkit"
)

// warmTables are the registered tables the warm-up opens.
const warmTables = `('photos', 'likes', 'albums', 'accounts')`

// resetStats starts the servers' scan counts afresh (provisioning
// scanned the tables: each index build counts a scan of its table).
func resetStats(t *testing.T) func(*env) {
	return func(e *env) {
		for _, name := range e.servers {
			resetWhenAlone(t, e.dsn[name])
		}
	}
}

// resetWhenAlone resets a database's statistics once every other backend
// of it has exited. A backend keeps the counts of a transaction that
// ended within a second of its last report, and reports them when it
// exits: after it has left pg_stat_activity (Postgres clears that entry
// first), so a provisioning session closed just before a reset could add
// its scans after it. Seen once (28 tables scanned besides the read's,
// under load) and reproduced with psql: a session's scans, its close,
// an immediate pg_stat_reset() from another session, then the scans in
// pg_stat_user_tables. Only the process's end is certain, so this waits
// on /proc for the database's other backends of the cluster (the test
// clusters run on this machine).
func resetWhenAlone(t *testing.T, dsn string) {
	t.Helper()
	ctx := context.Background()
	conn := pgtest.Connect(t, dsn)
	var self int
	var db string
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid(), current_database()").Scan(&self, &db); err != nil {
		t.Fatal(err)
	}
	postmaster, err := parentPID(self)
	if err != nil {
		t.Fatal(err)
	}
	t0, first := time.Now(), ""
	testkit.Until(t, time.Minute, func() error {
		if others := backendsOf(postmaster, db, self); len(others) > 0 {
			if first == "" {
				first = strings.Join(others, "; ")
			}
			return fmt.Errorf("backends of %s still running: %v", db, others)
		}
		return nil
	})
	if first != "" {
		t.Logf("waited %v for the database's other backends to exit (%s)", time.Since(t0), first)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_stat_reset()"); err != nil {
		t.Fatal(err)
	}
}

// parentPID is the parent of process pid, from /proc.
func parentPID(pid int) (int, error) {
	if f := procStat(pid); len(f) > 1 {
		return strconv.Atoi(f[1])
	}
	return 0, fmt.Errorf("process %d: no parent in /proc/%d/stat", pid, pid)
}

// backendsOf lists the children of postmaster but self whose process
// title names database db ("postgres: user db host(port) state").
func backendsOf(postmaster int, db string, self int) []string {
	var out []string
	for _, pid := range processes() {
		if pid == self {
			continue
		}
		if ppid, err := parentPID(pid); err != nil || ppid != postmaster {
			continue
		}
		title, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err != nil {
			continue // gone meanwhile
		}
		if slices.Contains(strings.Fields(strings.ReplaceAll(string(title), "\x00", " ")), db) {
			out = append(out, fmt.Sprintf("%d %q", pid, strings.TrimSpace(string(title))))
		}
	}
	return out
}

// coldTables lists the shard tables of a server that no statement has
// scanned, as far as Postgres's statistics know yet.
func coldTables(t *testing.T, e *env, server string) []string {
	t.Helper()
	ctx := context.Background()
	conn := pgtest.Connect(t, e.dsn[server])
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT schemaname || '.' || relname FROM pg_stat_user_tables
		WHERE schemaname LIKE 'shard\_%' AND relname IN `+warmTables+`
		AND seq_scan + coalesce(idx_scan, 0) = 0 ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var cold []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		cold = append(cold, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return cold
}

// waitWarm waits until every shard table of every server shows a scan.
func waitWarm(t *testing.T, e *env) {
	t.Helper()
	// Statistics reach the views a while after the warm-up's transactions
	// (an idle backend reports its own within seconds): wait for them.
	testkit.Until(t, time.Minute, func() error {
		for _, name := range e.servers {
			if cold := coldTables(t, e, name); len(cold) > 0 {
				return fmt.Errorf("server %s: %d shard tables never opened by the warm-up, e.g. %v", name, len(cold), cold[:min(5, len(cold))])
			}
		}
		return nil
	})
}

// TestWarmUp checks that Use opens every registered table of every shard
// on each server (each shows a scan in Postgres's statistics), so that the
// first read across shards does not pay for it.
func TestWarmUp(t *testing.T) {
	// No bound: this checks what the warm-up opens, not how long it may take.
	e := newEnv(t, envOpts{shards: 64, before: resetStats(t), cfg: func(c *Config) { c.WarmUp, c.WarmUpTimeout = WarmUpBlocking, -1 }})
	waitWarm(t, e)
}

// TestWarmUpInBackground: a warm-up after start-up (WarmUpBackground) still opens every
// table.
func TestWarmUpInBackground(t *testing.T) {
	e := newEnv(t, envOpts{shards: 64, before: resetStats(t), cfg: func(c *Config) { c.WarmUp, c.WarmUpTimeout = WarmUpBackground, -1 }})
	waitWarm(t, e)
}

// TestWarmUpBounded: a warm-up whose bound has passed before it starts
// opens no table, and start-up goes on without it.
func TestWarmUpBounded(t *testing.T) {
	e := newEnv(t, envOpts{shards: 64, before: resetStats(t), cfg: func(c *Config) { c.WarmUp, c.WarmUpTimeout = WarmUpBlocking, time.Nanosecond }})
	onlyReadScanned(t, e)
}

// TestWarmUpOffByDefault: without Config.WarmUp, start-up opens no shard
// table; a read opens what it reads.
func TestWarmUpOffByDefault(t *testing.T) {
	e := newEnv(t, envOpts{shards: 64, before: resetStats(t)})
	onlyReadScanned(t, e)
}

// onlyReadScanned reads one shard and checks that its table is the only
// one scanned. The read is the marker: once its scan shows in the
// statistics, a warm-up's would have too.
func onlyReadScanned(t *testing.T, e *env) {
	t.Helper()
	if err := e.db.Where("user_id = ?", 0).Find(&[]Photo{}).Error; err != nil {
		t.Fatal(err)
	}
	server, marker := e.serverOf(t, 0), "shard_0000.photos"
	testkit.Until(t, time.Minute, func() error { // statistics arrive asynchronously
		if slices.Contains(coldTables(t, e, server), marker) {
			return fmt.Errorf("the read of %s does not show in the statistics yet", marker)
		}
		return nil
	})
	total := 0
	for _, name := range e.servers {
		total += len(coldTables(t, e, name))
	}
	if want := e.shards*4 - 1; total != want {
		t.Fatalf("%d shard tables unscanned after start-up and one read, want %d (all but the read's); scanned: %v", total, want, scannedTables(t, e))
	}
}

// scannedTables lists, for a failure's message, the shard tables with a
// scan and their counts: which tables, and by what kind of scan, tells a
// start-up's scan from a stray one (docs/reliability.md).
func scannedTables(t *testing.T, e *env) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	for _, name := range e.servers {
		conn := pgtest.Connect(t, e.dsn[name])
		rows, err := conn.Query(ctx, `SELECT format('%s.%s seq %s idx %s', schemaname, relname, seq_scan, coalesce(idx_scan, 0))
			FROM pg_stat_user_tables WHERE schemaname LIKE 'shard\_%' AND relname IN `+warmTables+`
			AND seq_scan + coalesce(idx_scan, 0) > 0 ORDER BY 1`)
		if err != nil {
			conn.Close(ctx)
			t.Fatal(err)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out = append(out, name+": "+s)
		}
		rows.Close()
		conn.Close(ctx)
	}
	return out
}

// TestWarmUpModeUnknown: a WarmUp that is none of the modes is refused by
// db.Use as an invalid configuration, rather than taken as one of them.
func TestWarmUpModeUnknown(t *testing.T) {
	e := newEnv(t, envOpts{})
	db, err := gorm.Open(postgres.Open(e.def), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Use(Register(Config{Router: e.r, WarmUp: WarmUpBackground + 1}, &Photo{}))
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "WarmUpMode(3)") {
		t.Fatalf("db.Use with WarmUp %d: err = %v, want ErrInvalidConfig naming WarmUpMode(3)", WarmUpBackground+1, err)
	}
}
