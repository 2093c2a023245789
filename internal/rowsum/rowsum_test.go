package rowsum

import (
	"context"
	"testing"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m, 1) }

func TestQueryQuotes(t *testing.T) {
	for _, c := range []struct{ name, schema, table, want string }{
		{"plain", "shard_0001", "photos", `SELECT ` + columns + ` FROM "shard_0001"."photos" AS r`},
		{"quote in a name", "shard_0001", `we"ird`, `SELECT ` + columns + ` FROM "shard_0001"."we""ird" AS r`},
		{"upper case and space", "shard_0001", "My Table", `SELECT ` + columns + ` FROM "shard_0001"."My Table" AS r`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Query(c.schema, c.table); got != c.want {
				t.Errorf("Query(%q, %q) = %s, want %s", c.schema, c.table, got, c.want)
			}
		})
	}
}

// TestSumAgreesAcrossOrderAndSettings sums the same rows inserted in two
// orders, under two time zones and date styles: the sums agree, and a
// changed row changes the sum. Format, run on the server, gives Query's.
func TestSumAgreesAcrossOrderAndSettings(t *testing.T) {
	ctx := context.Background()
	conn := pgtest.Connect(t, pgtest.NewDatabase(t, 0))
	for _, sql := range []string{
		`CREATE SCHEMA s`,
		`CREATE TABLE s.a (id bigint, at timestamptz, f float8, b bytea, i interval)`,
		`CREATE TABLE s."B b" (LIKE s.a)`,
		`INSERT INTO s.a SELECT g, '2026-01-01 00:00:00+00'::timestamptz + g * interval '1 hour', g / 3.0, int8send(g), g * interval '1 minute' FROM generate_series(1, 500) g`,
		`INSERT INTO s."B b" SELECT * FROM s.a ORDER BY id DESC`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	sum := func(zone, style, table string) (int64, string) {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		// The session's own settings, then Settings over them.
		if _, err := tx.Exec(ctx, "SET LOCAL TimeZone = '"+zone+"'; SET LOCAL DateStyle = '"+style+"'; "+Settings); err != nil {
			t.Fatal(err)
		}
		var n int64
		var s, viaFormat string
		if err := tx.QueryRow(ctx, Query("s", table)).Scan(&n, &s); err != nil {
			t.Fatal(err)
		}
		var stmt string
		if err := tx.QueryRow(ctx, "SELECT "+Format("$1::text", "$2::text"), "s", table).Scan(&stmt); err != nil {
			t.Fatal(err)
		}
		var n2 int64
		if err := tx.QueryRow(ctx, stmt).Scan(&n2, &viaFormat); err != nil {
			t.Fatal(err)
		}
		if n2 != n || viaFormat != s {
			t.Errorf("Format's statement %s gave %d/%s, Query's %d/%s", stmt, n2, viaFormat, n, s)
		}
		return n, s
	}
	n1, s1 := sum("UTC", "ISO, YMD", "a")
	n2, s2 := sum("Asia/Kolkata", "SQL, DMY", "B b")
	if n1 != 500 || n1 != n2 || s1 != s2 {
		t.Errorf("same rows: %d rows sum %s, then %d rows sum %s", n1, s1, n2, s2)
	}
	if _, err := conn.Exec(ctx, `UPDATE s."B b" SET f = f + 1 WHERE id = 7`); err != nil {
		t.Fatal(err)
	}
	if _, s3 := sum("UTC", "ISO, YMD", "B b"); s3 == s1 {
		t.Errorf("a changed row left the sum at %s", s3)
	}
}
