package plugin

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// pipeAnswer is one answer readPipelined gave.
type pipeAnswer struct {
	i   int
	pt  partials
	err error
}

// pipeDB opens a pool of one connection on server a of a fresh env, with
// the plugin's own connector (prepared reads, plan generations), and a
// table t of rows 1..10 in its database.
func pipeDB(t *testing.T, cfg *Config) (*env, *sql.DB) {
	t.Helper()
	e := newEnv(t, envOpts{shards: 4, one: true})
	if cfg == nil {
		cfg = &Config{}
	}
	db, err := openServer(cfg, "a", e.dsn["a"])
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = db.Close() })
	if _, err := db.Exec(`CREATE TABLE t AS SELECT g AS a FROM generate_series(1, 10) AS g`); err != nil {
		t.Fatal(err)
	}
	return e, db
}

// runPipe runs stmts through readPipelined and returns its answers;
// stopAt, if not negative, is the index whose answer stops the run.
func runPipe(ctx context.Context, db *sql.DB, stmts []pipeStmt, bound time.Duration, stopAt int) []pipeAnswer {
	var got []pipeAnswer
	readPipelined(ctx, db, stmts, bound, func(i int, pt partials, err error) bool {
		got = append(got, pipeAnswer{i, pt, err})
		return i != stopAt
	})
	return got
}

// preparedCount is the number of named statements on db's one
// connection.
func preparedCount(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM pg_prepared_statements`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPipelineEachStatementItsOwnTransaction: a server's statements go
// on one connection, and each runs in a transaction of its own (a Sync
// after each), so a server's lock table holds one statement's locks at a
// time; the answers come in order, each with its own rows.
func TestPipelineEachStatementItsOwnTransaction(t *testing.T) {
	_, db := pipeDB(t, nil)
	const q = `SELECT pg_backend_pid() AS pid, (SELECT virtualxid FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'virtualxid') AS vxid,
		(SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND relation = 't'::regclass) AS t_locks, count(*) AS n FROM t WHERE a <= %d`
	var stmts []pipeStmt
	for i := range 5 {
		stmts = append(stmts, pipeStmt{sql: fmt.Sprintf(q, i+1)})
	}
	for round := range 2 { // preparing, then from the cache
		got := runPipe(context.Background(), db, stmts, 0, -1)
		if len(got) != len(stmts) {
			t.Fatalf("round %d: %d answers, want %d", round, len(got), len(stmts))
		}
		pids, vxids := map[any]bool{}, map[any]bool{}
		for j, a := range got {
			if a.err != nil || a.i != j || len(a.pt.rows) != 1 {
				t.Fatalf("round %d answer %d: statement %d, %d rows, %v", round, j, a.i, len(a.pt.rows), a.err)
			}
			row := a.pt.rows[0]
			pids[row[0]], vxids[row[1]] = true, true
			if row[2] != int64(1) {
				t.Errorf("statement %d holds %v locks on t, want its own one", j, row[2])
			}
			if row[3] != int64(j+1) {
				t.Errorf("statement %d counted %v rows, want %d", j, row[3], j+1)
			}
		}
		if len(pids) != 1 || len(vxids) != len(stmts) {
			t.Fatalf("round %d: %d backends and %d transactions, want 1 and %d", round, len(pids), len(vxids), len(stmts))
		}
	}
	if n := preparedCount(t, db); n != len(stmts) {
		t.Fatalf("%d statements prepared on the connection, want %d", n, len(stmts))
	}
}

// TestPipelineCacheBound: more statements in one run than a pipeline
// carries, and more texts than a connection keeps: every answer is right
// and the connection never holds more than preparedReadsPerConn.
func TestPipelineCacheBound(t *testing.T) {
	_, db := pipeDB(t, nil)
	for round := range 3 {
		var stmts []pipeStmt
		for i := range 2*preparedReadsPerConn + 3 {
			stmts = append(stmts, pipeStmt{sql: fmt.Sprintf(`SELECT count(*) + %d AS n FROM t WHERE a > $1`, round*1000+i), vars: []any{int64(i % 10)}})
		}
		got := runPipe(context.Background(), db, stmts, 0, -1)
		if len(got) != len(stmts) {
			t.Fatalf("round %d: %d answers, want %d", round, len(got), len(stmts))
		}
		for j, a := range got {
			want := int64(round*1000 + j + 10 - j%10)
			if a.err != nil || a.i != j || len(a.pt.rows) != 1 || a.pt.rows[0][0] != want {
				t.Fatalf("round %d answer %d: statement %d, rows %v, %v; want %d", round, j, a.i, a.pt.rows, a.err, want)
			}
		}
		if n := preparedCount(t, db); n > preparedReadsPerConn {
			t.Fatalf("round %d: %d statements prepared on the connection, more than %d", round, n, preparedReadsPerConn)
		}
	}
}

// TestPipelineStatementFails: a statement that fails when it runs, or
// when it is prepared, is answered with the server's error after the
// statements before it, and none after it is answered; the connection
// and its prepared statements serve the next run.
func TestPipelineStatementFails(t *testing.T) {
	_, db := pipeDB(t, nil)
	ok := func(n int) pipeStmt { return pipeStmt{sql: fmt.Sprintf(`SELECT count(*) + %d AS n FROM t`, n)} }
	for _, c := range []struct {
		name string
		bad  pipeStmt
		code string
	}{
		{"running", pipeStmt{sql: `SELECT 1 / (count(*) - 10) AS n FROM t`}, "22012"},
		{"preparing", pipeStmt{sql: `SELECT n FROM no_such_table`}, "42P01"},
		{"arguments", pipeStmt{sql: `SELECT count(*) AS n FROM t WHERE a > $1`, vars: []any{"not a number"}}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			for round := range 2 {
				got := runPipe(context.Background(), db, []pipeStmt{ok(1), ok(2), c.bad, ok(3)}, 0, -1)
				if len(got) != 3 || got[0].err != nil || got[1].err != nil || got[2].i != 2 || got[2].err == nil {
					t.Fatalf("round %d: answers %+v, want two rows then the error", round, got)
				}
				var pe *pgconn.PgError
				if c.code != "" && (!errors.As(got[2].err, &pe) || pe.Code != c.code) {
					t.Fatalf("round %d: %v, want SQLSTATE %s", round, got[2].err, c.code)
				}
				if got[1].pt.rows[0][0] != int64(12) {
					t.Fatalf("round %d: second answer %v", round, got[1].pt.rows)
				}
				again := runPipe(context.Background(), db, []pipeStmt{ok(1), ok(3)}, 0, -1)
				if len(again) != 2 || again[1].err != nil || again[1].pt.rows[0][0] != int64(13) {
					t.Fatalf("round %d: the run after: %+v", round, again)
				}
			}
		})
	}
}

// TestPipelineSameTextTwice: a text met twice in one run is prepared
// once and both statements are answered.
func TestPipelineSameTextTwice(t *testing.T) {
	_, db := pipeDB(t, nil)
	q := pipeStmt{sql: `SELECT count(*) AS n FROM t WHERE a > $1`}
	stmts := []pipeStmt{q, q, q}
	for i := range stmts {
		stmts[i].vars = []any{int64(i)}
	}
	got := runPipe(context.Background(), db, stmts, 0, -1)
	if len(got) != 3 {
		t.Fatalf("%d answers: %+v", len(got), got)
	}
	for i, a := range got {
		if a.err != nil || a.pt.rows[0][0] != int64(10-i) {
			t.Fatalf("answer %d: %v, %v", i, a.pt.rows, a.err)
		}
	}
	if n := preparedCount(t, db); n != 1 {
		t.Fatalf("%d statements prepared, want 1", n)
	}
}

// TestPipelineStops: an answer that stops the run stops it there, and
// the connection serves the next run.
func TestPipelineStops(t *testing.T) {
	_, db := pipeDB(t, nil)
	var stmts []pipeStmt
	for i := range 6 {
		stmts = append(stmts, pipeStmt{sql: fmt.Sprintf(`SELECT count(*) + %d AS n FROM t`, i)})
	}
	if got := runPipe(context.Background(), db, stmts, 0, 1); len(got) != 2 {
		t.Fatalf("%d answers, want 2 (stopped at the second)", len(got))
	}
	if got := runPipe(context.Background(), db, stmts, 0, -1); len(got) != 6 || got[5].err != nil || got[5].pt.rows[0][0] != int64(15) {
		t.Fatalf("the run after: %+v", got)
	}
}

// TestPipelineBound: a statement the server does not answer within the
// bound is answered with errBoundPassed after those before it, and the
// pool serves the next run on a new connection.
func TestPipelineBound(t *testing.T) {
	_, db := pipeDB(t, nil)
	stmts := []pipeStmt{
		{sql: `SELECT count(*) AS n FROM t`},
		{sql: `SELECT count(*) AS n FROM t, pg_sleep(60)`},
		{sql: `SELECT count(*) + 1 AS n FROM t`},
	}
	start := time.Now()
	got := runPipe(context.Background(), db, stmts, time.Second, -1)
	if len(got) != 2 || got[0].err != nil || !errors.Is(got[1].err, errBoundPassed) {
		t.Fatalf("answers %+v, want one row then errBoundPassed", got)
	}
	if took := time.Since(start); took > 40*time.Second {
		t.Fatalf("the bound of 1s took %v to stop the sleeping statement", took)
	}
	if again := runPipe(context.Background(), db, stmts[2:], time.Minute, -1); len(again) != 1 || again[0].err != nil {
		t.Fatalf("the run after: %+v", again)
	}
}

// TestPipelineStalePlan: a column added under statements prepared on the
// connection: every statement of the next run answers with the new
// column (the stale one run unnamed, the rest prepared afresh in the
// next plan generation).
func TestPipelineStalePlan(t *testing.T) {
	_, db := pipeDB(t, nil)
	var stmts []pipeStmt
	for i := range 4 {
		stmts = append(stmts, pipeStmt{sql: fmt.Sprintf(`SELECT * FROM t WHERE a = %d`, i+1)})
	}
	if got := runPipe(context.Background(), db, stmts, 0, -1); len(got) != 4 || got[3].err != nil {
		t.Fatalf("before the change: %+v", got)
	}
	if _, err := db.Exec(`ALTER TABLE t ADD COLUMN b text DEFAULT 'new'`); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		got := runPipe(context.Background(), db, stmts, 0, -1)
		if len(got) != 4 {
			t.Fatalf("round %d: %d answers: %+v", round, len(got), got)
		}
		for j, a := range got {
			if a.err != nil || len(a.pt.rows) != 1 || len(a.pt.cols) != 2 || a.pt.rows[0][1] != "new" {
				t.Fatalf("round %d answer %d: %v %v, %v", round, j, a.pt.cols, a.pt.rows, a.err)
			}
		}
	}
}
