package pgorder

import (
	"math"
	"strconv"
	"time"
)

// AppendKey appends an encoding of v to buf such that values Postgres
// finds equal (NULL with NULL, NaN with NaN, 1.50 with 1.5, 0 with -0,
// one instant in two time zones) encode the same and others differ,
// among values of one Kind. It reports false for a value of no known
// kind, which cannot be grouped.
func AppendKey(buf []byte, v Value) ([]byte, bool) {
	if v.null {
		return append(buf, 'N', ';'), true
	}
	switch v.kind {
	case Int, Bool:
		buf = strconv.AppendInt(append(buf, 'i'), v.i, 10)
	case Uint:
		buf = strconv.AppendUint(append(buf, 'u'), v.u, 10)
	case Numeric:
		n, ok := parseNum(v.s)
		if !ok {
			return buf, false
		}
		buf = strconv.AppendInt(append(buf, 'd'), int64(n.rank), 10)
		buf = append(append(append(buf, n.intp...), '.'), n.frac...)
	case Float:
		switch {
		case math.IsNaN(v.f):
			buf = append(buf, "fNaN"...)
		case v.f == 0:
			buf = append(buf, "f0"...)
		default:
			buf = strconv.AppendFloat(append(buf, 'f'), v.f, 'g', -1, 64)
		}
	case Text:
		buf = strconv.AppendInt(append(buf, 's'), int64(len(v.s)), 10)
		buf = append(append(buf, ':'), v.s...)
	case Bytes:
		buf = strconv.AppendInt(append(buf, 'b'), int64(len(v.b)), 10)
		buf = append(append(buf, ':'), v.b...)
	case Time:
		switch v.i {
		case 1:
			buf = append(buf, "t+inf"...)
		case -1:
			buf = append(buf, "t-inf"...)
		default:
			buf = v.t.UTC().AppendFormat(append(buf, 't'), time.RFC3339Nano)
		}
	default:
		return buf, false
	}
	return append(buf, ';'), true
}
