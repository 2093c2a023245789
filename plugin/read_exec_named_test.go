package plugin

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"testing"
)

// TestReadNamedAsDatabaseSQL runs statements of every kind of column
// through readNamed and through readAll (database/sql and pgx's driver,
// prepared the same way) on one pool of the plugin's own connector: the
// columns described and every value read must be the same, NULLs,
// infinities and empty values among them, with arguments and without.
func TestReadNamedAsDatabaseSQL(t *testing.T) {
	e := newEnv(t, envOpts{shards: 4, one: true})
	db, err := openServer(&Config{}, "a", e.dsn["a"])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	const row = `SELECT %s::bool b, %s::bytea by, %s::oid o, %s::date d, %s::float4 f4, %s::float8 f8,
	%s::int2 i2, %s::int4 i4, %s::int8 i8, %s::json j, %s::jsonb jb, %s::timestamp ts, %s::timestamptz tz,
	%s::xml x, %s::numeric n, %s::uuid u, %s::text t, %s::varchar(5) v, %s::interval iv, %s::inet ip,
	%s::int[] arr, %s::text[] tarr, %s::"char" c, %s::xid xi, %s::cid ci, %s::time tm, %s::bpchar bp`
	rows := [][]string{
		{"true", `'\xdeadbeef'`, "42", "'2024-02-29'", "1.5", "'NaN'", "7", "8", "9", `'{"a":1}'`, `'{"a": 1}'`,
			"'2024-01-02 03:04:05.123456'", "'2024-01-02 03:04:05+02'", "'<a/>'", "12345678901234567890.123",
			"'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "'héllo'", "'v'", "'1 day 2 hours'", "'10.0.0.1/8'",
			"ARRAY[1,2]", "ARRAY['x','y z']", "'q'", "'123'", "'4'", "'12:34:56.789'", "'ab'"},
		{"false", `''`, "0", "'infinity'", "'-Infinity'", "'Infinity'", "(-32768)", "(-2147483648)",
			"(-9223372036854775808)", "'[]'", "'null'", "'-infinity'", "'infinity'", "''", "'NaN'",
			"'00000000-0000-0000-0000-000000000000'", "''", "''", "'-1 mon'", "'::1'",
			"ARRAY[]::int[]", "ARRAY[NULL]::text[]", "''", "'0'", "'0'", "'00:00'", "''"},
		{"NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL",
			"NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL"},
	}
	var text string
	for i, r := range rows {
		if i > 0 {
			text += " UNION ALL "
		}
		args := make([]any, len(r))
		for j, v := range r {
			args[j] = v
		}
		text += fmt.Sprintf(row, args...)
	}
	ctx := context.Background()
	for _, c := range []struct {
		name string
		sql  string
		vars []any
	}{
		{"every type", text, nil},
		{"arguments", "SELECT $1::int8 AS a, $2::text AS b, $3::timestamptz AS c WHERE $1::int8 > 0", []any{int64(5), "x", "2024-01-02T03:04:05Z"}},
		{"no rows", "SELECT 1 AS a WHERE false", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			want, err := readAll(ctx, db, c.sql, append([]any{asPrepared}, c.vars...))
			if err != nil {
				t.Fatal(err)
			}
			// Twice: preparing the statement, then from the cache.
			for range 2 {
				got, err := readNamed(ctx, db, c.sql, c.vars, nil, 0)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got.cols, want.cols) {
					t.Fatalf("columns\n got %v\nwant %v", got.cols, want.cols)
				}
				if len(got.rows) != len(want.rows) {
					t.Fatalf("%d rows, want %d", len(got.rows), len(want.rows))
				}
				for i := range want.rows {
					for j := range want.rows[i] {
						g, w := got.rows[i][j], want.rows[i][j]
						gf, gok := g.(float64)
						wf, wok := w.(float64)
						if gok && wok && math.IsNaN(gf) && math.IsNaN(wf) {
							continue
						}
						if !reflect.DeepEqual(g, w) {
							t.Errorf("row %d column %s: %#v (%T), want %#v (%T)", i, want.cols[j].Name, g, g, w, w)
						}
					}
				}
			}
		})
	}
	// Bytes handed out are the caller's: a later read does not change
	// them.
	first, err := readNamed(ctx, db, text, nil, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	keep := append([]byte(nil), first.rows[0][1].([]byte)...)
	if _, err := readNamed(ctx, db, text, nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first.rows[0][1], keep) {
		t.Fatalf("bytea value changed by a later read: %x, was %x", first.rows[0][1], keep)
	}
}
