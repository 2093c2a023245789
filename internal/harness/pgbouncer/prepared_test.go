package pgbouncer

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// showConfig returns one of PgBouncer's settings ("" when it has none of
// that name) from its admin console.
func showConfig(t *testing.T, ctx context.Context, b *Bouncer, name string) string {
	t.Helper()
	admin, err := pgx.Connect(ctx, b.DSN("pgbouncer"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	rows, err := admin.Query(ctx, "SHOW CONFIG", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		if vals[0] == name {
			return vals[1].(string)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ""
}

// TestPreparedStatements: a PgBouncer asked for prepared statements is
// 1.21 or later with max_prepared_statements set, and two clients
// preparing statements of the same name but different text on its one
// server connection each get their own; one not asked for carries none.
func TestPreparedStatements(t *testing.T) {
	if _, err := PreparedBinary(); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, b := start(t, ctx, Options{PreparedStatements: 10, Settings: map[string]string{"default_pool_size": "1"}})
	if got := showConfig(t, ctx, b, "max_prepared_statements"); got != "10" {
		t.Fatalf("max_prepared_statements = %q, want 10", got)
	}
	var conns [2]*pgx.Conn
	for i := range conns {
		c, err := pgx.Connect(ctx, b.DSN("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		conns[i] = c
	}
	for round := range 3 {
		for i, c := range conns {
			// Same name, different text and result type: behind a
			// pooler that passed names through, the second would meet
			// the first's on the shared server connection.
			sql := map[int]string{0: "SELECT $1::text || 'x'", 1: "SELECT length($1::text)"}[i]
			if _, err := c.Prepare(ctx, "s", sql); err != nil {
				t.Fatalf("round %d, client %d: prepare: %v", round, i, err)
			}
			var got any
			if err := c.QueryRow(ctx, "s", "41").Scan(&got); err != nil {
				t.Fatalf("round %d, client %d: %v", round, i, err)
			}
			if want := map[int]any{0: "41x", 1: int32(2)}[i]; got != want {
				t.Fatalf("round %d, client %d: %v, want %v", round, i, got, want)
			}
		}
	}

	plain, err := Start(ctx, Options{Port: b.opts.Port})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Stop()
	if got := showConfig(t, ctx, plain, "max_prepared_statements"); got != "" && got != "0" {
		t.Fatalf("without PreparedStatements: max_prepared_statements = %q, want 0 or none (PgBouncer before 1.21)", got)
	}
}
