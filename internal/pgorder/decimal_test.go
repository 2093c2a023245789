package pgorder

import (
	"errors"
	"testing"
)

func TestDecimal(t *testing.T) {
	for _, tc := range []struct {
		name, a, b string
		sum        string
		cmp        int
		quotient   string // a / b
	}{
		{"scales", "1.50", "2.125", "3.625", -1, "0.70588235294117647059"},
		{"negative", "-0.00125", "4", "3.99875", -1, "-0.00031250000000000000"},
		{"integers", "10", "3", "13", 1, "3.3333333333333333"},
		{"equal by value", "7.10", "7.1", "14.20", 0, "1.00000000000000000000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := ParseDecimal(tc.a)
			if err != nil {
				t.Fatal(err)
			}
			b, err := ParseDecimal(tc.b)
			if err != nil {
				t.Fatal(err)
			}
			if got := a.Add(b).String(); got != tc.sum {
				t.Errorf("%s + %s = %s, want %s", tc.a, tc.b, got, tc.sum)
			}
			if got := a.Cmp(b); got != tc.cmp {
				t.Errorf("Cmp = %d, want %d", got, tc.cmp)
			}
			if got := compareNumeric(tc.a, tc.b); got != tc.cmp {
				t.Errorf("compareNumeric = %d, want %d", got, tc.cmp)
			}
			if got := a.Div(b).String(); got != tc.quotient {
				t.Errorf("%s / %s = %s, want %s", tc.a, tc.b, got, tc.quotient)
			}
		})
	}
	for _, s := range []string{"NaN", "Infinity", "-Infinity"} {
		if _, err := ParseDecimal(s); !errors.Is(err, ErrNotFinite) {
			t.Errorf("ParseDecimal(%q) = %v, want ErrNotFinite", s, err)
		}
	}
	if _, err := ParseDecimal("1x"); err == nil || errors.Is(err, ErrNotFinite) {
		t.Errorf("ParseDecimal(\"1x\") = %v, want a parse error", err)
	}
	if d, err := ParseDecimal(int64(-42)); err != nil || d.String() != "-42" {
		t.Errorf("ParseDecimal(int64) = %v, %v", d, err)
	}
}

// FuzzCompareNumeric: the allocation-free comparison of numeric texts
// agrees with the exact one, and is antisymmetric.
func FuzzCompareNumeric(f *testing.F) {
	for _, s := range [][2]string{{"1.50", "1.5"}, {"-0", "0.000"}, {"10", "9.99"}, {"-3.2", "-3.19"}, {"NaN", "1"}, {"007.0", "7"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		c := compareNumeric(a, b)
		if r := compareNumeric(b, a); r != -c {
			t.Fatalf("compareNumeric(%q, %q) = %d but reversed %d", a, b, c, r)
		}
		x, err1 := ParseDecimal(a)
		y, err2 := ParseDecimal(b)
		_, ok1 := parseNum(a)
		_, ok2 := parseNum(b)
		if err1 != nil || err2 != nil || !ok1 || !ok2 {
			return
		}
		if want := x.Cmp(y); c != want {
			t.Fatalf("compareNumeric(%q, %q) = %d, exact comparison %d", a, b, c, want)
		}
	})
}
