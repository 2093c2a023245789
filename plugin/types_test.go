package plugin

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/internal/harness/pgbouncer"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/router"
)

// Reads across shards of columns whose Postgres order is not their Go
// field's (numeric, enum, inet, interval, citext read as strings), of
// NULLs read into fields that cannot hold them, and of an enum each
// shard's schema defines for itself; each compared with plain GORM on
// one table of the same rows.

// Gauge is a model whose every column but its keys is read as a Go type
// that does not order as the column does.
type Gauge struct {
	ID     int64
	UserID int64  `shard:"key"`
	Price  string // numeric
	Points int64  // integer, nullable: NULL reads as 0
	Mood   string // an enum of each shard's schema: sad < ok < happy
	Addr   string // inet
	Span   string // interval
	Tag    string // citext
	Name   string // text, nullable
	Nick   string // text in a case-insensitive collation
	Label  string // text in an ICU collation
	Doc    string // jsonb
	Raw    []byte // bytea
	Nums   string // integer[]
	Day    string // date
	Big    *float64
	Grade  *int64  // a domain over integer
	Pair   *string // a composite
}

// gaugesDDL is the gauges table, in the schema the search_path names.
const gaugesDDL = `CREATE TABLE gauges (
    id      bigint PRIMARY KEY,
    user_id bigint NOT NULL,
    price   numeric NOT NULL,
    points  integer,
    mood    MOOD,
    addr    inet,
    span    interval,
    tag     public.citext,
    name    text,
    nick    text COLLATE public.ci,
    label   text COLLATE "en-x-icu",
    doc     jsonb,
    raw     bytea,
    nums    integer[],
    day     date,
    big     bigint,
    grade   GRADE,
    pair    PAIR
);
`

// gaugePtr, gaugeNull and gaugeScan read the gauges into pointer,
// sql.Null* and custom Scanner fields.
type gaugePtr struct {
	ID     int64
	Price  *string
	Points *int64
	Mood   *string
}

type gaugeNull struct {
	ID     int64
	Points sql.NullInt64
	Name   sql.NullString
}

type gaugeOther struct {
	ID   int64
	Doc  *string
	Raw  []byte
	Nums *string
	Day  *string
	Big  *float64
}

type gaugeScan struct {
	ID     int64
	Points scanned
}

// scanned is a custom Scanner that keeps the text of what it scans.
type scanned struct{ s string }

func (s *scanned) Scan(v any) error {
	if v == nil {
		s.s = "NULL"
		return nil
	}
	s.s = fmt.Sprint(v)
	return nil
}

func (s scanned) Value() (driver.Value, error) { return s.s, nil }

// gaugeRows are the rows: prices whose text order is not their value's,
// NULLs in points, every mood out of its text order.
func gaugeRows(n int) [][]any {
	prices := []string{"9.5", "100.5", "10", "2.25", "1000", "-3", "99.99"}
	moods := []any{"happy", "sad", "ok", nil}
	addrs := []string{"10.0.0.2", "9.0.0.1", "192.168.1.1", "10.0.0.10", "::1"}
	spans := []string{"1 day", "25 hours", "2 hours", "1 mon", "30 days"}
	tags := []string{"Alice", "alice", "Bob", "ALICE", "bob", "carol"}
	names := []string{"apple", "Banana", "_x", "Apple", "zed", "Zed", "éclair"}
	var rows [][]any
	for i := range n {
		var points any = int64((i * 7) % 5)
		if i%3 == 0 {
			points = nil
		}
		var name any = fmt.Sprintf("%s%02d", names[i%len(names)], (i*11)%17)
		if i%4 == 1 {
			name = nil
		}
		rows = append(rows, []any{int64(2000 + i*13), prices[i%len(prices)], points, moods[i%len(moods)],
			addrs[i%len(addrs)], spans[i%len(spans)], tags[i%len(tags)], name})
	}
	return rows
}

// typesEnv is a plugin on two servers of 8 shards holding the gauges,
// and plain GORM on one table of the same rows.
type typesEnv struct {
	e     *env
	plain *gorm.DB
}

// moodDDL is the mood enum, made in the schema the search_path names.
const moodDDL = "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');\n" +
	"CREATE DOMAIN grade AS integer CHECK (VALUE >= 0);\n" +
	"CREATE TYPE pair AS (a integer, b text);\n"

// sharedDDL is what the gauges need in public: citext and a
// case-insensitive collation.
const sharedDDL = `CREATE EXTENSION IF NOT EXISTS citext SCHEMA public;
CREATE COLLATION IF NOT EXISTS public.ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
`

// typedDDL is gaugesDDL with its types of the schema prefix names
// ("public." or "" for the search_path's).
func typedDDL(prefix string) string {
	return strings.NewReplacer("MOOD", prefix+"mood", "GRADE", prefix+"grade", "PAIR", prefix+"pair").Replace(gaugesDDL)
}

// icuDDL gives every text column the database's default collation.
func icuDDL(ddl string) string {
	return strings.NewReplacer(" COLLATE public.ci", "", ` COLLATE "en-x-icu"`, "").Replace(ddl)
}

// newTypesEnv makes the environment; perSchema makes the mood enum in
// every shard's schema (as per-shard SQL does), else once in public.
func newTypesEnv(t *testing.T, pooled, perSchema bool) *typesEnv {
	return newTypesEnvOn(t, pooled, perSchema, false)
}

// newTypesEnvOn is newTypesEnv, on databases whose default collation is
// ICU's (both sides) when icu is set.
func newTypesEnvOn(t *testing.T, pooled, perSchema, icu bool) *typesEnv {
	t.Helper()
	ctx := context.Background()
	o := envOpts{shards: 8, models: []any{&Gauge{}}, before: func(e *env) {
		for _, srv := range e.servers {
			conn := pgtest.Connect(t, e.dsn[srv])
			rows, err := conn.Query(ctx, `SELECT table_schema FROM information_schema.tables WHERE table_name = 'photos' ORDER BY 1`)
			if err != nil {
				t.Fatal(err)
			}
			schemas, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			b.WriteString(sharedDDL)
			ddl := typedDDL("public.")
			if perSchema {
				ddl = moodDDL + typedDDL("")
			} else {
				b.WriteString("SET search_path = public;\n" + moodDDL)
			}
			if icu {
				ddl = icuDDL(ddl)
			}
			for _, s := range schemas {
				b.WriteString("SET search_path = " + pgx.Identifier{s}.Sanitize() + ";\n" + ddl)
			}
			b.WriteString("RESET search_path;\n")
			pgtest.Exec(t, e.dsn[srv], b.String())
		}
	}}
	if pooled {
		o.appDSN = viaPooler(t, pgbouncer.Options{})
	}
	plainDSN := ""
	if icu {
		dsn := map[string]string{"a": icuDatabase(t, 0), "b": icuDatabase(t, 1)}
		o.dsnOf = func(server string) string { return dsn[server] }
		plainDSN = icuDatabase(t, 0)
	} else {
		plainDSN = pgtest.NewDatabase(t, 0)
	}
	te := &typesEnv{e: newEnv(t, o)}
	plainDDL := sharedDDL + moodDDL + typedDDL("")
	if icu {
		plainDDL = icuDDL(plainDDL)
	}
	pgtest.Exec(t, plainDSN, plainDDL)
	var err error
	if te.plain, err = gorm.Open(postgres.Open(plainDSN), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)}); err != nil {
		t.Fatal(err)
	}
	if sqlDB, err := te.plain.DB(); err == nil {
		t.Cleanup(func() { _ = sqlDB.Close() })
	}
	const insert = `INSERT INTO %s (id, user_id, price, points, mood, addr, span, tag, name, nick, label, doc, raw, nums, day, big, grade, pair)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::jsonb, $13::bytea, $14::integer[], $15::date, $16, $17::integer, $18)`
	docs := []any{`{"a": 1}`, `[1, 2]`, `"x"`, `{"b": {"c": null}}`, nil, `2`, `{"a": 0.5}`}
	raws := []any{`\x00ff`, `\x7f`, `\x`, nil, `\x0001`, `\xff`}
	arrays := []any{"{1,2}", "{10}", "{2}", "{}", nil, "{1,NULL}", "{-1,5,6}"}
	days := []any{"2024-01-10", "999-12-31 BC", "infinity", "2023-12-31", "-infinity", "10000-01-01", nil}
	bigs := []any{int64(9007199254740993), int64(9007199254740992), int64(-3), nil, int64(1) << 60}
	grades := []any{int64(5), int64(0), nil, int64(12), int64(5), int64(3)}
	pairs := []any{"(1,x)", "(10,a)", "(2,b)", nil, "(1,)", "(-1,z)", "(2,a)"}
	plain := pgtest.Connect(t, plainDSN)
	for i, r := range gaugeRows(40) {
		user := int64(1000 + 37*i)
		shard := te.e.shardOf(user)
		args := append(append([]any{r[0], user}, r[1:]...), r[6], r[7], docs[i%len(docs)], raws[i%len(raws)], arrays[i%len(arrays)], days[i%len(days)], bigs[i%len(bigs)], grades[i%len(grades)], pairs[i%len(pairs)])
		conn := pgtest.Connect(t, te.e.dsn[te.e.serverOf(t, shard)])
		if _, err := conn.Exec(ctx, fmt.Sprintf(insert, pgx.Identifier{router.SchemaName(shard), "gauges"}.Sanitize()), args...); err != nil {
			t.Fatal(err)
		}
		if _, err := plain.Exec(ctx, fmt.Sprintf(insert, "gauges"), args...); err != nil {
			t.Fatal(err)
		}
	}
	return te
}

func gaugesAll(db *gorm.DB) *gorm.DB { return db.Clauses(AllShards()).Model(&Gauge{}) }

// into reads q into a slice of T, as text.
func into[T any](q func(db *gorm.DB) *gorm.DB) func(db *gorm.DB) (any, error) {
	return func(db *gorm.DB) (any, error) {
		var rows []T
		err := q(db).Find(&rows).Error
		out := make([]string, len(rows))
		for i, r := range rows {
			out[i] = canonRow(reflect.ValueOf(r))
		}
		return strings.Join(out, "\n"), err
	}
}

// canonRow is a row's fields as text, pointers read through.
func canonRow(rv reflect.Value) string {
	var b strings.Builder
	for i := range rv.NumField() {
		f := rv.Field(i)
		if f.Kind() == reflect.Pointer {
			if f.IsNil() {
				fmt.Fprintf(&b, "%s:<nil> ", rv.Type().Field(i).Name)
				continue
			}
			f = f.Elem()
		}
		fmt.Fprintf(&b, "%s:%+v ", rv.Type().Field(i).Name, f.Interface())
	}
	return b.String()
}

// typedReads are the reads across shards of the gauges that equal plain
// GORM's.
var typedReads = []exactRead{
	{"Offset with Limit(-1)", into[Gauge](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("id").Offset(2).Limit(-1) })},
	{"Limit(-1) alone", into[Gauge](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("id").Limit(-1) })},
	{"Limit(0)", into[Gauge](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("id").Limit(0) })},
	{"Offset alone", into[Gauge](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("id").Offset(3) })},
	{"Offset past the rows", into[Gauge](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("id").Offset(100).Limit(-1) })},
	{"distinct rows, Offset with Limit(-1)", func(db *gorm.DB) (any, error) {
		var rows []map[string]any
		err := gaugesAll(db).Distinct("price").Order("price").Offset(2).Limit(-1).Find(&rows).Error
		return typedRows(rows), err
	}},
	{"groups, Offset with Limit(-1)", func(db *gorm.DB) (any, error) {
		var rows []map[string]any
		err := gaugesAll(db).Select("price, count(*) AS n").Group("price").Order("price desc").Offset(1).Limit(-1).Find(&rows).Error
		return typedRows(rows), err
	}},
	{"distinct rows, Limit(0)", func(db *gorm.DB) (any, error) {
		var rows []map[string]any
		err := gaugesAll(db).Distinct("price").Order("price").Limit(0).Find(&rows).Error
		return typedRows(rows), err
	}},
	{"numeric read as string, top three", into[Gauge](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("price desc, id").Limit(3) })},
	{"numeric read as string, every row", into[Gauge](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("price, id") })},
	{"numeric into a pointer", into[gaugePtr](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("price, id desc").Limit(6) })},
	{"nullable integer into int64", into[Gauge](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("points, id") })},
	{"nullable integer into int64, descending, paged", into[Gauge](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("points desc, id").Limit(7).Offset(2) })},
	{"nullable integer, NULLS FIRST", into[Gauge](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("points nulls first, id").Limit(9) })},
	{"nullable integer into a pointer", into[gaugePtr](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("points, id").Limit(20) })},
	{"nullable integer into sql.NullInt64", into[gaugeNull](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("points desc, name, id").Limit(20) })},
	{"nullable integer into a Scanner", into[gaugeScan](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("points, id") })},
	{"nullable text into string", into[Gauge](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("name, id").Limit(12) })},
	{"per-schema enum, every row", into[Gauge](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("id") })},
	{"per-schema enum, no order", func(db *gorm.DB) (any, error) {
		var n int64
		var rows []Gauge
		err := gaugesAll(db).Find(&rows).Error
		n = int64(len(rows))
		return n, err
	}},
	{"ordered by a per-schema enum", into[Gauge](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("mood desc, id").Limit(11) })},
	{"ordered by a per-schema enum into pointers", into[gaugePtr](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("mood, id") })},
	{"inet read as string", into[Gauge](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("addr, id").Limit(8) })},
	{"interval read as string", into[Gauge](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("span desc, id").Limit(8) })},
	{"citext read as string", into[Gauge](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("tag, id").Limit(10) })},
	{"plucked numeric", func(db *gorm.DB) (any, error) {
		var out []string
		err := gaugesAll(db).Order("price desc").Limit(5).Pluck("price", &out).Error
		return out, err
	}},
	{"maps ordered by text in an ICU collation", func(db *gorm.DB) (any, error) {
		var rows []map[string]any
		err := gaugesAll(db).Select("id, label, name, price").Order("label, id").Limit(10).Find(&rows).Error
		return typedRows(rows), err
	}},
	{"maps of a few columns ordered by text in an ICU collation", func(db *gorm.DB) (any, error) {
		var rows []map[string]any
		err := gaugesAll(db).Select("id, label").Order("label desc, id").Find(&rows).Error
		return typedRows(rows), err
	}},
	{"min and max of text in an ICU collation", func(db *gorm.DB) (any, error) {
		var rows []map[string]any
		err := gaugesAll(db).Select("min(label) AS lo, max(label) AS hi, count(*) AS n").Find(&rows).Error
		return typedRows(rows), err
	}},
	{"min of text in an ICU collation into a struct", func(db *gorm.DB) (any, error) {
		var out struct{ Lo, Hi string }
		err := gaugesAll(db).Select("min(label) AS lo, max(label) AS hi").Scan(&out).Error
		return out.Lo + "|" + out.Hi, err
	}},
	{"min and max of text in an ICU collation per group", func(db *gorm.DB) (any, error) {
		var rows []map[string]any
		err := gaugesAll(db).Select("points, min(label) AS lo, max(label) AS hi").Group("points").Order("lo, points").Find(&rows).Error
		return typedRows(rows), err
	}},
	{"Scan into maps ordered by text in an ICU collation", func(db *gorm.DB) (any, error) {
		var rows []map[string]any
		err := gaugesAll(db).Select("id, label, price").Order("label, id").Limit(7).Scan(&rows).Error
		return typedRows(rows), err
	}},
	{"Rows ordered by text in an ICU collation", func(db *gorm.DB) (any, error) {
		rows, err := gaugesAll(db).Select("id, label").Order("label desc, id").Limit(9).Rows()
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var id int64
			var label *string
			if err := rows.Scan(&id, &label); err != nil {
				return nil, err
			}
			if label == nil {
				out = append(out, fmt.Sprint(id, " NULL"))
				continue
			}
			out = append(out, fmt.Sprint(id, " ", *label))
		}
		return out, rows.Err()
	}},
	{"plucked text in an ICU collation", func(db *gorm.DB) (any, error) {
		var out []string
		// NULLs left out: a shard read alone (a per-schema type) scans
		// its rows before the page is cut, and NULL does not scan into a
		// string
		err := gaugesAll(db).Where("label IS NOT NULL").Order("label").Limit(6).Pluck("label", &out).Error
		return out, err
	}},
	{"min of text in an ICU collation, one Row", func(db *gorm.DB) (any, error) {
		var lo, hi string
		err := gaugesAll(db).Select("min(label), max(label)").Row().Scan(&lo, &hi)
		return lo + "|" + hi, err
	}},
	{"jsonb read as string", into[gaugeOther](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("doc, id").Limit(12) })},
	{"bytea, descending", into[gaugeOther](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("raw desc, id").Limit(12) })},
	{"an integer array read as string", into[gaugeOther](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("nums, id").Limit(12) })},
	{"a date read as string", into[gaugeOther](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("day desc, id").Limit(12) })},
	{"bigint into a *float64", into[gaugeOther](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("big, id").Limit(12) })},
	{"maps ordered by jsonb, bytea and an array", func(db *gorm.DB) (any, error) {
		var rows []map[string]any
		err := gaugesAll(db).Select("id, doc, raw, nums").Order("doc desc, raw, nums, id").Limit(10).Find(&rows).Error
		return typedRows(rows), err
	}},
	{"a domain over integer", into[Gauge](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("grade desc, id").Limit(12) })},
	{"maps ordered by numeric and enum", func(db *gorm.DB) (any, error) {
		var rows []map[string]any
		err := gaugesAll(db).Select("id, price, mood").Order("mood, price desc, id").Limit(10).Find(&rows).Error
		return typedRows(rows), err
	}},
}

// sameAsPlain runs read on plain GORM's table and through the plugin and
// fails the test unless both answer, and alike.
func sameAsPlain(t *testing.T, te *typesEnv, read func(*gorm.DB) (any, error)) {
	t.Helper()
	want, err := read(te.plain)
	if err != nil {
		t.Fatalf("plain: %v", err)
	}
	got, err := read(te.e.db)
	if err != nil {
		t.Fatalf("plugin: %v", err)
	}
	if !sameAnswer(got, want) {
		t.Fatalf("plugin:\n%s\nplain GORM:\n%s", typed(got), typed(want))
	}
}

func runTypedReads(t *testing.T, te *typesEnv) {
	for _, c := range typedReads {
		t.Run(c.name, func(t *testing.T) { sameAsPlain(t, te, c.run) })
	}
}

// TestTypedReads: reads across shards order, cut and read every column
// as plain GORM on one table does.
func TestTypedReads(t *testing.T) { runTypedReads(t, newTypesEnv(t, false, false)) }

// TestTypedReadsPerSchemaEnum is TestTypedReads with the enum made by
// the per-shard SQL: each schema has a type of its own.
func TestTypedReadsPerSchemaEnum(t *testing.T) { runTypedReads(t, newTypesEnv(t, false, true)) }

// TestTypedReadsPooled is TestTypedReads behind PgBouncer in transaction
// pool mode.
func TestTypedReadsPooled(t *testing.T) { runTypedReads(t, newTypesEnv(t, true, true)) }

// TestTypedGroupsCitext: groups and DISTINCT of citext across shards are
// Postgres's (case-insensitive), or a typed refusal.
func TestTypedGroupsCitext(t *testing.T) {
	te := newTypesEnv(t, false, false)
	for _, c := range []exactRead{
		{"distinct citext, counted", func(db *gorm.DB) (any, error) {
			var n int64
			err := gaugesAll(db).Distinct("tag").Count(&n).Error
			return n, err
		}},
		{"group by citext", func(db *gorm.DB) (any, error) {
			var rows []map[string]any
			err := gaugesAll(db).Select("count(*) AS n, min(id) AS m").Group("tag").Order("m").Find(&rows).Error
			return typedRows(rows), err
		}},
		{"group by text in a nondeterministic collation", func(db *gorm.DB) (any, error) {
			var rows []map[string]any
			err := gaugesAll(db).Select("count(*) AS n, min(id) AS m").Group("nick").Order("m").Find(&rows).Error
			return typedRows(rows), err
		}},
		{"ordered by text in a nondeterministic collation", into[Gauge](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("nick, id").Limit(9) })},
	} {
		t.Run(c.name, func(t *testing.T) {
			want, err := c.run(te.plain)
			if err != nil {
				t.Fatalf("plain: %v", err)
			}
			got, err := c.run(te.e.db)
			if errors.Is(err, ErrUnroutableSQL) {
				t.Logf("refused: %v", err)
				return
			}
			if err != nil {
				t.Fatalf("plugin: %v", err)
			}
			if !sameAnswer(got, want) {
				t.Fatalf("plugin:\n%s\nplain GORM:\n%s", typed(got), typed(want))
			}
		})
	}
}

// TestTypedReadsICUDefault: on databases whose default collation is ICU
// (datlocprovider 'i', the locale in daticulocale or datlocale by
// version, datcollate left at C), text of the default collation, and
// text an expression computes, is ordered in that collation, not as
// bytes (every text column is of the default collation here).
func TestTypedReadsICUDefault(t *testing.T) { runICUDefault(t, false) }

// TestTypedReadsICUDefaultPooled is TestTypedReadsICUDefault behind
// PgBouncer in transaction pool mode.
func TestTypedReadsICUDefaultPooled(t *testing.T) { runICUDefault(t, true) }

func runICUDefault(t *testing.T, pooled bool) {
	te := newTypesEnvOn(t, pooled, false, true)
	for _, c := range []exactRead{
		{"text of the default collation", into[Gauge](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("name, id").Limit(12) })},
		{"text of the default collation, descending, every row", into[gaugeNull](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("name desc, id") })},
		{"min and max of text", func(db *gorm.DB) (any, error) {
			var rows []map[string]any
			err := gaugesAll(db).Select("min(name) AS lo, max(name) AS hi").Find(&rows).Error
			return typedRows(rows), err
		}},
		{"an expression that yields text", into[Gauge](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("coalesce(name, '') || 'x', id").Limit(10) })},
		{"an expression of no column that yields text", into[Gauge](func(db *gorm.DB) *gorm.DB {
			return gaugesAll(db).Order("CASE WHEN id % 3 = 0 THEN 'apple' WHEN id % 3 = 1 THEN 'Banana' ELSE '_x' END desc, id").Limit(10)
		})},
		{"an integer expression", into[Gauge](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("id % 7, id desc").Limit(10) })},
	} {
		t.Run(c.name, func(t *testing.T) { sameAsPlain(t, te, c.run) })
	}
}

// TestTypedRefusals: the groups and aggregates of types Go cannot compare
// and Postgres cannot be sent are refused with ErrUnroutableSQL.
func TestTypedRefusals(t *testing.T) {
	te := newTypesEnv(t, false, false)
	for _, c := range []struct{ name, sel, group string }{
		{"group by a shared enum", "mood, count(*) AS n", "mood"},
		{"min of an enum", "min(mood) AS m", ""},
		{"group by interval", "span, count(*) AS n", "span"},
		{"group by inet", "addr, count(*) AS n", "addr"},
		{"group by an array", "nums, count(*) AS n", "nums"},
		{"group by jsonb", "doc::text AS d, count(*) AS n", "doc"},
		{"min of citext", "min(tag) AS m", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var rows []map[string]any
			q := gaugesAll(te.e.db).Select(c.sel)
			if c.group != "" {
				q = q.Group(c.group)
			}
			if err := q.Find(&rows).Error; !errors.Is(err, ErrUnroutableSQL) {
				t.Fatalf("got %v (%d rows), want ErrUnroutableSQL", err, len(rows))
			}
		})
	}
}

// TestTypedComposite: a composite of a shared schema orders across shards
// as Postgres orders it; one each schema defines is refused, saying where
// to define it.
func TestTypedComposite(t *testing.T) {
	order := into[gaugeOther](func(db *gorm.DB) *gorm.DB { return gaugesAll(db).Order("pair desc, id").Limit(9) })
	t.Run("shared", func(t *testing.T) {
		te := newTypesEnv(t, false, false)
		want, err := order(te.plain)
		if err != nil {
			t.Fatalf("plain: %v", err)
		}
		got, err := order(te.e.db)
		if err != nil {
			t.Fatalf("plugin: %v", err)
		}
		if !sameAnswer(got, want) {
			t.Fatalf("plugin:\n%s\nplain GORM:\n%s", typed(got), typed(want))
		}
	})
	t.Run("per schema", func(t *testing.T) {
		te := newTypesEnv(t, false, true)
		if _, err := order(te.e.db); !errors.Is(err, ErrUnroutableSQL) || !strings.Contains(err.Error(), "shared schema") {
			t.Fatalf("got %v, want ErrUnroutableSQL saying to define the type in a shared schema", err)
		}
	})
}

// TestPerSchemaTypesUnioned: a read of a model with types of each
// schema's own still reads a server's shards in one statement, the
// columns of such types selected as text.
func TestPerSchemaTypesUnioned(t *testing.T) {
	te := newTypesEnv(t, false, true)
	var rows []Gauge
	tx := gaugesAll(te.e.db).Order("id").Limit(5).Find(&rows)
	if tx.Error != nil || len(rows) != 5 {
		t.Fatalf("read: %v, %d rows", tx.Error, len(rows))
	}
	te.e.p.unions.mu.Lock()
	var text string
	for _, e := range te.e.p.unions.m {
		text += e.text + "\n"
	}
	te.e.p.unions.mu.Unlock()
	for _, want := range []string{"UNION ALL", `"mood"::text AS "mood"`, `"grade"::text AS "grade"`} {
		if !strings.Contains(text, want) {
			t.Errorf("the read's statement has no %s:\n%s", want, text)
		}
	}
}
