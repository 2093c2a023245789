package pgorder

import (
	"math"
	"reflect"
	"slices"
	"testing"
	"time"
)

func TestCompare(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	t0 := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	asc, desc := Default(false), Default(true)
	for _, tc := range []struct {
		name string
		a, b Value
		o    Order
		want int
	}{
		{"int less", Of(Int, int64(1)), Of(Int, int64(2)), asc, -1},
		{"int desc", Of(Int, int64(1)), Of(Int, int64(2)), desc, 1},
		{"NaN above +Inf", Of(Float, nan), Of(Float, inf), asc, 1},
		{"NaN equals NaN", Of(Float, nan), Of(Float, nan), asc, 0},
		{"number below NaN", Of(Float, -1.0), Of(Float, nan), asc, -1},
		{"NaN first descending", Of(Float, nan), Of(Float, 7.0), desc, -1},
		{"-0 equals 0", Of(Float, math.Copysign(0, -1)), Of(Float, 0.0), asc, 0},
		{"NULL last ascending", Null(), Of(Float, nan), asc, 1},
		{"NULL first descending", Null(), Of(Float, nan), desc, -1},
		{"NULLS FIRST ascending", Null(), Of(Int, int64(1)), Order{NullsFirst: true}, -1},
		{"NULLS LAST descending", Of(Int, int64(1)), Null(), Order{Desc: true}, -1},
		{"NULL equals NULL", Null(), Null(), asc, 0},
		{"numeric by value", Of(Numeric, "1.50"), Of(Numeric, "1.5"), asc, 0},
		{"infinity after every time", Of(Time, "infinity"), Of(Time, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)), asc, 1},
		{"-infinity before every time", Of(Time, "-infinity"), Of(Time, time.Date(-998, 12, 31, 0, 0, 0, 0, time.UTC)), asc, -1},
		{"infinity equals infinity", Of(Time, "infinity"), Of(Time, "infinity"), asc, 0},
		{"-infinity before infinity", Of(Time, "-infinity"), Of(Time, "infinity"), desc, 1},
		{"a time's other text is unordered", Of(Time, "2024-01-01"), Of(Time, "infinity"), asc, 0},
		{"numeric 10 above 9.99", Of(Numeric, "10"), Of(Numeric, "9.99"), asc, 1},
		{"numeric negatives", Of(Numeric, "-10"), Of(Numeric, "-9.99"), asc, -1},
		{"numeric -0 equals 0", Of(Numeric, "-0.00"), Of(Numeric, "0"), asc, 0},
		{"numeric NaN above Infinity", Of(Numeric, "NaN"), Of(Numeric, "Infinity"), asc, 1},
		{"numeric -Infinity lowest", Of(Numeric, "-Infinity"), Of(Numeric, "-1e0"), asc, 0}, // not a numeric's text: unordered
		{"numeric -Infinity below numbers", Of(Numeric, "-Infinity"), Of(Numeric, "-99999"), asc, -1},
		{"numeric fraction digits", Of(Numeric, "0.6"), Of(Numeric, "0.51"), asc, 1},
		{"text bytewise", Of(Text, "B"), Of(Text, "a"), asc, -1},
		{"bytes", Of(Bytes, []byte{1, 2}), Of(Bytes, []byte{1, 3}), asc, -1},
		{"bool false first", Of(Bool, false), Of(Bool, true), asc, -1},
		{"time", Of(Time, t0), Of(Time, t0.Add(time.Nanosecond)), asc, -1},
		{"time zones", Of(Time, t0), Of(Time, t0.In(time.FixedZone("x", 3600))), asc, 0},
		{"wrong Go type is unordered", Of(Int, "7"), Of(Int, int64(1)), asc, 0},
		{"kinds differ: unordered", Of(Int, int64(1)), Of(Text, "a"), asc, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Compare(tc.a, tc.b, tc.o); got != tc.want {
				t.Errorf("Compare = %d, want %d", got, tc.want)
			}
			if got := Compare(tc.b, tc.a, tc.o); got != -tc.want {
				t.Errorf("Compare reversed = %d, want %d", got, -tc.want)
			}
		})
	}
}

// TestSortFloatsAsPostgres sorts a float column as Postgres's ORDER BY
// value and ORDER BY value DESC sort it.
func TestSortFloatsAsPostgres(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	vals := []*float64{f(math.NaN()), f(1.5), nil, f(math.Inf(1)), f(-2), f(math.Inf(-1)), f(0)}
	for _, tc := range []struct {
		desc bool
		want string
	}{
		{false, "-Inf -2 0 1.5 +Inf NaN NULL"},
		{true, "NULL NaN +Inf 1.5 0 -2 -Inf"},
	} {
		s := slices.Clone(vals)
		slices.SortStableFunc(s, func(a, b *float64) int {
			return Compare(FromReflect(reflect.ValueOf(a)), FromReflect(reflect.ValueOf(b)), Default(tc.desc))
		})
		got := ""
		for i, v := range s {
			if i > 0 {
				got += " "
			}
			if v == nil {
				got += "NULL"
			} else {
				got += formatFloat(*v)
			}
		}
		if got != tc.want {
			t.Errorf("desc=%v: got %s, want %s", tc.desc, got, tc.want)
		}
	}
}

func formatFloat(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return fmtG(v)
}

func fmtG(v float64) string { return string(appendG(nil, v)) }

func TestFromReflect(t *testing.T) {
	type row struct {
		I  int32
		U  uint16
		S  string
		P  *int64
		T  time.Time
		TP *time.Time
		M  map[string]int
	}
	now := time.Now()
	n := int64(5)
	r := reflect.ValueOf(row{I: -3, U: 4, S: "x", P: &n, T: now, TP: &now})
	for _, tc := range []struct {
		field string
		want  Value
	}{
		{"I", Of(Int, int64(-3))},
		{"U", Value{kind: Uint, u: 4}},
		{"S", Of(Text, "x")},
		{"P", Of(Int, int64(5))},
		{"T", Of(Time, now)},
		{"TP", Of(Time, now)},
	} {
		t.Run(tc.field, func(t *testing.T) {
			got := FromReflect(r.FieldByName(tc.field))
			if got.IsNull() || Compare(got, tc.want, Default(false)) != 0 || got.kind != tc.want.kind {
				t.Errorf("FromReflect(%s) = %+v, want %+v", tc.field, got, tc.want)
			}
		})
	}
	if !FromReflect(reflect.ValueOf(row{}).FieldByName("TP")).IsNull() {
		t.Error("nil *time.Time is not NULL")
	}
	if !FromReflect(reflect.Value{}).IsNull() {
		t.Error("an invalid reflect.Value (a missing map key) is not NULL")
	}
	if Orderable(reflect.TypeOf(row{}.M)) || !Orderable(reflect.TypeOf(&n)) || !Orderable(reflect.TypeOf(now)) {
		t.Error("Orderable disagrees with FromReflect")
	}
}

// TestCompareDoesNotAllocate: the comparator runs once per pair of rows
// merged, NULLs and numerics included.
func TestCompareDoesNotAllocate(t *testing.T) {
	pairs := [][2]Value{
		{Null(), Of(Int, int64(1))},
		{Of(Numeric, "123.4500"), Of(Numeric, "-0.5")},
		{Of(Float, math.NaN()), Null()},
		{Of(Text, "abc"), Of(Text, "abd")},
		{Of(Time, time.Now()), Of(Time, time.Now())},
	}
	got := testing.AllocsPerRun(100, func() {
		for _, p := range pairs {
			_ = Compare(p[0], p[1], Default(true))
			_ = Compare(p[0], p[1], Order{NullsFirst: true})
		}
	})
	if got != 0 {
		t.Errorf("Compare allocates %.0f times per run, want 0", got)
	}
}

func BenchmarkCompare(b *testing.B) {
	b.ReportAllocs()
	x, y := Of(Numeric, "123456.789"), Of(Numeric, "123456.7891")
	n := Null()
	for b.Loop() {
		_ = Compare(x, y, Default(false))
		_ = Compare(n, y, Default(false))
	}
}
