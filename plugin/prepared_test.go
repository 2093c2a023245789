package plugin

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/shardkit/shardkit/internal/harness/pgbouncer"
)

// preparedOn counts the named statements of reads across shards on the
// one connection of a server's pool (the environment opens one per
// server): those of one shard (pgx's names for them, stmt_…) are not
// counted.
func (e *env) preparedOn(t *testing.T, server string) int {
	t.Helper()
	srv, err := e.p.pools.get(e.r.Snapshot(), server)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := srv.QueryRowContext(context.Background(), `SELECT count(*) FROM pg_prepared_statements WHERE name NOT LIKE 'shardkit\_one\_%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPreparedReadsDirect: on direct connections a read across shards
// runs as named prepared statements, one per union, and a connection
// keeps at most preparedReadsPerConn of them however many read shapes
// run; statements of one shard are kept apart (shardStmts).
func TestPreparedReadsDirect(t *testing.T) {
	e := newEnv(t, envOpts{shards: 40, cfg: func(c *Config) { c.MaxOpenConns = 1 }})
	var mu sync.Mutex
	named, unnamed := 0, 0
	e.p.running = func(st *readStmt) {
		mu.Lock()
		defer mu.Unlock()
		if st.named {
			named++
		} else {
			unnamed++
		}
	}
	e.p.unionBatch = 5 // four unions per server
	defer func() { e.p.unionBatch = 0 }()
	if err := e.db.Create(&Photo{UserID: 7}).Error; err != nil {
		t.Fatal(err)
	}
	var ps []Photo
	if err := e.db.Clauses(AllShards()).Order("id desc").Limit(3).Find(&ps).Error; err != nil || len(ps) != 1 {
		t.Fatalf("read: %v, %d rows", err, len(ps))
	}
	if named != 8 || unnamed != 0 {
		t.Fatalf("%d named and %d unnamed statements, want 8 named (4 unions on each of 2 servers)", named, unnamed)
	}
	for _, s := range e.servers {
		if n := e.preparedOn(t, s); n != 4 {
			t.Errorf("server %s: %d named statements on its connection, want 4", s, n)
		}
	}
	if err := e.db.Where("user_id = ?", 7).Find(&ps).Error; err != nil {
		t.Fatal(err)
	}
	// Read shapes enough to overflow the cache: the oldest are
	// deallocated, the connection keeps the bound.
	for i := range preparedReadsPerConn {
		var n int64
		if err := e.db.Clauses(AllShards()).Model(&Photo{}).Where(fmt.Sprintf("likes > %d", i)).Count(&n).Error; err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range e.servers {
		if n := e.preparedOn(t, s); n > preparedReadsPerConn {
			t.Errorf("server %s: %d named statements on its connection, more than %d", s, n, preparedReadsPerConn)
		}
	}
}

// TestPreparedReadsPooled: behind a PgBouncer that does not carry
// prepared statements (the app DSN is the pooler's, the admin DSN the
// server's), reads across shards run unnamed, and with PreparedReadsNever
// they do on direct connections too.
func TestPreparedReadsPooled(t *testing.T) {
	for _, c := range []struct {
		name string
		o    envOpts
	}{
		{"pooled", envOpts{appDSN: viaPooler(t, pgbouncer.Options{})}},
		{"never", envOpts{cfg: func(c *Config) { c.PreparedReads = PreparedReadsNever }}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, c.o)
			var mu sync.Mutex
			named := 0
			e.p.running = func(st *readStmt) {
				mu.Lock()
				defer mu.Unlock()
				if st.named {
					named++
				}
			}
			var n int64
			for range 3 {
				if err := e.db.Clauses(AllShards()).Model(&Photo{}).Count(&n).Error; err != nil {
					t.Fatal(err)
				}
			}
			if named != 0 {
				t.Fatalf("%d named statements, want none", named)
			}
		})
	}
}

// TestPreparedReadsSurviveSchemaChange: a read across shards prepared on
// a connection before a column is added to every shard (a SELECT * of
// map rows, whose result type the change alters) runs again after it:
// the stale statement is run unnamed once and prepared anew.
func TestPreparedReadsSurviveSchemaChange(t *testing.T) {
	e := newEnv(t, envOpts{cfg: func(c *Config) { c.MaxOpenConns = 1 }})
	if err := e.db.Create(&[]Photo{{UserID: 1}, {UserID: 2}}).Error; err != nil {
		t.Fatal(err)
	}
	read := func() ([]map[string]any, error) {
		var out []map[string]any
		err := e.db.Model(&Photo{}).Clauses(AllShards()).Order("id").Find(&out).Error
		return out, err
	}
	if _, err := read(); err != nil {
		t.Fatal(err)
	}
	e.addNoteColumn(t)
	for range 2 {
		out, err := read()
		if err != nil {
			t.Fatalf("read after the column was added: %v", err)
		}
		if len(out) != 2 || out[0]["note"] != "new" {
			t.Fatalf("read after the column was added: %v", out)
		}
	}
}

// addNoteColumn adds a column to every shard's photos table on every
// server, as a migration would: the schema change a prepared read's cached
// statement must survive.
func (e *env) addNoteColumn(t *testing.T) {
	t.Helper()
	for _, s := range e.servers {
		e.rawExec(t, s, `DO $$
DECLARE s text;
BEGIN
  FOR s IN SELECT nspname FROM pg_namespace WHERE nspname LIKE 'shard\_%' LOOP
    EXECUTE format('ALTER TABLE %I.photos ADD COLUMN note text DEFAULT ''new''', s);
  END LOOP;
END $$`)
	}
}
