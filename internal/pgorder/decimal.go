package pgorder

import (
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// Decimal is an exact numeric value: U / 10^Scale, Scale being the
// number of fractional digits Postgres displays.
type Decimal struct {
	u     *big.Int
	scale int
}

// ErrNotFinite is returned for a numeric NaN or infinity, which has no
// exact sum.
var ErrNotFinite = errors.New("numeric NaN or infinity")

// DecimalOf is the integer n as a Decimal.
func DecimalOf(n int64) Decimal { return Decimal{u: big.NewInt(n)} }

// ParseDecimal reads a numeric as the driver returns it: its text, or an
// int64.
func ParseDecimal(v any) (Decimal, error) {
	s, ok := v.(string)
	if !ok {
		if n, ok := v.(int64); ok {
			return DecimalOf(n), nil
		}
		return Decimal{}, fmt.Errorf("pgorder: unexpected %T for a numeric", v)
	}
	digits, scale := s, 0
	if i := strings.IndexByte(s, '.'); i >= 0 {
		digits, scale = s[:i]+s[i+1:], len(s)-i-1
	}
	u, ok := new(big.Int).SetString(digits, 10)
	if !ok {
		if _, valid := parseNum(s); valid {
			return Decimal{}, fmt.Errorf("%w: %q", ErrNotFinite, s)
		}
		return Decimal{}, fmt.Errorf("pgorder: %q is not a numeric", s)
	}
	return Decimal{u: u, scale: scale}, nil
}

func pow10(n int) *big.Int { return new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(n)), nil) }

// at returns d's unscaled value at a scale not below d's.
func (d Decimal) at(scale int) *big.Int {
	if scale == d.scale {
		return d.u
	}
	return new(big.Int).Mul(d.u, pow10(scale-d.scale))
}

// Add returns d + e at the larger display scale, as Postgres's numeric
// addition.
func (d Decimal) Add(e Decimal) Decimal {
	s := max(d.scale, e.scale)
	return Decimal{u: new(big.Int).Add(d.at(s), e.at(s)), scale: s}
}

// Cmp compares d and e by value.
func (d Decimal) Cmp(e Decimal) int {
	s := max(d.scale, e.scale)
	return d.at(s).Cmp(e.at(s))
}

// String prints the value with exactly its scale, as Postgres does.
func (d Decimal) String() string {
	neg := d.u.Sign() < 0
	digits := new(big.Int).Abs(d.u).String()
	if d.scale > 0 {
		if len(digits) <= d.scale {
			digits = strings.Repeat("0", d.scale-len(digits)+1) + digits
		}
		digits = digits[:len(digits)-d.scale] + "." + digits[len(digits)-d.scale:]
	}
	if neg {
		return "-" + digits
	}
	return digits
}

// weight returns a nonzero value's Postgres numeric weight (the position
// of its first base-10000 digit) and that digit; 0, 0 for zero.
func (d Decimal) weight() (int, int64) {
	if d.u.Sign() == 0 {
		return 0, 0
	}
	s4 := (d.scale + 3) / 4 * 4
	u := new(big.Int).Abs(d.at(s4))
	str := u.String()
	groups := (len(str) + 3) / 4
	first := len(str) - (groups-1)*4
	lead, _ := strconv.ParseInt(str[:first], 10, 64)
	return groups - 1 - s4/4, lead
}

// Div divides as Postgres's numeric division (the last step of avg): at
// least 16 significant digits, no fewer fractional digits than either
// input shows, rounded half away from zero. e must not be zero.
func (d Decimal) Div(e Decimal) Decimal {
	w1, f1 := d.weight()
	w2, f2 := e.weight()
	qw := w1 - w2
	if f1 <= f2 {
		qw--
	}
	rscale := 16 - qw*4
	rscale = max(rscale, d.scale, e.scale, 0)
	rscale = min(rscale, 1000)
	// d/e = (d.u/10^d.s) / (e.u/10^e.s); scaled by 10^rscale
	num := new(big.Int).Mul(d.u, pow10(rscale+e.scale))
	den := new(big.Int).Mul(e.u, pow10(d.scale))
	neg := (num.Sign() < 0) != (den.Sign() < 0)
	num.Abs(num)
	den.Abs(den)
	q, r := new(big.Int).QuoRem(num, den, new(big.Int))
	if r.Lsh(r, 1).Cmp(den) >= 0 {
		q.Add(q, big.NewInt(1))
	}
	if neg {
		q.Neg(q)
	}
	return Decimal{u: q, scale: rscale}
}

// num is a numeric's text, read without allocating: the sign, the
// integer digits without leading zeros and the fractional digits without
// trailing zeros, or a special value.
type num struct {
	rank int8 // -2: -Infinity, -1: negative, 0: zero, 1: positive, 2: Infinity, 3: NaN
	intp string
	frac string
}

// parseNum reads a numeric as Postgres prints it.
func parseNum(s string) (num, bool) {
	switch s {
	case "NaN":
		return num{rank: 3}, true
	case "Infinity":
		return num{rank: 2}, true
	case "-Infinity":
		return num{rank: -2}, true
	}
	n := num{rank: 1}
	if s != "" && (s[0] == '-' || s[0] == '+') {
		if s[0] == '-' {
			n.rank = -1
		}
		s = s[1:]
	}
	n.intp = s
	if i := strings.IndexByte(s, '.'); i >= 0 {
		n.intp, n.frac = s[:i], s[i+1:]
	}
	if n.intp == "" && n.frac == "" {
		return num{}, false
	}
	for _, part := range [2]string{n.intp, n.frac} {
		for i := 0; i < len(part); i++ {
			if part[i] < '0' || part[i] > '9' {
				return num{}, false
			}
		}
	}
	n.intp = strings.TrimLeft(n.intp, "0")
	n.frac = strings.TrimRight(n.frac, "0")
	if n.intp == "" && n.frac == "" {
		n.rank = 0
	}
	return n, true
}

// compareNumeric orders two numerics' texts by value, as Postgres does:
// NaN above Infinity, equal to itself. Text that is not a numeric
// compares as equal.
func compareNumeric(a, b string) int {
	x, ok1 := parseNum(a)
	y, ok2 := parseNum(b)
	if !ok1 || !ok2 {
		return 0
	}
	if x.rank != y.rank {
		return cmp3(x.rank < y.rank, x.rank > y.rank)
	}
	if x.rank != 1 && x.rank != -1 {
		return 0
	}
	c := cmp3(len(x.intp) < len(y.intp), len(x.intp) > len(y.intp))
	if c == 0 {
		c = strings.Compare(x.intp, y.intp)
	}
	if c == 0 {
		c = strings.Compare(x.frac, y.frac)
	}
	if x.rank < 0 {
		return -c
	}
	return c
}
