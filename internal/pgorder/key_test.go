package pgorder

import (
	"math"
	"strconv"
	"testing"
	"time"
)

func appendG(buf []byte, v float64) []byte { return strconv.AppendFloat(buf, v, 'g', -1, 64) }

func key(t *testing.T, v Value) string {
	t.Helper()
	b, ok := AppendKey(nil, v)
	if !ok {
		t.Fatalf("AppendKey(%+v) not ok", v)
	}
	return string(b)
}

func TestAppendKey(t *testing.T) {
	t0 := time.Date(2024, 1, 2, 3, 4, 5, 6, time.UTC)
	for _, tc := range []struct {
		name  string
		a, b  Value
		equal bool
	}{
		{"NULL", Null(), Null(), true},
		{"NULL is not empty text", Null(), Of(Text, ""), false},
		{"NaN", Of(Float, math.NaN()), Of(Float, math.NaN()), true},
		{"-0 and 0", Of(Float, math.Copysign(0, -1)), Of(Float, 0.0), true},
		{"floats differ", Of(Float, 1.5), Of(Float, 1.25), false},
		{"numeric scale", Of(Numeric, "1.50"), Of(Numeric, "1.5"), true},
		{"numeric leading zeros", Of(Numeric, "007"), Of(Numeric, "7.000"), true},
		{"numeric sign", Of(Numeric, "-7"), Of(Numeric, "7"), false},
		{"numeric zero sign", Of(Numeric, "-0.0"), Of(Numeric, "0"), true},
		{"numeric NaN", Of(Numeric, "NaN"), Of(Numeric, "NaN"), true},
		{"time zones", Of(Time, t0), Of(Time, t0.In(time.FixedZone("x", -7200))), true},
		{"infinity", Of(Time, "infinity"), Of(Time, "infinity"), true},
		{"infinity and -infinity", Of(Time, "infinity"), Of(Time, "-infinity"), false},
		{"infinity and the zero time", Of(Time, "infinity"), Of(Time, time.Time{}), false},
		{"text with separators", Of(Text, "a;"), Of(Text, "a"), false},
		{"ints", Of(Int, int64(10)), Of(Int, int64(1)), false},
		{"bytes", Of(Bytes, []byte("x")), Of(Bytes, []byte("x")), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := key(t, tc.a) == key(t, tc.b); got != tc.equal {
				t.Errorf("keys %q and %q: equal %v, want %v", key(t, tc.a), key(t, tc.b), got, tc.equal)
			}
		})
	}
	// Concatenated keys stay apart: ("a;", "b") and ("a", ";b").
	x, _ := AppendKey(nil, Of(Text, "a;"))
	x, _ = AppendKey(x, Of(Text, "b"))
	y, _ := AppendKey(nil, Of(Text, "a"))
	y, _ = AppendKey(y, Of(Text, ";b"))
	if string(x) == string(y) {
		t.Errorf("two-column keys collide: %q", x)
	}
	if _, ok := AppendKey(nil, Of(Int, "not an int")); ok {
		t.Error("a value of the wrong Go type gets a key")
	}
}
