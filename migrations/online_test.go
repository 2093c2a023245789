package migrations

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest/photos"
)

// addColumn is testSQL plus version 2: ADD COLUMN … DEFAULT on photos.
func addColumn() photos.FS {
	return photos.With(fstest.MapFS{"0002_photos_width.sql": {Data: []byte("ALTER TABLE photos ADD COLUMN width integer NOT NULL DEFAULT 0;")}})
}

// holdTable opens a transaction on dsn that reads table and keeps its lock
// until the returned function ends it; it returns the session's pid.
func holdTable(t *testing.T, dsn, table string) (pid int, end func()) {
	t.Helper()
	ctx := context.Background()
	conn := pgtest.Connect(t, dsn)
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT count(*) FROM "+table); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	end = func() { once.Do(func() { _ = tx.Rollback(ctx) }) }
	t.Cleanup(end)
	return pid, end
}

// countVersion counts the schemas of a server that applied version v.
func countVersion(t *testing.T, dsn string, v int) int {
	t.Helper()
	var n int
	if err := pgtest.Connect(t, dsn).QueryRow(context.Background(),
		`SELECT count(*) FROM shardkit.shard_migrations WHERE version = $1`, v).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMigrateGivesUpOnABlockedSchema: a transaction holding one shard's
// table makes its schema time out on every attempt; past MaxLockWait the run
// gives that schema up with a *LockWaitError naming it and the blocker's
// pid, having migrated and recorded every other schema. The catalog does
// not record the file; once the blocker ends, a rerun does the one schema
// left and records it.
func TestMigrateGivesUpOnABlockedSchema(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	if err := Provision(ctx, e.cat, ProvisionOptions{Servers: e.servers, Shards: 8, ShardSQL: testSQL}); err != nil {
		t.Fatal(err)
	}
	pid, end := holdTable(t, e.servers[0].DSN, "shard_0003.photos")
	var waits []LockWait
	sum, err := MigrateWithSummary(ctx, e.cat, addColumn(), MigrateOptions{
		LockTimeout: 50 * time.Millisecond, MaxLockWait: 500 * time.Millisecond, RetryBase: 20 * time.Millisecond,
		Progress: func(p Progress) {
			if p.Wait != nil {
				waits = append(waits, *p.Wait)
			}
		}})
	var lw *LockWaitError
	if !errors.As(err, &lw) || !errors.Is(err, ErrLockWait) {
		t.Fatalf("err = %v, want a *LockWaitError", err)
	}
	t.Logf("the error: %v", err)
	if lw.Schema != "shard_0003" || lw.Server != "pg0" || lw.File != "0002_photos_width.sql" || len(lw.Blockers) == 0 || lw.Blockers[0].PID != pid {
		t.Fatalf("the error names %+v; want shard_0003 on pg0, file 0002_photos_width.sql, blocked by pid %d", lw.LockWait, pid)
	}
	if !strings.Contains(err.Error(), "pg_terminate_backend") || !strings.Contains(err.Error(), "run migrate again") {
		t.Fatalf("the error does not say what to do: %v", err)
	}
	if len(waits) < 2 || waits[0].Schema != "shard_0003" || len(waits[0].Blockers) == 0 {
		t.Fatalf("progress reported the waits %+v; want several on shard_0003 naming the blocker", waits)
	}
	if sum.Schemas != 7 || sum.Pending != 8 || sum.Retries != len(waits) || sum.LongestLockSchema != "shard_0003" || len(sum.Recorded) != 0 {
		t.Fatalf("summary %+v; want 7 of 8 schemas, the retries, shard_0003 the longest wait, nothing recorded", sum)
	}
	if n := countVersion(t, e.servers[0].DSN, 2); n != 7 {
		t.Fatalf("%d schemas record version 2, want 7", n)
	}
	if files, _ := e.cat.ShardSQL(ctx); len(files) != 2 {
		t.Fatalf("the catalog records %d files, want the 2 of version 1 only", len(files))
	}
	end()
	sum, err = MigrateWithSummary(ctx, e.cat, addColumn(), MigrateOptions{LockTimeout: 50 * time.Millisecond})
	if err != nil || sum.Schemas != 1 || sum.Pending != 1 || len(sum.Recorded) != 1 {
		t.Fatalf("rerun: %v, summary %+v; want the one schema left, and the file recorded", err, sum)
	}
	checkRecords(t, e.servers, 8, 4)
}

// TestMigrateWaitsOutABlocker: the blocked schema is retried after the
// others, and the run finishes once the blocker ends. While the ALTER
// waits, the migrating session holds no lock of any other schema, so
// requests to other shards never queue behind the migration.
func TestMigrateWaitsOutABlocker(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	if err := Provision(ctx, e.cat, ProvisionOptions{Servers: e.servers, Shards: 8, ShardSQL: testSQL}); err != nil {
		t.Fatal(err)
	}
	pid, end := holdTable(t, e.servers[0].DSN, "shard_0005.photos")
	watcher := pgtest.Connect(t, e.servers[0].DSN)
	// Wait for the migration's ALTER to queue behind the blocker, then list
	// what that session holds outside shard_0005.
	type held struct {
		others int
		err    error
	}
	found := make(chan held, 1)
	timedOut := make(chan struct{})
	go func() {
		defer end()
		var waiter int
		var h held
		for deadline := time.Now().Add(30 * time.Second); ; {
			err := watcher.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid)) LIMIT 1`, pid).Scan(&waiter)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				h.err = fmt.Errorf("no session waited for pid %d within 30 s: %w", pid, err)
				found <- h
				return
			}
			time.Sleep(10 * time.Millisecond) // polling a condition
		}
		h.err = watcher.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
			JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE l.pid = $1 AND l.granted AND n.nspname LIKE 'shard\_%' AND n.nspname <> 'shard_0005'`, waiter).Scan(&h.others)
		found <- h
		<-timedOut // the ALTER gave up once at least: now let it through
	}()
	var waits int
	sum, err := MigrateWithSummary(ctx, e.cat, addColumn(), MigrateOptions{
		LockTimeout: 200 * time.Millisecond, MaxLockWait: 2 * time.Minute, RetryBase: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond,
		Progress: func(p Progress) {
			if p.Wait != nil {
				if waits == 0 {
					close(timedOut)
				}
				waits++
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	h := <-found
	if h.err != nil || h.others != 0 {
		t.Fatalf("while waiting on shard_0005 the migration held %d locks of other schemas (%v); want none", h.others, h.err)
	}
	if sum.Schemas != 8 || waits == 0 || sum.Retries != waits || sum.LongestLockSchema != "shard_0005" || len(sum.Recorded) != 1 {
		t.Fatalf("summary %+v after %d waits; want all 8 schemas, the retries on shard_0005, the file recorded", sum, waits)
	}
	checkRecords(t, e.servers, 8, 4)
}

// TestMigrateConcurrentIndex: a file marked to run outside a transaction
// builds its index CONCURRENTLY on every schema. A build that fails on one
// schema (duplicates under a unique index) leaves an invalid index there;
// once the data is fixed, the rerun finds it, drops it and builds it again,
// and skips the schemas whose index is valid.
func TestMigrateConcurrentIndex(t *testing.T) {
	e := newEnv(t, 2)
	ctx := context.Background()
	if err := Provision(ctx, e.cat, ProvisionOptions{Servers: e.servers, Shards: 8, ShardSQL: testSQL}); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, e.servers[0].DSN, `INSERT INTO shard_0002.photos (user_id, caption) VALUES (1, 'same'), (2, 'same')`)
	files := photos.With(fstest.MapFS{"0002_photos_caption.sql": {Data: []byte(NoTransactionMarker + "\n" +
		"CREATE UNIQUE INDEX CONCURRENTLY photos_caption ON photos (caption, id);\n" +
		"CREATE UNIQUE INDEX CONCURRENTLY photos_caption_only ON photos (caption);\n")}})
	err := Migrate(ctx, e.cat, files, MigrateOptions{})
	var se *ShardError
	if !errors.As(err, &se) || se.Shard != 2 || se.File != "0002_photos_caption.sql" || !errors.Is(err, ErrMigrationFailed) {
		t.Fatalf("err = %v; want a *ShardError of shard 2, file 0002_photos_caption.sql", err)
	}
	valid := func(schema, index string) (exists, ok bool) {
		err := pgtest.Connect(t, e.servers[0].DSN).QueryRow(ctx, `SELECT i.indisvalid FROM pg_index i
			JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname = $2`, schema, index).Scan(&ok)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, false
		}
		if err != nil {
			t.Fatal(err)
		}
		return true, ok
	}
	if exists, ok := valid("shard_0002", "photos_caption_only"); !exists || ok {
		t.Fatalf("after the failed build: photos_caption_only exists %v, valid %v; want an invalid index", exists, ok)
	}
	pgtest.Exec(t, e.servers[0].DSN, `UPDATE shard_0002.photos SET caption = 'other' WHERE user_id = 2`)
	sum, err := MigrateWithSummary(ctx, e.cat, files, MigrateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Schemas != sum.Pending || sum.Pending == 0 || sum.Pending == 8 || len(sum.Recorded) != 1 {
		t.Fatalf("rerun: summary %+v; want the schemas left only, and the file recorded", sum)
	}
	if exists, ok := valid("shard_0002", "photos_caption_only"); !exists || !ok {
		t.Fatalf("after the rerun: photos_caption_only exists %v, valid %v; want a valid index", exists, ok)
	}
	for _, s := range e.servers {
		var bad int
		if err := pgtest.Connect(t, s.DSN).QueryRow(ctx, `SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
			WHERE c.relname IN ('photos_caption', 'photos_caption_only') AND i.indisvalid`).Scan(&bad); err != nil || bad != 8 {
			t.Fatalf("server %s: %d valid caption indexes (%v), want 8 (2 on each of its 4 schemas)", s.Name, bad, err)
		}
	}
	checkRecords(t, e.servers, 8, 4)
}

// TestMigrateBesideMoves: an unfinished move in the journal (a reversible
// one included) refuses the migration with a *MovesError naming it, also
// with AllowMoving; while a migration runs, no move can be journalled.
func TestMigrateBesideMoves(t *testing.T) {
	e := newEnv(t, 2)
	ctx := context.Background()
	if err := Provision(ctx, e.cat, ProvisionOptions{Servers: e.servers, Shards: 8, ShardSQL: testSQL}); err != nil {
		t.Fatal(err)
	}
	m, err := e.cat.Moves().CreateMove(ctx, 1, "pg0", "pg1", "online")
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, e.catalogDSN, `UPDATE shardkit.moves SET state = 'reversible', step = 'cutover' WHERE id = $1`, m.ID)
	for _, allow := range []bool{false, true} {
		err := Migrate(ctx, e.cat, addColumn(), MigrateOptions{AllowMoving: allow})
		var me *MovesError
		if !errors.As(err, &me) || !errors.Is(err, ErrMovesInProgress) || len(me.Moves) != 1 || me.Moves[0].ID != m.ID || me.Moves[0].State != "reversible" {
			t.Fatalf("AllowMoving %v: err = %v; want a *MovesError naming move %d", allow, err, m.ID)
		}
		if !strings.Contains(err.Error(), "rollback --shard N") {
			t.Fatalf("the refusal does not say what to do: %v", err)
		}
	}
	if n := countVersion(t, e.servers[0].DSN, 2); n != 0 {
		t.Fatalf("%d schemas migrated by a refused run", n)
	}
	pgtest.Exec(t, e.catalogDSN, `UPDATE shardkit.moves SET state = 'rolled_back' WHERE id = $1`, m.ID)
	var during error
	var running bool
	if err := Migrate(ctx, e.cat, addColumn(), MigrateOptions{Progress: func(p Progress) {
		if p.Done == 1 {
			running, _ = e.cat.Moves().ProvisionRunning(ctx)
			_, during = e.cat.Moves().CreateMove(ctx, 6, "pg1", "pg0", "online")
		}
	}}); err != nil {
		t.Fatal(err)
	}
	if !running || !errors.Is(during, catalog.ErrProvisionRunning) {
		t.Fatalf("a move journalled during the migration: err = %v (running %v); want catalog.ErrProvisionRunning", during, running)
	}
	if running, err := e.cat.Moves().ProvisionRunning(ctx); running || err != nil {
		t.Fatalf("after the migration: running %v, %v", running, err)
	}
	if _, err := e.cat.Moves().CreateMove(ctx, 6, "pg1", "pg0", "online"); err != nil {
		t.Fatalf("a move after the migration: %v", err)
	}
}

// TestMigrateDryRunAndServers: a dry run lists what would run where and
// changes nothing; a run limited to one server records nothing in the
// catalog while another lacks the file, and the run that finishes it does.
// Several workers per server under an overall bound migrate every schema.
func TestMigrateDryRunAndServers(t *testing.T) {
	e := newEnv(t, 2)
	ctx := context.Background()
	if err := Provision(ctx, e.cat, ProvisionOptions{Servers: e.servers, Shards: 8, ShardSQL: testSQL}); err != nil {
		t.Fatal(err)
	}
	sum, err := MigrateWithSummary(ctx, e.cat, addColumn(), MigrateOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []PlannedStep{{Server: "pg0", File: "0002_photos_width.sql", Schemas: 4, Ranges: "0-3"},
		{Server: "pg1", File: "0002_photos_width.sql", Schemas: 4, Ranges: "4-7"}}
	if len(sum.Planned) != 2 || sum.Planned[0] != want[0] || sum.Planned[1] != want[1] || sum.Pending != 8 || sum.Schemas != 0 {
		t.Fatalf("dry run: %+v; want %+v", sum, want)
	}
	if n := countVersion(t, e.servers[0].DSN, 2) + countVersion(t, e.servers[1].DSN, 2); n != 0 {
		t.Fatalf("the dry run migrated %d schemas", n)
	}
	sum, err = MigrateWithSummary(ctx, e.cat, addColumn(), MigrateOptions{Servers: []string{"pg0"}})
	if err != nil || sum.Schemas != 4 || len(sum.Recorded) != 0 {
		t.Fatalf("pg0 only: %v, %+v; want 4 schemas and nothing recorded", err, sum)
	}
	if files, _ := e.cat.ShardSQL(ctx); len(files) != 2 {
		t.Fatalf("the catalog records %d files after a run on pg0 only, want 2", len(files))
	}
	sum, err = MigrateWithSummary(ctx, e.cat, addColumn(), MigrateOptions{WorkersPerServer: 3, Workers: 2, Pause: time.Millisecond})
	if err != nil || sum.Schemas != 4 || len(sum.Recorded) != 1 {
		t.Fatalf("the rest: %v, %+v; want pg1's 4 schemas and the file recorded", err, sum)
	}
	checkRecords(t, e.servers, 8, 4)
}

// TestMigrateConcurrentIndexWaits: a concurrent index build waits for
// transactions older than it, which no request queues behind, so it waits
// past the lock timeout, up to BuildLockTimeout; past that, the schema is
// given up naming the old transaction, and the rerun rebuilds the invalid
// index the cut-short build left.
func TestMigrateConcurrentIndexWaits(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	if err := Provision(ctx, e.cat, ProvisionOptions{Servers: e.servers, Shards: 2, ShardSQL: testSQL}); err != nil {
		t.Fatal(err)
	}
	files := photos.With(fstest.MapFS{"0002_photos_caption.sql": {Data: []byte(NoTransactionMarker + "\nCREATE INDEX CONCURRENTLY photos_caption ON photos (caption);")}})
	// oldSnapshot opens a transaction holding a snapshot, as a long report would.
	oldSnapshot := func() (int, pgx.Tx) {
		conn := pgtest.Connect(t, e.servers[0].DSN)
		var pid int
		if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `SELECT count(*) FROM shardkit.shard_migrations`); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(ctx) })
		return pid, tx
	}
	pid, tx := oldSnapshot()
	err := Migrate(ctx, e.cat, files, MigrateOptions{LockTimeout: 20 * time.Millisecond, BuildLockTimeout: 100 * time.Millisecond,
		MaxLockWait: 300 * time.Millisecond, RetryBase: 10 * time.Millisecond})
	var lw *LockWaitError
	if !errors.As(err, &lw) || len(lw.Blockers) == 0 || lw.Blockers[0].PID != pid || lw.Blockers[0].Lock != "an older transaction" {
		t.Fatalf("err = %v; want a *LockWaitError naming pid %d, an older transaction", err, pid)
	}
	_ = tx.Rollback(ctx)

	// Again, with the build's own bound (MaxLockWait) and a 20 ms lock
	// timeout: the build waits out the old transaction.
	_, tx = oldSnapshot()
	watcher := pgtest.Connect(t, e.servers[0].DSN)
	released := make(chan error, 1)
	go func() {
		// The build has waited 10 lock timeouts by the server's clock.
		waited := func() error {
			for deadline := time.Now().Add(30 * time.Second); ; {
				var waiting bool
				err := watcher.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE query LIKE '%CREATE INDEX CONCURRENTLY%'
				AND pid <> pg_backend_pid() AND wait_event_type IS NOT NULL AND now() - query_start > interval '200 ms')`).Scan(&waiting)
				if err != nil || waiting {
					return err
				}
				if time.Now().After(deadline) {
					return errors.New("no build waited 200 ms within 30 s")
				}
				time.Sleep(10 * time.Millisecond) // polling a condition
			}
		}()
		// Rolled back before the test goes on: its cleanup rolls the
		// transaction back too, and a pgx transaction is not for two
		// goroutines at once.
		_ = tx.Rollback(ctx)
		released <- waited
	}()
	sum, err := MigrateWithSummary(ctx, e.cat, files, MigrateOptions{LockTimeout: 20 * time.Millisecond, MaxLockWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	if sum.Retries != 0 || sum.Schemas == 0 || len(sum.Recorded) != 1 {
		t.Fatalf("summary %+v; want the build to wait without a lock timeout, and the file recorded", sum)
	}
	var valid int
	if err := watcher.QueryRow(ctx, `SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE c.relname = 'photos_caption' AND i.indisvalid`).Scan(&valid); err != nil || valid != 2 {
		t.Fatalf("%d valid photos_caption indexes (%v), want 2", valid, err)
	}
}
