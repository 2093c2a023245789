package plugin

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Ordering merged rows in Postgres. Go orders text as bytes, which is
// Postgres's order only under a byte-order collation; the collations
// initdb and managed Postgres give by default (en_US.UTF-8, ICU) are
// linguistic. A read across shards ordered by such a column still has
// each unit's rows ordered by Postgres; the plugin then sends the merged
// candidates' ORDER BY values — at most LIMIT+OFFSET rows per unit — to
// one server in one statement, which returns their order, ties broken by
// the plan's order of the units and then each unit's own. One more round
// trip, exact by construction: the server compares the values with the
// column's own collation.

// maxOrderedInPostgres is the most rows a read sends to be ordered in
// Postgres: a read without a LIMIT of more rows than this is refused.
const maxOrderedInPostgres = 1 << 20

// pgOrder reports whether the read's rows are ordered in Postgres: an
// ORDER BY key is text in a collation that is not byte order.
func (rp *readPlan) pgOrder() bool {
	for _, k := range rp.keys {
		if k.coll != nil || k.pgType != "" {
			return true
		}
	}
	return false
}

// orderInPostgres returns the merged rows of m (every unit's, in the
// order they were added) in the read's order, OFFSET and LIMIT applied,
// as ordered by a server of the read: the first that answered it, else
// the next that can be reached.
func (p *Plugin) orderInPostgres(ctx context.Context, rp *readPlan, m *pageMerger, served []string) (reflect.Value, error) {
	n := m.rows.Len()
	if n == 0 {
		return m.rows, nil
	}
	if n > maxOrderedInPostgres {
		return reflect.Value{}, fmt.Errorf("%w: ordering %d rows of several shards by a text column in a linguistic collation: at most %d are ordered at once; add a LIMIT, or scope the query to fewer shards",
			ErrUnroutableSQL, n, maxOrderedInPostgres)
	}
	text, args, err := orderStatement(rp, m)
	if err != nil {
		return reflect.Value{}, err
	}
	var order []int
	err = p.onOneServer(ctx, rp, served, "order the merged rows", func(ctx context.Context, srv *serverDB) error {
		var err error
		order, err = orderOn(ctx, srv, text, args, n)
		return err
	})
	if err != nil {
		return reflect.Value{}, err
	}
	out := reflect.MakeSlice(m.rows.Type(), 0, len(order))
	for _, i := range order {
		out = reflect.Append(out, m.rows.Index(i))
	}
	return out, nil
}

// onOneServer runs f, a statement that finishes a read's merge, on one
// server of the read: the first that answered it (served), else the next
// of the read's servers that can be reached. A server that cannot be
// reached is reported down and the next is tried; any other error fails
// the read.
func (p *Plugin) onOneServer(ctx context.Context, rp *readPlan, served []string, what string, f func(context.Context, *serverDB) error) error {
	if ctx == nil {
		ctx = context.Background()
	}
	servers := slices.Clone(served)
	for _, pl := range rp.d.places {
		if !slices.Contains(servers, pl.Server) {
			servers = append(servers, pl.Server)
		}
	}
	var last error
	for _, server := range servers {
		srv, err := p.pools.get(rp.d.snap, server)
		if err == nil && srv.downFor(p.cfg.ServerRetry) {
			err = &ServerError{Server: server, Table: rp.d.m.table, Err: errKnownDown}
		}
		if err == nil {
			bctx, cancel, _ := p.statementBound(ctx)
			err = f(bctx, srv)
			cancel()
			if err == nil {
				return nil
			}
		}
		if !unavailable(err) {
			return fmt.Errorf("shardkit: %s of %s on server %s: %w", what, rp.d.m.table, server, err)
		}
		if srv != nil {
			srv.report(err, p.cfg.ServerRetry)
		}
		last = &ServerError{Server: server, Table: rp.d.m.table, Err: fmt.Errorf("%s: %w", what, err)}
	}
	return last
}

// orderOn runs the ordering statement on srv and returns the rows'
// positions (from 0) in order.
func orderOn(ctx context.Context, srv *serverDB, text string, args []any, n int) ([]int, error) {
	rows, err := srv.QueryContext(ctx, text, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var order []int
	for rows.Next() {
		var i int64
		if err := rows.Scan(&i); err != nil {
			return nil, err
		}
		if i < 1 || int(i) > n {
			return nil, fmt.Errorf("row %d of %d", i, n)
		}
		order = append(order, int(i-1))
	}
	return order, rows.Err()
}

// orderStatement is the statement that orders the rows of m: their ORDER
// BY values as one array per key, each element numbered by its row, and
// the row's unit, unnested and sorted.
func orderStatement(rp *readPlan, m *pageMerger) (string, []any, error) {
	n := m.rows.Len()
	var cols, order []string
	args := make([]any, 0, len(rp.keys)+1)
	for j, k := range rp.keys {
		var vals any
		var typ string
		var err error
		switch {
		case k.hidden && k.pgType != "":
			vals, typ = textArray(m.raw, j), "text"
		case k.hidden:
			if vals, typ, err = columnArray(rp.hiddenTypes[j], m.raw, j); err != nil {
				err = fmt.Errorf("%w: ORDER BY %s across shards: values of type %s cannot be ordered in Postgres: %v", ErrUnroutableSQL, k.name, rp.hiddenTypes[j], err)
			}
		default:
			vals, typ, err = keyArray(m.rows, k, n)
		}
		if err != nil {
			return "", nil, err
		}
		args = append(args, vals)
		col := "k" + strconv.Itoa(j)
		cols = append(cols, fmt.Sprintf("$%d::%s[]", j+1, typ))
		term := "t." + col
		if k.pgType != "" {
			term = "(" + term + ")::" + k.pgType
		}
		switch {
		case k.coll != nil && k.coll.coll != "":
			term += " COLLATE " + pgx.Identifier{k.coll.schema, k.coll.coll}.Sanitize()
		case k.coll == nil && k.pgType == "" && collatable(typ):
			// text of no collation of its own is in byte order (textOrder,
			// exprTextOrder): said so, or the array is ordered in the
			// database's default collation
			term += " COLLATE " + pgx.Identifier{byteCollation.schema, byteCollation.coll}.Sanitize()
		}
		if k.desc {
			term += " DESC"
		}
		order = append(order, term+k.nullsSQL())
	}
	units := make([]int32, n)
	for i, u := range m.unit {
		units[i] = int32(u)
	}
	args = append(args, units)
	var b strings.Builder
	b.WriteString("SELECT t.i FROM unnest(")
	b.WriteString(strings.Join(cols, ", "))
	fmt.Fprintf(&b, ", $%d::int4[]) WITH ORDINALITY AS t(", len(rp.keys)+1)
	for j := range rp.keys {
		fmt.Fprintf(&b, "k%d, ", j)
	}
	b.WriteString("u, i) ORDER BY ")
	b.WriteString(strings.Join(order, ", "))
	b.WriteString(", t.u, t.i")
	if rp.limit >= 0 {
		fmt.Fprintf(&b, " LIMIT %d", rp.limit)
	}
	if rp.offset > 0 {
		fmt.Fprintf(&b, " OFFSET %d", rp.offset)
	}
	return b.String(), args, nil
}

// keyArray reads one ORDER BY key of every row into an array argument of
// the key's type; nil elements are NULLs.
func keyArray(rows reflect.Value, k orderKey, n int) (any, string, error) {
	value := func(i int) reflect.Value {
		row := reflect.Indirect(rows.Index(i))
		if !k.scalar {
			row = row.FieldByIndex(k.field.StructField.Index)
		}
		for row.Kind() == reflect.Pointer || row.Kind() == reflect.Interface {
			if row.IsNil() {
				return reflect.Value{}
			}
			row = row.Elem()
		}
		return row
	}
	var t reflect.Type
	for i := 0; i < n && t == nil; i++ {
		if v := value(i); v.IsValid() {
			t = v.Type()
		}
	}
	if t == nil { // every value NULL: they all tie
		out := make([]*string, n)
		return out, "text", nil
	}
	switch {
	case t.Kind() == reflect.String:
		out := make([]*string, n)
		for i := range out {
			if v := value(i); v.IsValid() {
				s := v.String()
				out[i] = &s
			}
		}
		return out, "text", nil
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		out := make([]*int64, n)
		for i := range out {
			if v := value(i); v.IsValid() {
				x := v.Int()
				out[i] = &x
			}
		}
		return out, "int8", nil
	case t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64:
		out := make([]*string, n) // numeric: a uint64 may pass int8
		for i := range out {
			if v := value(i); v.IsValid() {
				s := strconv.FormatUint(v.Uint(), 10)
				out[i] = &s
			}
		}
		return out, "numeric", nil
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		out := make([]*float64, n)
		for i := range out {
			if v := value(i); v.IsValid() {
				x := v.Float()
				if t.Kind() == reflect.Float32 && !math.IsNaN(x) {
					x = float64(float32(x))
				}
				out[i] = &x
			}
		}
		return out, "float8", nil
	case t.Kind() == reflect.Bool:
		out := make([]*bool, n)
		for i := range out {
			if v := value(i); v.IsValid() {
				x := v.Bool()
				out[i] = &x
			}
		}
		return out, "bool", nil
	case t == reflect.TypeFor[time.Time]():
		out := make([]*time.Time, n)
		for i := range out {
			if v := value(i); v.IsValid() {
				x := v.Interface().(time.Time)
				out[i] = &x
			}
		}
		return out, "timestamptz", nil
	}
	return nil, "", fmt.Errorf("%w: ORDER BY %s across shards: cannot order values of %s in Postgres", ErrUnroutableSQL, k.name, t)
}

// textArray reads column i of the rows (driver values) as text, for
// values only Postgres orders: it casts them back to their type.
func textArray(rows [][]any, i int) []*string {
	out := make([]*string, len(rows))
	for r, row := range rows {
		switch v := row[i].(type) {
		case nil:
		case string:
			out[r] = &v
		case []byte:
			s := string(v)
			out[r] = &s
		default:
			s := fmt.Sprint(v)
			out[r] = &s
		}
	}
	return out
}
