package plugin

import (
	"context"
	"errors"
	"fmt"

	"github.com/shardkit/shardkit/internal/sqlcond"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/shardkit/shardkit/router"
)

// Routing by a lookup column. A statement with no shard key, ID or scope
// whose WHERE is a plain AND holding `column = ?` (or IN) on a lookup
// column is routed to the shards of the owners its lookup rows name: one
// indexed read per lookup shard, then the statement on the owners'
// shards. The statement keeps its condition, so on the owner's shard it
// matches only a row that holds the value: a lookup row whose owner row
// is gone or holds another value (an orphan) finds nothing. A value with
// no lookup row routes to no shard (the statement finds nothing).
//
// Anything else that names a lookup column while nothing else routes the
// statement (OR, NOT, groups, other comparisons, values of another type)
// is refused with ErrLookupUnroutable.

// lookupShards returns the shards a statement's lookup equality names,
// or an unknown set when its WHERE names no lookup column. It reads the
// WHERE text GORM builds, as Postgres reads it: with no OR, NOT, CASE,
// BETWEEN or sub-query anywhere, the clause is an AND of its atoms
// whatever its parentheses, and an atom `col = $n` or `col IN ($n, …)` on
// a lookup column bounds the rows to its values' owners.
func (p *Plugin) lookupShards(db *gorm.DB, m *model, cs clauseScan, snap *router.Snapshot) (shardSet, error) {
	if !cs.hasWhere {
		return shardSet{}, nil
	}
	w, ok := cs.where.Expression.(clause.Where)
	if !ok {
		return shardSet{}, nil
	}
	stmt := db.Statement
	text, vars, built := whereText(stmt, w)
	if !built {
		return shardSet{}, nil
	}
	toks, _, ok := sqlcond.Lex(text, false, nil)
	var mentioned *lookupCol
	for _, t := range toks {
		if t.Kind == sqlcond.Ident {
			if c := m.lookupOf(t.Text); c != nil {
				mentioned = c
				break
			}
		}
	}
	if mentioned == nil {
		return shardSet{}, nil
	}
	if !ok || !conjunctive(toks) {
		return shardSet{}, fmt.Errorf("%w: %s.%s appears inside OR, NOT, CASE, BETWEEN or a sub-query", ErrLookupUnroutable, m.table, mentioned.column)
	}
	for _, a := range atoms(toks, 0, len(toks), nil) {
		lc, vals, ok := m.lookupAtom(stmt, toks, a[0], a[1], vars)
		if !ok {
			continue
		}
		norm := make([]any, 0, len(vals))
		for _, v := range vals {
			if isNull(v) {
				continue // = NULL matches no row
			}
			nv := lc.normalize(v)
			if nv == nil {
				return shardSet{}, fmt.Errorf("%w: %s.%s compared with %v (%T), not a value of its type", ErrLookupUnroutable, m.table, lc.column, v, v)
			}
			norm = append(norm, nv)
		}
		return p.resolveLookup(stmt.Context, snap, lc, norm)
	}
	return shardSet{}, fmt.Errorf("%w: %s.%s is compared other than by = or IN with bound values", ErrLookupUnroutable, m.table, mentioned.column)
}

// conjunctive reports a condition with no OR, NOT, CASE, BETWEEN or
// sub-query: an AND of atoms, however parenthesized.
func conjunctive(toks []sqlcond.Token) bool {
	for _, t := range toks {
		for _, k := range [...]string{"or", "not", "case", "between", "select"} {
			if t.Keyword(k) {
				return false
			}
		}
	}
	return true
}

// atoms appends the [lo, hi) token ranges of a conjunctive condition's
// atoms: it splits at AND outside parentheses, and looks inside a
// parenthesized whole.
func atoms(toks []sqlcond.Token, lo, hi int, out [][2]int) [][2]int {
	for lo < hi && toks[lo].Kind == sqlcond.LParen && toks[lo].Match == hi-1 {
		lo, hi = lo+1, hi-1
	}
	start := lo
	split := false
	for i := lo; i < hi; i++ {
		switch {
		case toks[i].Kind == sqlcond.LParen:
			i = toks[i].Match
		case toks[i].Keyword("and"):
			out = atoms(toks, start, i, out)
			start, split = i+1, true
		}
	}
	if !split {
		return append(out, [2]int{lo, hi})
	}
	return atoms(toks, start, hi, out)
}

// lookupAtom reads toks[lo:hi] as `col = $n` or `col IN ($n, …)` on a
// lookup column of the model's table (col, table.col or
// "shard_NNNN".table.col).
func (m *model) lookupAtom(stmt *gorm.Statement, toks []sqlcond.Token, lo, hi int, vars []any) (*lookupCol, []any, bool) {
	i := lo
	var names []string
	for i < hi && toks[i].Kind == sqlcond.Ident {
		names = append(names, toks[i].Text)
		i++
		if i+1 < hi && toks[i].Kind == sqlcond.Dot {
			i++
			continue
		}
		break
	}
	switch len(names) {
	case 1:
	case 2:
		if !m.ownTable(stmt, names[0]) {
			return nil, nil, false
		}
	case 3:
		if _, err := router.ParseSchemaName(names[0]); err != nil || names[1] != m.table {
			return nil, nil, false
		}
	default:
		return nil, nil, false
	}
	lc := m.lookupOf(names[len(names)-1])
	if lc == nil {
		return nil, nil, false
	}
	param := func(t sqlcond.Token) (any, bool) {
		if t.Kind != sqlcond.Param || t.Num >= len(vars) || inline(vars[t.Num]) {
			return nil, false
		}
		return vars[t.Num], true
	}
	switch {
	case i+2 == hi && toks[i].Kind == sqlcond.Op && toks[i].Text == "=":
		v, ok := param(toks[i+1])
		return lc, []any{v}, ok
	case i+3 < hi && toks[i].Keyword("in") && toks[i+1].Kind == sqlcond.LParen && toks[i+1].Match == hi-1:
		var vs []any
		for j := i + 2; j < hi-1; j++ {
			if (j-i)%2 == 1 {
				if toks[j].Kind != sqlcond.Comma {
					return nil, nil, false
				}
				continue
			}
			v, ok := param(toks[j])
			if !ok {
				return nil, nil, false
			}
			vs = append(vs, v)
		}
		return lc, vs, len(vs) > 0
	}
	return nil, nil, false
}

const sqlOwners = "SELECT owner_id FROM %s WHERE value = ANY($1)"

// resolveLookup reads the owners of values from their lookup shards and
// returns the owners' shards.
func (p *Plugin) resolveLookup(ctx context.Context, snap *router.Snapshot, lc *lookupCol, vals []any) (shardSet, error) {
	groups := map[int][]any{}
	var order []int
	for _, v := range vals {
		key, err := canonical(v)
		if err != nil {
			return shardSet{}, err
		}
		s, err := router.ShardOfString(key, snap.Shards)
		if err != nil {
			return shardSet{}, err
		}
		if _, ok := groups[s]; !ok {
			order = append(order, s)
		}
		groups[s] = append(groups[s], v)
	}
	var list []int
	for _, s := range order {
		owners, err := p.readOwners(ctx, snap, lc, s, groups[s])
		if err != nil {
			return shardSet{}, err
		}
		for _, id := range owners {
			if os, err := shardOfID(id, snap); err == nil {
				list = append(list, os)
			}
		}
	}
	if len(list) == 0 {
		return none, nil
	}
	return setOf(list), nil
}

// readOwners reads the owner IDs of values whose lookup rows are in shard
// s. A read that the old home of a moved shard refused (the application
// role's privileges revoked at the cutover, or no copy left after
// completion) runs once more on the shard's home, after the move's fence,
// as a one-shard read does (rerouteRead).
func (p *Plugin) readOwners(ctx context.Context, snap *router.Snapshot, lc *lookupCol, s int, vals []any) ([]int64, error) {
	owners, pl, err := p.readOwnersOn(ctx, snap, lc, s, vals)
	if err == nil || !p.movedFrom(ctx, s, pl.Server, err) {
		return owners, err
	}
	moved, _, werr := p.awaitMove(ctx, s, pl.Server)
	if werr != nil {
		if !errors.Is(werr, ErrShardMoved) {
			werr = fmt.Errorf("%w: %w", ErrShardMoved, werr)
		}
		return nil, &ShardError{Shard: s, Server: pl.Server, Table: lc.table, Err: fmt.Errorf("read lookup: %w", werr)}
	}
	owners, _, err = p.readOwnersOn(ctx, moved, lc, s, vals)
	return owners, err
}

// movedFrom reports whether err, a statement's on server old, means that
// shard s moved away from it: a fence's refusal, the application role's
// privileges revoked by a cutover, or a table missing where the reloaded
// map no longer places the shard (completed, or a copy a rollback
// dropped). The statements GORM runs (movedShard), the lookup statements
// and CopyFrom's parts tell a move from a failure with it. Only the
// privilege and missing-table cases reload the map to decide; a caller
// that runs the statement again waits for the move (awaitMove), which
// reloads it.
func (p *Plugin) movedFrom(ctx context.Context, s int, old string, err error) bool {
	switch {
	case router.IsFenceError(err):
		return true
	case isPrivilegeError(err):
		return p.homeChanged(ctx, s, old)
	case router.IsUndefinedTable(err):
		return p.movedAway(ctx, s, old)
	}
	return false
}

// readOwnersOn is readOwners on the server snap places shard s on.
func (p *Plugin) readOwnersOn(ctx context.Context, snap *router.Snapshot, lc *lookupCol, s int, vals []any) ([]int64, router.Placement, error) {
	pl, err := snap.Placement(s)
	if err != nil {
		return nil, pl, err
	}
	srv, err := p.pools.get(snap, pl.Server)
	if err != nil {
		return nil, pl, err
	}
	if srv.downFor(p.cfg.ServerRetry) {
		return nil, pl, &ServerError{Server: srv.name, Shards: []int{s}, Table: lc.table, Err: errKnownDown}
	}
	var arg any
	if lc.text {
		a := make([]string, len(vals))
		for i, v := range vals {
			a[i] = v.(string)
		}
		arg = a
	} else {
		a := make([]int64, len(vals))
		for i, v := range vals {
			a[i] = v.(int64)
		}
		arg = a
	}
	rows, err := srv.QueryContext(ctx, fmt.Sprintf(sqlOwners, lc.quoted[s]), arg)
	srv.report(err, p.cfg.ServerRetry)
	if err != nil {
		if unavailable(err) {
			return nil, pl, &ServerError{Server: srv.name, Shards: []int{s}, Table: lc.table, Err: err}
		}
		return nil, pl, &ShardError{Shard: s, Server: pl.Server, Table: lc.table, Err: fmt.Errorf("read lookup: %w", err)}
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, pl, &ShardError{Shard: s, Server: pl.Server, Table: lc.table, Err: fmt.Errorf("read lookup: %w", err)}
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		return nil, pl, &ShardError{Shard: s, Server: pl.Server, Table: lc.table, Err: fmt.Errorf("read lookup: %w", err)}
	}
	return out, pl, nil
}
