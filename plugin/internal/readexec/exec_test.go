package readexec

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver of database/sql

	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/memrows"
)

func TestMain(m *testing.M) { pgtest.Main(m, 1) }

// gens is a plan generation, as a server keeps one.
type gens struct{ n atomic.Int64 }

func (g *gens) Gen() int64 { return g.n.Load() }
func (g *gens) Text(query string, gen int64) string {
	if gen == 0 {
		return query
	}
	return fmt.Sprintf("/* gen %d */ %s", gen, query)
}
func (g *gens) Changed(gen int64) { g.n.CompareAndSwap(gen, gen+1) }

// testConfig runs on pgx's own database/sql driver.
func testConfig() *Config {
	plans := new(gens)
	return &Config{
		Conn: func(dc any) (*pgx.Conn, Plans, bool) {
			c, ok := dc.(interface{ Conn() *pgx.Conn })
			if !ok {
				return nil, nil, false
			}
			return c.Conn(), plans, true
		},
		AsPrepared: pgx.QueryExecModeCacheStatement,
		PerConn:    8,
	}
}

// pool opens a pool of one connection on a fresh database holding t, the
// rows 1..10.
func pool(t *testing.T) *sql.DB {
	t.Helper()
	dsn := pgtest.NewDatabase(t, 0)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = db.Close() })
	if _, err := db.Exec(`CREATE TABLE t AS SELECT g AS a FROM generate_series(1, 10) AS g`); err != nil {
		t.Fatal(err)
	}
	return db
}

// count is a statement counting t's rows above n.
func count(unit int, server string, db *sql.DB, n int, named bool) Stmt {
	st := Stmt{Unit: unit, Server: server, Conn: db, Named: named, SQL: `SELECT count(*) FROM t WHERE a > $1`, Vars: []any{n}}
	if named {
		st.DB = db
	}
	return st
}

func countOf(t *testing.T, pt Partials) int64 {
	t.Helper()
	if len(pt.Rows) != 1 || len(pt.Rows[0]) != 1 {
		t.Fatalf("rows %v; want one count", pt.Rows)
	}
	n, ok := pt.Rows[0][0].(int64)
	if !ok {
		t.Fatalf("count %T; want int64", pt.Rows[0][0])
	}
	return n
}

// Every statement's answer arrives, each server's in plan order, whether
// its statements run one by one or as one pipeline, and the caller sees
// them on its own goroutine.
func TestRunAnswersEveryStatementInServerOrder(t *testing.T) {
	a, b := pool(t), pool(t)
	for _, named := range []bool{false, true} {
		t.Run(fmt.Sprintf("named=%v", named), func(t *testing.T) {
			stmts := []Stmt{count(0, "a", a, 0, named), count(1, "b", b, 1, named), count(2, "a", a, 2, named),
				count(3, "b", b, 3, named), count(4, "a", a, 4, named)}
			for _, serial := range []bool{false, true} {
				x := New(testConfig(), context.Background(), stmts, nil)
				var order []int // take runs on this goroutine alone: -race says so
				x.Run(serial, func(k int) bool {
					order = append(order, k)
					return true
				})
				var onA, onB []int
				for _, k := range order {
					if stmts[k].Server == "a" {
						onA = append(onA, k)
					} else {
						onB = append(onB, k)
					}
				}
				if !slices.Equal(onA, []int{0, 2, 4}) || !slices.Equal(onB, []int{1, 3}) {
					t.Fatalf("serial=%v: answers in order %v; want every statement, each server's in plan order", serial, order)
				}
				for k := range stmts {
					if a := x.Answer(k); a.Err != nil || countOf(t, a.Rows) != int64(10-k) {
						t.Fatalf("serial=%v: statement %d: %v, %v; want count %d", serial, k, a.Rows.Rows, a.Err, 10-k)
					}
				}
			}
		})
	}
}

// A server stops at its first failed statement: its later ones do not
// run, Following names the units it did not read, and Config.Err types
// the failure.
func TestRunStopsAServerAtItsFirstFailure(t *testing.T) {
	a, b := pool(t), pool(t)
	for _, named := range []bool{false, true} {
		t.Run(fmt.Sprintf("named=%v", named), func(t *testing.T) {
			bad := count(1, "a", a, 0, named)
			bad.SQL = `SELECT count(*) / (count(*) - 10) FROM t WHERE a > $1` // division by zero
			stmts := []Stmt{count(0, "a", a, 0, named), bad, count(2, "a", a, 2, named), count(3, "b", b, 3, named)}
			cfg := testConfig()
			typed := errors.New("typed")
			var errOf []int
			cfg.Err = func(_ context.Context, k int, err error, _ time.Duration) error {
				errOf = append(errOf, k)
				return fmt.Errorf("%w: %w", typed, err)
			}
			x := New(cfg, context.Background(), stmts, nil)
			var got []int
			x.Run(true, func(k int) bool { got = append(got, k); return true })
			if !slices.Equal(got, []int{0, 1, 3}) {
				t.Fatalf("answers %v; want 0, 1 (failed) and b's 3: a's statement 2 never runs", got)
			}
			var pe *pgconn.PgError
			if err := x.Answer(1).Err; !errors.Is(err, typed) || !errors.As(err, &pe) || pe.Code != "22012" {
				t.Fatalf("statement 1: %v; want the division by zero (22012) as Config.Err typed it", err)
			}
			if !slices.Equal(errOf, []int{1}) {
				t.Fatalf("Config.Err called for %v; want statement 1 alone", errOf)
			}
			if u := x.Following(1); !slices.Equal(u, []int{1, 2}) {
				t.Fatalf("Following(1) = %v; want units 1 and 2, what a did not read", u)
			}
		})
	}
}

// keepEven drops the rows whose first value is odd, as they arrive.
type keepEven struct{ dropped atomic.Int64 }

type evenCut struct {
	f    *keepEven
	conv ValueFunc
	n    int64
}

func (f *keepEven) Cut(_ []memrows.Column, conv []ValueFunc, _ int) Cut {
	return &evenCut{f: f, conv: conv[0]}
}

func (c *evenCut) Drop(raw [][]byte) bool {
	v, err := c.conv(raw[0])
	if err != nil {
		return false
	}
	if v.(int64)%2 == 1 {
		c.n++
		return true
	}
	return false
}

func (c *evenCut) Done() { c.f.dropped.Add(c.n) }

// A named statement's Filter drops rows as they arrive, before they are
// kept; an unnamed one keeps every row (its rows arrive through
// database/sql, already converted).
func TestFilterDropsRowsOfNamedReads(t *testing.T) {
	db := pool(t)
	f := new(keepEven)
	st := Stmt{Server: "a", Conn: db, DB: db, Named: true, Filter: f, SQL: `SELECT a::bigint FROM t ORDER BY a`}
	x := New(testConfig(), context.Background(), []Stmt{st}, nil)
	x.Run(true, func(int) bool { return true })
	a := x.Answer(0)
	if a.Err != nil || len(a.Rows.Rows) != 5 || f.dropped.Load() != 5 {
		t.Fatalf("rows %v, err %v, dropped %d; want the 5 even rows kept and 5 dropped", a.Rows.Rows, a.Err, f.dropped.Load())
	}
	for _, r := range a.Rows.Rows {
		if r[0].(int64)%2 != 0 {
			t.Fatalf("kept %v; want even values only", a.Rows.Rows)
		}
	}
}
