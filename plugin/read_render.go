package plugin

import (
	"context"
	"database/sql"
	"errors"
	"maps"
	"reflect"
	"slices"

	"gorm.io/gorm"
	"gorm.io/gorm/callbacks"
	"gorm.io/gorm/clause"

	"github.com/shardkit/shardkit/router"
)

// The render stage of a read of several shards: every statement's SQL
// text and arguments, built with GORM on the caller's goroutine before
// any statement runs (read_exec.go runs them). Each is built from a
// private copy of what GORM's builders mutate (ownClauses).

// renderRead renders the statements of a planned read: per unit, one
// statement for its shards in union where the text allows (unionSQL),
// else one per shard. A statement whose shard cannot be bound to its
// server (known down) is kept with its error and fails when it would
// run; an error building the SQL fails the read.
func (p *Plugin) renderRead(db *gorm.DB, rp *readPlan) ([]readStmt, error) {
	stmt := db.Statement
	stmt.Dest, stmt.ReflectValue = rp.buildDest()
	var out []readStmt
	for u, unit := range rp.units {
		rest := unit
		if len(unit) > 1 && !db.DryRun {
			st, unioned, err := p.render(db, rp, u, unit[0], unit)
			if err != nil {
				return nil, err
			}
			out = append(out, st)
			if unioned || st.err != nil {
				continue
			}
			rest = unit[1:] // the first shard was rendered alone
		}
		for _, i := range rest {
			st, _, err := p.render(db, rp, u, i, nil)
			if err != nil {
				return nil, err
			}
			out = append(out, st)
			if st.err != nil {
				break // the unit fails there
			}
		}
	}
	// The statement's SQL is the last statement's, as a read that wrote
	// every text itself leaves it (for GORM's log), when that text was
	// kept from an earlier read.
	if n := len(out); n > 0 && out[n-1].sql != "" && stmt.SQL.String() != out[n-1].sql {
		stmt.SQL.Reset()
		stmt.SQL.WriteString(out[n-1].sql)
	}
	return out, nil
}

// render renders the statement of shard i of unit u, or, given the unit's
// shards in union, of all of them at once (unioned reports which).
func (p *Plugin) render(db *gorm.DB, rp *readPlan, u, i int, union []int) (st readStmt, unioned bool, err error) {
	stmt, d := db.Statement, rp.d
	st = readStmt{unit: u, server: d.places[i].Server, shards: []int{d.shards[i]}}
	if err := p.prepare(db, d, i, rp.base); err != nil {
		st.err = shardFailure(d.m, d.shards[i], err)
		return st, false, nil
	}
	var text string
	if union != nil {
		text, unioned = p.unionSQL(db, rp, union)
	}
	if !unioned {
		stmt.SQL.Reset()
		stmt.Vars = nil
		callbacks.BuildQuerySQL(db)
		text = stmt.SQL.String()
	}
	if db.Error != nil {
		return st, false, db.Error
	}
	st.sql, st.vars, st.conn = text, slices.Clone(stmt.Vars), stmt.ConnPool
	if unioned {
		st.shards = make([]int, len(union))
		for j, k := range union {
			st.shards[j] = d.shards[k]
		}
		st.named = p.namedOn(d, st)
	} else if rp.shape != shapeAggregate {
		st.schema = schemaOf(stmt, d.shards[i])
	}
	return st, unioned, nil
}

// buildDest is the destination each statement of the read is built for:
// GORM picks the columns of a smaller struct, and the primary key
// conditions of a struct, from it. It is never scanned into.
func (rp *readPlan) buildDest() (any, reflect.Value) {
	switch rp.shape {
	case shapeCount:
		n := new(int64)
		return n, reflect.ValueOf(n).Elem()
	case shapeAggregate:
		var tmp []map[string]any
		return &tmp, reflect.ValueOf(&tmp).Elem()
	}
	tmp := reflect.New(rp.sliceTyp)
	return tmp.Interface(), tmp.Elem()
}

// shardFailure is the error of a statement that failed on one shard
// before it ran: a *ShardError naming the shard, unless the error names
// its shard or server already.
func shardFailure(m *model, shard int, err error) error {
	var se *ShardError
	var sv *ServerError
	if errors.As(err, &se) || errors.As(err, &sv) || m == nil {
		return err
	}
	return &ShardError{Shard: shard, Table: m.table, Err: err}
}

// ownClauses copies a statement's clauses deep enough that building them
// changes nothing another statement reads: GORM's clause.Where.Build
// moves a leading lone Or behind the first other condition by swapping
// entries of its own slice, and BuildQuerySQL appends the statement's
// joins to the FROM clause's.
func ownClauses(in map[string]clause.Clause) map[string]clause.Clause {
	out := maps.Clone(in)
	if c, ok := out["WHERE"]; ok {
		if w, ok := c.Expression.(clause.Where); ok {
			c.Expression = ownWhere(w)
			out["WHERE"] = c
		}
	}
	if c, ok := out["FROM"]; ok {
		if f, ok := c.Expression.(clause.From); ok {
			f.Tables, f.Joins = slices.Clone(f.Tables), slices.Clone(f.Joins)
			c.Expression = f
			out["FROM"] = c
		}
	}
	return out
}

// reorders reports whether clause.Where.Build would write to the
// clause's lists: it swaps only when the list it builds (its own, or its
// one AndConditions' list) starts with a lone Or.
func reorders(w clause.Where) bool {
	exprs := w.Exprs
	if len(exprs) == 1 {
		if and, ok := exprs[0].(clause.AndConditions); ok {
			exprs = and.Exprs
		}
	}
	if len(exprs) < 2 {
		return false
	}
	or, ok := exprs[0].(clause.OrConditions)
	return ok && len(or.Exprs) == 1
}

// ownWhere copies the condition lists clause.Where.Build reorders: its
// own, and that of its one AndConditions, which it builds in its place.
func ownWhere(w clause.Where) clause.Where {
	w.Exprs = slices.Clone(w.Exprs)
	if len(w.Exprs) == 1 {
		if and, ok := w.Exprs[0].(clause.AndConditions); ok {
			and.Exprs = slices.Clone(and.Exprs)
			w.Exprs[0] = and
		}
	}
	return w
}

// namedOn reports whether a statement reading several shards runs as a
// named prepared statement where it is bound: on a server's pool or a
// replica's as PreparedReads allows, never on a transaction's part.
func (p *Plugin) namedOn(d *decision, st readStmt) bool {
	switch c := st.conn.(type) {
	case *serverDB:
		return c.named
	case *sql.DB:
		srv, err := p.pools.get(d.snap, st.server)
		return err == nil && srv.namedReplicas
	}
	return false
}

// schemaOf is the schema a one-shard statement of the read runs with on
// its search_path: the shard's, when the statement joins other tables and
// its connection is a pool (a transaction's part has it set already).
func schemaOf(stmt *gorm.Statement, shard int) string {
	if !joinsTables(stmt) {
		return ""
	}
	if _, ok := stmt.ConnPool.(interface {
		BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error)
	}); !ok {
		return ""
	}
	return router.SchemaName(shard)
}
