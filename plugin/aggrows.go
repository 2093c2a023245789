package plugin

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"gorm.io/gorm"
)

// Combining the partial rows of an aggregate read, and handing the
// combined rows to GORM.

// partials are one unit's partial rows, as the driver returned them.
type partials struct {
	cols []*sql.ColumnType
	rows [][]any
}

// read runs the statement's built SQL and keeps its rows.
func (pt *partials) read(stmt *gorm.Statement) error {
	rows, err := stmt.ConnPool.QueryContext(stmt.Context, stmt.SQL.String(), stmt.Vars...)
	if err != nil {
		return err
	}
	defer rows.Close()
	cols, err := rows.ColumnTypes()
	if err != nil {
		return err
	}
	pt.cols = cols
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return err
		}
		pt.rows = append(pt.rows, vals)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return rows.Close()
}

// vkind is how the plugin compares and combines a column's values.
type vkind uint8

const (
	vOther vkind = iota // not compared: cannot group, order, min or max
	vInt
	vNumeric
	vFloat
	vText
	vTime
	vBool
	vBytes
)

// kindOf maps a Postgres type name (as the driver reports it) to the
// comparison the plugin makes: the one Postgres makes for that type.
// Text compares byte-wise, as under the C collation.
func kindOf(dbType string) vkind {
	switch dbType {
	case "INT2", "INT4", "INT8":
		return vInt
	case "NUMERIC":
		return vNumeric
	case "FLOAT4", "FLOAT8":
		return vFloat
	case "TEXT", "VARCHAR", "UUID", "NAME":
		return vText
	case "TIMESTAMPTZ", "TIMESTAMP", "DATE":
		return vTime
	case "BOOL":
		return vBool
	case "BYTEA":
		return vBytes
	}
	return vOther
}

// outCol is a combined column: its name and what GORM is told of it.
type outCol struct {
	name   string
	dbType string
	scan   reflect.Type
}

var numericCol = outCol{dbType: "NUMERIC", scan: reflect.TypeFor[float64]()}

// aggGroup is one group's combined partials.
type aggGroup struct {
	keys []any
	acc  []any // per partial column: int64, decimal or a driver value; nil is NULL
}

// merge combines the units' partial rows into the answer's rows, in
// order, cut by OFFSET and LIMIT.
func (ap *aggPlan) merge(parts []partials) (*mergedRows, error) {
	var cols []*sql.ColumnType
	for _, pt := range parts {
		if pt.cols != nil {
			cols = pt.cols
			break
		}
	}
	nk := len(ap.keys)
	if len(cols) != nk+ap.nparts {
		return nil, fmt.Errorf("shardkit: partial rows have %d columns, want %d", len(cols), nk+ap.nparts)
	}
	kinds := make([]vkind, len(cols))
	for i, c := range cols {
		kinds[i] = kindOf(c.DatabaseTypeName())
	}
	for i := range ap.keys {
		if kinds[i] == vOther {
			return nil, refuseAgg("column %s (type %s) cannot be grouped or made distinct across shards: the plugin compares integer, numeric, float, text, time, bool and bytea values", ap.keys[i], cols[i].DatabaseTypeName())
		}
	}
	for _, it := range ap.items {
		if it.fn == aggNone {
			continue
		}
		k, name := kinds[nk+it.part], cols[nk+it.part].DatabaseTypeName()
		switch it.fn {
		case aggSum, aggAvg:
			if k != vInt && k != vNumeric {
				return nil, refuseAgg("%s of %s (type %s) across shards: only sums of integer and numeric columns add up exactly; scope the query to one shard", it.name, it.col, name)
			}
		case aggMin, aggMax:
			if k == vText && ap.textColl != "" {
				return nil, refuseAgg("%s of text across shards: the merge compares text as bytes, and %s's text column %s orders otherwise; give it COLLATE \"C\" or scope the query to one shard", it.name, ap.table, ap.textColl)
			}
			if k == vOther || k == vBool {
				return nil, refuseAgg("%s of %s (type %s) cannot be merged across shards; scope the query to one shard", it.name, it.col, name)
			}
		}
	}

	groups := map[string]*aggGroup{}
	var order []*aggGroup
	var kb strings.Builder
	for _, pt := range parts {
		for _, row := range pt.rows {
			kb.Reset()
			for i := 0; i < nk; i++ {
				if err := encodeVal(&kb, kinds[i], row[i]); err != nil {
					return nil, err
				}
			}
			g, ok := groups[kb.String()]
			if !ok {
				g = &aggGroup{keys: row[:nk], acc: make([]any, ap.nparts)}
				for _, it := range ap.items {
					if it.fn == aggCount {
						g.acc[it.part] = int64(0)
					}
					if it.fn == aggAvg {
						g.acc[it.part+1] = int64(0)
					}
				}
				groups[kb.String()] = g
				order = append(order, g)
			}
			if err := ap.combine(g, row[nk:], kinds[nk:]); err != nil {
				return nil, err
			}
		}
	}
	if len(order) == 0 && nk == 0 {
		// an aggregate without GROUP BY answers one row, even over no rows
		g := &aggGroup{acc: make([]any, ap.nparts)}
		for _, it := range ap.items {
			if it.fn == aggCount {
				g.acc[it.part] = int64(0)
			}
		}
		order = append(order, g)
	}

	out := &mergedRows{}
	okinds := make([]vkind, len(ap.items))
	for i, it := range ap.items {
		var c outCol
		var ct *sql.ColumnType
		switch it.fn {
		case aggNone:
			ct = cols[it.key]
		case aggAvg:
			c = numericCol
		default:
			ct = cols[nk+it.part]
		}
		if ct != nil {
			c = outCol{dbType: ct.DatabaseTypeName(), scan: ct.ScanType()}
		}
		c.name = it.name
		out.cols = append(out.cols, c)
		okinds[i] = kindOf(c.dbType)
	}
	seen := map[string]bool{}
	for _, g := range order {
		row := make([]driver.Value, len(ap.items), len(ap.items)+nk)
		for i, it := range ap.items {
			v, err := finish(it, g)
			if err != nil {
				return nil, err
			}
			row[i] = v
		}
		if ap.distinct {
			kb.Reset()
			for i, v := range row {
				if okinds[i] == vOther {
					return nil, refuseAgg("column %s (type %s) cannot be made distinct across shards", ap.items[i].name, out.cols[i].dbType)
				}
				if err := encodeVal(&kb, okinds[i], v); err != nil {
					return nil, err
				}
			}
			if seen[kb.String()] {
				continue
			}
			seen[kb.String()] = true
		}
		for _, k := range g.keys {
			row = append(row, k) // hidden: ORDER BY a grouped column not selected
		}
		out.rows = append(out.rows, row)
	}
	if len(ap.order) > 0 {
		okeys := make([]vkind, nk)
		copy(okeys, kinds[:nk])
		for _, o := range ap.order {
			k := vOther
			if o.out >= 0 {
				k = okinds[o.out]
			} else {
				k = okeys[o.key]
			}
			if k == vOther {
				return nil, refuseAgg("ORDER BY a column of a type the plugin does not compare, across shards")
			}
			if k == vText && ap.textColl != "" {
				return nil, refuseAgg("ORDER BY text across shards: the merge compares text as bytes, and %s's text column %s orders otherwise; give it COLLATE \"C\" or scope the query to one shard", ap.table, ap.textColl)
			}
		}
		sort.SliceStable(out.rows, func(a, b int) bool {
			for _, o := range ap.order {
				i, k := o.out, vOther
				if i >= 0 {
					k = okinds[i]
				} else {
					i, k = len(ap.items)+o.key, okeys[o.key]
				}
				if c := compareVal(k, out.rows[a][i], out.rows[b][i], o.desc, o.nullsFirst); c != 0 {
					return c < 0
				}
			}
			return false
		})
	}
	if ap.offset > 0 {
		out.rows = out.rows[min(ap.offset, len(out.rows)):]
	}
	if ap.limit >= 0 && len(out.rows) > ap.limit {
		out.rows = out.rows[:ap.limit]
	}
	for i := range out.rows {
		out.rows[i] = out.rows[i][:len(ap.items)]
	}
	return out, nil
}

var errOverflow = errors.New("shardkit: bigint out of range while adding the shards' sums")

// combine adds one partial row into its group.
func (ap *aggPlan) combine(g *aggGroup, row []any, kinds []vkind) error {
	for _, it := range ap.items {
		j := it.part
		switch it.fn {
		case aggNone:
		case aggCount:
			n, _ := row[j].(int64)
			g.acc[j] = g.acc[j].(int64) + n
		case aggSum, aggAvg:
			v, err := addVal(kinds[j], g.acc[j], row[j])
			if err != nil {
				return err
			}
			g.acc[j] = v
			if it.fn == aggAvg {
				n, _ := row[j+1].(int64)
				g.acc[j+1] = g.acc[j+1].(int64) + n
			}
		case aggMin, aggMax:
			if row[j] == nil {
				continue
			}
			if g.acc[j] == nil {
				g.acc[j] = row[j]
				continue
			}
			c := compareVal(kinds[j], row[j], g.acc[j], false, false)
			if it.fn == aggMin && c < 0 || it.fn == aggMax && c > 0 {
				g.acc[j] = row[j]
			}
		}
	}
	return nil
}

// addVal adds a partial sum (int64 for a bigint sum, a numeric's text)
// to an accumulated one; NULL adds nothing.
func addVal(k vkind, acc, v any) (any, error) {
	if v == nil {
		return acc, nil
	}
	switch k {
	case vInt:
		n, ok := v.(int64)
		if !ok {
			return nil, fmt.Errorf("shardkit: unexpected %T in an integer sum", v)
		}
		if acc == nil {
			return n, nil
		}
		a := acc.(int64)
		if (n > 0 && a > math.MaxInt64-n) || (n < 0 && a < math.MinInt64-n) {
			return nil, errOverflow
		}
		return a + n, nil
	default:
		d, err := parseNumeric(v)
		if err != nil {
			return nil, err
		}
		if acc == nil {
			return d, nil
		}
		return acc.(decimal).add(d), nil
	}
}

// finish is an item's value for a group, as the driver would return it.
func finish(it aggItem, g *aggGroup) (driver.Value, error) {
	switch it.fn {
	case aggNone:
		return g.keys[it.key], nil
	case aggSum:
		if d, ok := g.acc[it.part].(decimal); ok {
			return d.String(), nil
		}
		return g.acc[it.part], nil
	case aggAvg:
		s, n := g.acc[it.part], g.acc[it.part+1].(int64)
		if s == nil || n == 0 {
			return nil, nil
		}
		var d decimal
		switch v := s.(type) {
		case int64:
			d = decimal{u: big.NewInt(v)}
		case decimal:
			d = v
		}
		return d.div(decimal{u: big.NewInt(n)}).String(), nil
	}
	return g.acc[it.part], nil
}

// encodeVal writes a value so that values Postgres finds equal encode
// the same.
func encodeVal(b *strings.Builder, k vkind, v any) error {
	if v == nil {
		b.WriteString("N;")
		return nil
	}
	switch k {
	case vNumeric:
		d, err := parseNumeric(v)
		if err != nil {
			return err
		}
		b.WriteString("d" + d.norm().String())
	case vFloat:
		f, _ := v.(float64)
		switch {
		case math.IsNaN(f):
			b.WriteString("fNaN")
		case f == 0:
			b.WriteString("f0")
		default:
			b.WriteString("f" + strconv.FormatFloat(f, 'g', -1, 64))
		}
	case vTime:
		t, ok := v.(time.Time)
		if !ok {
			return fmt.Errorf("shardkit: unexpected %T for a time column", v)
		}
		b.WriteString("t" + t.UTC().Format(time.RFC3339Nano))
	default:
		s := fmt.Sprintf("%T:%v", v, v)
		if bs, ok := v.([]byte); ok {
			s = "b:" + string(bs)
		}
		b.WriteString(strconv.Itoa(len(s)) + ":" + s)
	}
	b.WriteByte(';')
	return nil
}

// compareVal orders two values as Postgres orders them; NULLs come first
// or last as told, whatever the direction.
func compareVal(k vkind, a, b any, desc, nullsFirst bool) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return map[bool]int{true: -1, false: 1}[nullsFirst]
	case b == nil:
		return map[bool]int{true: 1, false: -1}[nullsFirst]
	}
	c := 0
	switch k {
	case vInt:
		x, y := a.(int64), b.(int64)
		c = cmp3(x < y, x > y)
	case vNumeric:
		x, err1 := parseNumeric(a)
		y, err2 := parseNumeric(b)
		if err1 == nil && err2 == nil {
			c = x.cmp(y)
		}
	case vFloat:
		c = compareFloat(a.(float64), b.(float64))
	case vText:
		c = strings.Compare(fmt.Sprint(a), fmt.Sprint(b))
	case vBytes:
		c = strings.Compare(string(a.([]byte)), string(b.([]byte)))
	case vTime:
		c = a.(time.Time).Compare(b.(time.Time))
	case vBool:
		x, y := a.(bool), b.(bool)
		c = cmp3(!x && y, x && !y)
	}
	if desc {
		c = -c
	}
	return c
}

// decimal is an exact numeric: u / 10^scale.
type decimal struct {
	u     *big.Int
	scale int
}

// parseNumeric reads a numeric as the driver returns it (its text).
func parseNumeric(v any) (decimal, error) {
	s, ok := v.(string)
	if !ok {
		if n, ok := v.(int64); ok {
			return decimal{u: big.NewInt(n)}, nil
		}
		return decimal{}, fmt.Errorf("shardkit: unexpected %T for a numeric", v)
	}
	digits, scale := s, 0
	if i := strings.IndexByte(s, '.'); i >= 0 {
		digits, scale = s[:i]+s[i+1:], len(s)-i-1
	}
	u, ok := new(big.Int).SetString(digits, 10)
	if !ok {
		return decimal{}, refuseAgg("numeric value %q (NaN or infinity) cannot be merged across shards", s)
	}
	return decimal{u: u, scale: scale}, nil
}

func pow10(n int) *big.Int { return new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(n)), nil) }

// align returns d's unscaled value at a larger scale.
func (d decimal) at(scale int) *big.Int {
	if scale == d.scale {
		return d.u
	}
	return new(big.Int).Mul(d.u, pow10(scale-d.scale))
}

// add keeps the larger display scale, as Postgres's numeric addition.
func (d decimal) add(e decimal) decimal {
	s := max(d.scale, e.scale)
	return decimal{u: new(big.Int).Add(d.at(s), e.at(s)), scale: s}
}

func (d decimal) cmp(e decimal) int {
	s := max(d.scale, e.scale)
	return d.at(s).Cmp(e.at(s))
}

// norm drops trailing fractional zeros (1.50 and 1.5 are equal).
func (d decimal) norm() decimal {
	u, s := new(big.Int).Set(d.u), d.scale
	ten, r := big.NewInt(10), new(big.Int)
	for s > 0 {
		q, m := new(big.Int).QuoRem(u, ten, r)
		if m.Sign() != 0 {
			break
		}
		u, s = q, s-1
	}
	return decimal{u: u, scale: s}
}

// String prints the value with exactly its scale, as Postgres does.
func (d decimal) String() string {
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
func (d decimal) weight() (int, int64) {
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

// div divides as Postgres's numeric division (the final step of avg):
// at least 16 significant digits, no fewer fractional digits than either
// input shows, rounded half away from zero.
func (d decimal) div(e decimal) decimal {
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
	return decimal{u: q, scale: rscale}
}

// mergedRows are combined rows served to GORM's scanning through
// database/sql, so that each value reaches the destination exactly as a
// Postgres row's value would (database/sql's conversions, GORM's map and
// struct rules, the column's scan type).
type mergedRows struct {
	cols []outCol
	rows [][]driver.Value
	i    int
}

// Columns is part of driver.Rows.
func (r *mergedRows) Columns() []string {
	out := make([]string, len(r.cols))
	for i, c := range r.cols {
		out[i] = c.name
	}
	return out
}

// Close is part of driver.Rows.
func (r *mergedRows) Close() error { return nil }

// Next is part of driver.Rows.
func (r *mergedRows) Next(dest []driver.Value) error {
	if r.i >= len(r.rows) {
		return io.EOF
	}
	copy(dest, r.rows[r.i])
	r.i++
	return nil
}

// ColumnTypeScanType is part of driver.RowsColumnTypeScanType.
func (r *mergedRows) ColumnTypeScanType(i int) reflect.Type { return r.cols[i].scan }

// ColumnTypeDatabaseTypeName is part of driver.RowsColumnTypeDatabaseTypeName.
func (r *mergedRows) ColumnTypeDatabaseTypeName(i int) string { return r.cols[i].dbType }

// mergeConn is a connection that only serves mergedRows given as the
// query's one argument.
type mergeConn struct{}

func (mergeConn) Prepare(string) (driver.Stmt, error) {
	return nil, errors.New("shardkit: merged rows are not prepared")
}
func (mergeConn) Close() error { return nil }
func (mergeConn) Begin() (driver.Tx, error) {
	return nil, errors.New("shardkit: merged rows have no transactions")
}

// CheckNamedValue is part of driver.NamedValueChecker: the argument is
// the rows, passed as they are.
func (mergeConn) CheckNamedValue(*driver.NamedValue) error { return nil }

// QueryContext is part of driver.QueryerContext.
func (mergeConn) QueryContext(_ context.Context, _ string, args []driver.NamedValue) (driver.Rows, error) {
	if len(args) != 1 {
		return nil, errors.New("shardkit: merged rows expected")
	}
	r, ok := args[0].Value.(*mergedRows)
	if !ok {
		return nil, errors.New("shardkit: merged rows expected")
	}
	return r, nil
}

type mergeConnector struct{}

func (mergeConnector) Connect(context.Context) (driver.Conn, error) { return mergeConn{}, nil }
func (mergeConnector) Driver() driver.Driver                        { return mergeDriver{} }

type mergeDriver struct{}

func (mergeDriver) Open(string) (driver.Conn, error) { return mergeConn{}, nil }

var mergeDB = sync.OnceValue(func() *sql.DB { return sql.OpenDB(mergeConnector{}) })

// scanMerged hands combined rows to GORM's scanning, into the
// statement's destination.
func (p *Plugin) scanMerged(db *gorm.DB, r *mergedRows) {
	rows, err := mergeDB().QueryContext(context.Background(), "", r)
	if err != nil {
		db.AddError(err)
		return
	}
	defer func() { db.AddError(rows.Close()) }()
	gorm.Scan(rows, db, 0)
}
