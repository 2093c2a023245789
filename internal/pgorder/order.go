// Package pgorder orders and compares values as Postgres does, so that
// rows merged from several servers come out in the order one table would
// give: NaN above every number and equal to itself, NULL first or last
// as the ORDER BY says, numeric by value (1.50 = 1.5), text byte-wise.
//
// Text is compared byte by byte, which is Postgres's order under the C
// collation only; callers check a column's collation before they merge
// text by it.
package pgorder

import (
	"bytes"
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"
)

// Kind is how a column's values are compared: the comparison Postgres
// makes for the column's type.
type Kind uint8

// The kinds of values the package compares. Other values are not
// compared: they cannot be grouped, ordered or merged by min and max.
const (
	Other Kind = iota
	Int
	Uint // a Go unsigned field; Postgres has no unsigned type
	Numeric
	Float
	Text
	Time
	Bool
	Bytes
)

// KindOf maps a Postgres type name, as the driver reports it
// (sql.ColumnType.DatabaseTypeName), to its Kind.
func KindOf(dbType string) Kind {
	switch dbType {
	case "INT2", "INT4", "INT8":
		return Int
	case "NUMERIC":
		return Numeric
	case "FLOAT4", "FLOAT8":
		return Float
	case "TEXT", "VARCHAR", "UUID", "NAME":
		return Text
	case "TIMESTAMPTZ", "TIMESTAMP", "DATE":
		return Time
	case "BOOL":
		return Bool
	case "BYTEA":
		return Bytes
	}
	return Other
}

// Value is one value to compare, held without boxing so that reading it
// from a row and comparing it do not allocate. The zero Value is of no
// known kind: it compares as equal to every value but NULL.
type Value struct {
	kind Kind
	null bool
	i    int64 // Int, Bool (0 or 1); Time: -1 for -infinity, 1 for infinity
	u    uint64
	f    float64
	s    string // Text, Numeric (its text)
	b    []byte
	t    time.Time
}

// Null is the NULL value.
func Null() Value { return Value{null: true} }

// Kind is the value's kind: Other for a value of no known kind (and for
// NULL, which has none).
func (v Value) Kind() Kind { return v.kind }

// IsNull reports whether v is NULL.
func (v Value) IsNull() bool { return v.null }

// Of reads a driver value (int64, float64, string, []byte, bool,
// time.Time; nil is NULL) of a column of kind k. A value of another Go
// type than the kind expects compares as equal to everything.
func Of(k Kind, x any) Value {
	if x == nil {
		return Null()
	}
	v := Value{kind: k}
	switch k {
	case Int:
		n, ok := x.(int64)
		if !ok {
			return Value{}
		}
		v.i = n
	case Numeric:
		switch n := x.(type) {
		case string:
			v.s = n
		case int64:
			v.kind, v.i = Int, n
		default:
			return Value{}
		}
	case Float:
		switch n := x.(type) {
		case float64:
			v.f = n
		case float32:
			v.f = float64(n)
		default:
			return Value{}
		}
	case Text:
		switch s := x.(type) {
		case string:
			v.s = s
		case []byte:
			v.b, v.kind = s, Bytes
		case fmt.Stringer:
			v.s = s.String()
		default:
			return Value{}
		}
	case Bytes:
		b, ok := x.([]byte)
		if !ok {
			return Value{}
		}
		v.b = b
	case Time:
		switch t := x.(type) {
		case time.Time:
			v.t = t
		case string: // the driver's text of an infinite date or timestamp
			switch t {
			case "infinity":
				v.i = 1
			case "-infinity":
				v.i = -1
			default:
				return Value{}
			}
		default:
			return Value{}
		}
	case Bool:
		b, ok := x.(bool)
		if !ok {
			return Value{}
		}
		if b {
			v.i = 1
		}
	default:
		return Value{}
	}
	return v
}

var timeType = reflect.TypeFor[time.Time]()

// FromReflect reads a Go value as a row field holds it: a nil pointer or
// an invalid Value is NULL, a pointer is read through. Types Orderable
// rejects compare as equal to everything.
func FromReflect(rv reflect.Value) Value {
	for rv.IsValid() && (rv.Kind() == reflect.Pointer || rv.Kind() == reflect.Interface) {
		if rv.IsNil() {
			return Null()
		}
		rv = rv.Elem()
	}
	if !rv.IsValid() {
		return Null()
	}
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return Value{kind: Int, i: rv.Int()}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return Value{kind: Uint, u: rv.Uint()}
	case reflect.Float32, reflect.Float64:
		return Value{kind: Float, f: rv.Float()}
	case reflect.String:
		return Value{kind: Text, s: rv.String()}
	case reflect.Bool:
		if rv.Bool() {
			return Value{kind: Bool, i: 1}
		}
		return Value{kind: Bool}
	}
	if rv.Type() == timeType {
		if t, ok := reflect.TypeAssert[time.Time](rv); ok {
			return Value{kind: Time, t: t}
		}
	}
	return Value{}
}

// Orderable reports whether FromReflect reads values of type t as values
// Compare orders as Postgres orders the column: integers, floats,
// strings, bools and times, or pointers to them.
func Orderable(t reflect.Type) bool {
	if t == nil {
		return false
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64, reflect.String, reflect.Bool:
		return true
	}
	return t == timeType
}

// Order is one ORDER BY term's direction and NULL placement.
type Order struct {
	Desc       bool
	NullsFirst bool
}

// Default is Postgres's order for ASC or DESC without NULLS FIRST/LAST:
// NULLs sort as if larger than every value, so last ascending and first
// descending.
func Default(desc bool) Order { return Order{Desc: desc, NullsFirst: desc} }

// Compare orders a and b under o: negative when a sorts first, zero when
// Postgres finds them equal (or cannot order them), positive otherwise.
// NULLs go first or last as o says, whatever the direction. Floats put
// NaN above every number, +Inf included, and equal to itself; numerics
// compare by value, their NaN above Infinity.
func Compare(a, b Value, o Order) int {
	an, bn := a.IsNull(), b.IsNull()
	switch {
	case an && bn:
		return 0
	case an:
		if o.NullsFirst {
			return -1
		}
		return 1
	case bn:
		if o.NullsFirst {
			return 1
		}
		return -1
	}
	c := compareValues(a, b)
	if o.Desc {
		return -c
	}
	return c
}

func compareValues(a, b Value) int {
	if a.kind != b.kind {
		return 0
	}
	switch a.kind {
	case Int, Bool:
		return cmp3(a.i < b.i, a.i > b.i)
	case Uint:
		return cmp3(a.u < b.u, a.u > b.u)
	case Float:
		return compareFloat(a.f, b.f)
	case Numeric:
		return compareNumeric(a.s, b.s)
	case Text:
		return strings.Compare(a.s, b.s)
	case Bytes:
		return bytes.Compare(a.b, b.b)
	case Time:
		if a.i != 0 || b.i != 0 { // -infinity before every time, infinity after
			return cmp3(a.i < b.i, a.i > b.i)
		}
		return a.t.Compare(b.t)
	}
	return 0
}

// compareFloat orders floats as Postgres orders float4 and float8: NaN
// equals NaN and sorts above every number.
func compareFloat(x, y float64) int {
	switch xn, yn := math.IsNaN(x), math.IsNaN(y); {
	case xn && yn:
		return 0
	case xn:
		return 1
	case yn:
		return -1
	}
	return cmp3(x < y, x > y)
}

func cmp3(less, more bool) int {
	switch {
	case less:
		return -1
	case more:
		return 1
	}
	return 0
}

// As reads v, text as a Go string field holds it, as a value of kind k
// where the column's type is k: the text of a numeric compares by its
// value. Other values, and NULL, are returned as they are.
func (v Value) As(k Kind) Value {
	if v.null || v.kind != Text || k != Numeric {
		return v
	}
	if _, ok := parseNum(v.s); !ok {
		return Value{}
	}
	return Value{kind: Numeric, s: v.s}
}
