package plugin

import (
	"database/sql"
	"reflect"
	"testing"
	"time"

	"github.com/shardkit/shardkit/internal/pgorder"
)

// TestColTypeGoKind: which Go fields a merge compares exactly for which
// column types, and as what.
func TestColTypeGoKind(t *testing.T) {
	base := func(name string) *colType { return &colType{cast: name, base: name, typtype: 'b'} }
	null := func(c *colType) *colType { c.nullable = true; return c }
	str, i64, f64, tm := reflect.TypeFor[string](), reflect.TypeFor[int64](), reflect.TypeFor[float64](), reflect.TypeFor[time.Time]()
	for _, c := range []struct {
		name  string
		col   *colType
		field reflect.Type
		as    pgorder.Kind
		ok    bool
	}{
		{"unknown column", nil, str, 0, true},
		{"int8 into int64", base("int8"), i64, 0, true},
		{"int4 into uint", base("int4"), reflect.TypeFor[uint](), 0, true},
		{"int4 into a string", base("int4"), str, 0, false},
		{"float8 into float64", base("float8"), f64, 0, true},
		{"numeric into a string", base("numeric"), str, pgorder.Numeric, true},
		{"numeric into float64", base("numeric"), f64, 0, false},
		{"numeric into int64", base("numeric"), i64, 0, true},
		{"text into a string", base("text"), str, 0, true},
		{"uuid into a string", base("uuid"), str, 0, true},
		{"bpchar into a string", base("bpchar"), str, 0, false},
		{"citext into a string", base("citext"), str, 0, false},
		{"inet into a string", base("inet"), str, 0, false},
		{"interval into a string", base("interval"), str, 0, false},
		{"date into a string", base("date"), str, 0, false},
		{"date into a time", base("date"), tm, 0, true},
		{"timestamptz into a time", base("timestamptz"), tm, 0, true},
		{"bool into bool", base("bool"), reflect.TypeFor[bool](), 0, true},
		{"enum into a string", &colType{base: "mood", typtype: 'e'}, str, 0, false},
		{"array into a slice", &colType{base: "_int4", typtype: 'b', category: 'A'}, reflect.TypeFor[[]int64](), 0, false},
		{"nullable int4 into int64", null(base("int4")), i64, 0, false},
		{"nullable int4 into *int64", null(base("int4")), reflect.TypeFor[*int64](), 0, true},
		{"nullable text into a string", null(base("text")), str, 0, false},
		{"nullable numeric into *string", null(base("numeric")), reflect.TypeFor[*string](), pgorder.Numeric, true},
		{"nullable int8 into sql.NullInt64", null(base("int8")), reflect.TypeFor[sql.NullInt64](), 0, false},
		{"servers disagree", &colType{base: "int8", typtype: 'b', mixed: true}, i64, 0, false},
		{"a domain of each schema over int4", &colType{base: "int4", typtype: 'b', perSchema: true}, i64, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			as, ok := c.col.goKind(c.field)
			if as != c.as || ok != c.ok {
				t.Fatalf("goKind(%v) = %v, %v; want %v, %v", c.field, as, ok, c.as, c.ok)
			}
		})
	}
}

// TestColTypeDriverKind: the kinds whose driver values the merge orders
// itself; the rest only Postgres orders.
func TestColTypeDriverKind(t *testing.T) {
	for _, c := range []struct {
		col  *colType
		want pgorder.Kind
	}{
		{&colType{base: "int2", typtype: 'b'}, pgorder.Int},
		{&colType{base: "numeric", typtype: 'b'}, pgorder.Numeric},
		{&colType{base: "float4", typtype: 'b'}, pgorder.Float},
		{&colType{base: "varchar", typtype: 'b'}, pgorder.Text},
		{&colType{base: "bytea", typtype: 'b'}, pgorder.Bytes},
		{&colType{base: "date", typtype: 'b'}, pgorder.Time},
		{&colType{base: "citext", typtype: 'b'}, pgorder.Other},
		{&colType{base: "jsonb", typtype: 'b'}, pgorder.Other},
		{&colType{base: "mood", typtype: 'e'}, pgorder.Other},
		{&colType{base: "_text", typtype: 'b', category: 'A'}, pgorder.Other},
		{nil, pgorder.Other},
	} {
		if got := c.col.driverKind(); got != c.want {
			t.Errorf("driverKind(%+v) = %v, want %v", c.col, got, c.want)
		}
	}
}

// TestValueAs: a numeric's text read from a string field compares by
// value; other values are as read.
func TestValueAs(t *testing.T) {
	num := func(s string) pgorder.Value { return pgorder.FromReflect(reflect.ValueOf(s)).As(pgorder.Numeric) }
	asc := pgorder.Default(false)
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"9.5", "100.5", -1}, {"100.50", "100.5", 0}, {"-3", "2.25", -1}, {"NaN", "1000000000", 1}, {"Infinity", "-Infinity", 1},
	} {
		if got := pgorder.Compare(num(c.a), num(c.b), asc); got != c.want {
			t.Errorf("Compare(%s, %s) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
	if v := pgorder.Null().As(pgorder.Numeric); !v.IsNull() {
		t.Errorf("NULL as numeric is %v", v)
	}
	if v := num("abc"); v.Kind() != pgorder.Other {
		t.Errorf("a string that is no numeric reads as %v", v.Kind())
	}
}
