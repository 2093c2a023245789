package plugin

import (
	"strconv"

	"gorm.io/gorm"

	"github.com/shardkit/shardkit/internal/sqlcond"
	"github.com/shardkit/shardkit/router"
)

// condReader reads the shard constraints of a lexed condition for one
// model: equality and IN on the primary key or the shard key, under AND
// and OR. Everything it does not understand is "no constraint" for its
// part, so the shards it returns always hold every row the condition can
// match (the statement's rows are a subset of the union of those shards'
// rows), never fewer.
type condReader struct {
	toks []sqlcond.Token
	m    *model
	stmt *gorm.Statement
	snap *router.Snapshot
	vars []any // bind variables: Param n is vars[n]
}

// expr reads toks[lo:hi], one whole boolean expression.
func (r *condReader) expr(lo, hi int) (shardSet, error) {
	if lo >= hi {
		return shardSet{}, nil
	}
	// Keywords whose syntax holds AND at this level: the expression is
	// read as a whole, unconstrained.
	for i := lo; i < hi; i++ {
		t := r.toks[i]
		if t.Kind == sqlcond.LParen {
			i = t.Match
			continue
		}
		if t.Keyword("between") || t.Keyword("case") {
			return shardSet{}, nil
		}
	}
	if parts := sqlcond.Split(r.toks, lo, hi, "or"); len(parts) > 1 {
		var out shardSet
		for i, pt := range parts {
			s, err := r.expr(pt[0], pt[1])
			if err != nil {
				return shardSet{}, err
			}
			if !s.known {
				return shardSet{}, nil
			}
			if i == 0 {
				out = s
			} else {
				out = out.or(s)
			}
		}
		return out, nil
	}
	if parts := sqlcond.Split(r.toks, lo, hi, "and"); len(parts) > 1 {
		var out shardSet
		for _, pt := range parts {
			s, err := r.expr(pt[0], pt[1])
			if err != nil {
				return shardSet{}, err
			}
			out = out.and(s)
		}
		return out, nil
	}
	first := r.toks[lo]
	if first.Keyword("not") {
		return shardSet{}, nil
	}
	if first.Kind == sqlcond.LParen && first.Match == hi-1 {
		if lo+1 < hi-1 {
			if n := r.toks[lo+1]; n.Keyword("select") || n.Keyword("with") || n.Keyword("values") || n.Keyword("table") {
				return shardSet{}, nil
			}
		}
		return r.expr(lo+1, hi-1)
	}
	return r.atom(lo, hi)
}

// atom reads `col = v`, `v = col`, `col IN (v, …)`; anything else is
// unconstrained.
func (r *condReader) atom(lo, hi int) (shardSet, error) {
	col, rest := sqlcond.ColumnRef(r.toks, lo, hi)
	if col != nil {
		k := r.column(col)
		if k == 0 {
			return shardSet{}, nil
		}
		switch {
		case rest+2 == hi && r.toks[rest].Kind == sqlcond.Op && r.toks[rest].Text == "=" && sqlcond.IsValue(r.toks[rest+1]):
			return r.values(k, r.toks[rest+1:hi])
		case rest+2 == hi && r.toks[rest].Keyword("in") && r.toks[rest+1].Kind == sqlcond.Param:
			return r.values(k, r.toks[rest+1:hi]) // `col IN ?` before GORM expands the list
		case rest+2 < hi && r.toks[rest].Keyword("in") && r.toks[rest+1].Kind == sqlcond.LParen && r.toks[rest+1].Match == hi-1:
			var vals []sqlcond.Token
			for i := rest + 2; i < hi-1; i += 2 {
				if !sqlcond.IsValue(r.toks[i]) || (i+1 < hi-1 && r.toks[i+1].Kind != sqlcond.Comma) {
					return shardSet{}, nil
				}
				vals = append(vals, r.toks[i])
			}
			return r.values(k, vals)
		}
		return shardSet{}, nil
	}
	// v = col
	if lo+2 < hi && sqlcond.IsValue(r.toks[lo]) && r.toks[lo+1].Kind == sqlcond.Op && r.toks[lo+1].Text == "=" {
		if col, rest := sqlcond.ColumnRef(r.toks, lo+2, hi); col != nil && rest == hi {
			if k := r.column(col); k != 0 {
				return r.values(k, r.toks[lo:lo+1])
			}
		}
	}
	return shardSet{}, nil
}

// column reports whether a column reference names the model's primary
// key or shard field.
func (r *condReader) column(parts []sqlcond.Token) keyKind {
	var names [3]string
	n := 0
	for _, t := range parts {
		if t.Kind == sqlcond.Ident {
			if n == len(names) {
				return 0
			}
			names[n] = t.Text
			n++
		}
	}
	switch n {
	case 1:
	case 2:
		if !r.m.ownTable(r.stmt, names[0]) {
			return 0
		}
	case 3: // "shard_0005"."photos"."id"
		if _, err := router.ParseSchemaName(names[0]); err != nil || names[1] != r.m.table {
			return 0
		}
	default:
		return 0
	}
	return r.m.columnKind(names[n-1])
}

// values maps the values of an equality or IN list to shards.
func (r *condReader) values(k keyKind, vals []sqlcond.Token) (shardSet, error) {
	var list []int
	if len(vals) > 1 {
		list = make([]int, 0, len(vals))
	}
	for _, t := range vals {
		var v any
		switch t.Kind {
		case sqlcond.Param:
			if t.Num >= len(r.vars) {
				return shardSet{}, nil
			}
			v = r.vars[t.Num]
		case sqlcond.Number:
			n, err := strconv.ParseInt(t.Text, 10, 64)
			if err != nil {
				return shardSet{}, nil
			}
			v = n
		case sqlcond.String:
			v = t.Text
		}
		s, err := valueShards(k, v, r.snap)
		if err != nil || !s.known || len(vals) == 1 {
			return s, err
		}
		list = append(list, s.list...)
	}
	if len(list) == 0 {
		return none, nil
	}
	return setOf(list), nil
}
