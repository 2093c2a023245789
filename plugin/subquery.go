package plugin

import (
	"fmt"
	"reflect"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/shardkit/shardkit/router"
)

// Sub-queries and joins are built into the statement's SQL and run where
// the statement runs. A statement on one shard may read the same shard's
// tables; anything else would read the wrong server or schema without an
// error, so it is refused.

// subqueries returns the sub-queries (*gorm.DB values) in the
// statement's clauses, joins, table expression and update values.
func subqueries(stmt *gorm.Statement) []*gorm.DB {
	var w subWalker
	for _, c := range stmt.Clauses {
		w.value(c.Expression)
		w.value(c.BeforeExpression)
		w.value(c.AfterNameExpression)
		w.value(c.AfterExpression)
	}
	for _, j := range stmt.Joins {
		w.all(j.Conds)
		if j.On != nil {
			w.value(*j.On)
		}
		w.value(j.Expression)
	}
	if stmt.TableExpr != nil {
		w.value(*stmt.TableExpr)
	}
	if d, ok := stmt.Dest.(map[string]any); ok {
		for _, v := range d {
			w.value(v)
		}
	}
	return w.subs
}

// subWalker collects the sub-queries of clause values.
type subWalker struct{ subs []*gorm.DB }

func (w *subWalker) value(v any) {
	switch x := v.(type) {
	case nil:
	case *gorm.DB:
		w.subs = append(w.subs, x)
	case clause.Expr:
		w.all(x.Vars)
	case *clause.Expr:
		if x != nil {
			w.all(x.Vars)
		}
	case clause.NamedExpr:
		w.all(x.Vars)
	case clause.Where:
		w.exprs(x.Exprs)
	case clause.AndConditions:
		w.exprs(x.Exprs)
	case clause.OrConditions:
		w.exprs(x.Exprs)
	case clause.NotConditions:
		w.exprs(x.Exprs)
	case clause.Eq:
		w.value(x.Value)
	case clause.Neq:
		w.value(x.Value)
	case clause.Gt:
		w.value(x.Value)
	case clause.Gte:
		w.value(x.Value)
	case clause.Lt:
		w.value(x.Value)
	case clause.Lte:
		w.value(x.Value)
	case clause.Like:
		w.value(x.Value)
	case clause.IN:
		w.all(x.Values)
	case clause.Select:
		w.value(x.Expression)
	case clause.OrderBy:
		w.value(x.Expression)
	case clause.GroupBy:
		w.exprs(x.Having)
	case clause.Set:
		for _, a := range x {
			w.value(a.Value)
		}
	case clause.From:
		for _, j := range x.Joins {
			w.value(j)
		}
	case clause.Join:
		w.value(x.Expression)
		w.value(x.ON)
	case clause.OnConflict:
		w.exprs(x.Where.Exprs)
		w.value(x.DoUpdates)
	case []any:
		w.all(x)
	}
}

func (w *subWalker) all(vs []any) {
	for _, v := range vs {
		w.value(v)
	}
}

func (w *subWalker) exprs(es []clause.Expression) {
	for _, e := range es {
		w.value(e)
	}
}

// simpleClauses reports whether a statement's clauses besides WHERE can
// hold no sub-query, without walking them: only LIMIT, ORDER BY and
// SELECT of plain columns and the plugin's own clauses (cs.plain), no
// joins, no table expression, no map of update values. Most statements
// are so.
func simpleClauses(stmt *gorm.Statement, cs clauseScan) bool {
	if !cs.plain || len(stmt.Joins) > 0 || stmt.TableExpr != nil {
		return false
	}
	_, isMap := stmt.Dest.(map[string]any)
	return !isMap
}

// subTable returns the registered model a sub-query reads, or nil, and
// whether it reads a sharded table by raw SQL (which cannot be proved to
// stay in one shard).
func (p *Plugin) subTable(sub *gorm.DB) (*model, string, error) {
	st := sub.Statement
	if st.SQL.Len() > 0 {
		return nil, p.mentions(st.SQL.String()), nil
	}
	if st.Table == "" && st.Model != nil {
		if err := st.Parse(st.Model); err != nil {
			return nil, "", err
		}
	}
	if st.Table == "" && st.Dest != nil {
		if err := st.Parse(st.Dest); err != nil {
			return nil, "", err
		}
	}
	m, _, err := p.lookup(st)
	if m != nil {
		return m, m.table, err
	}
	return nil, p.mentions(st.Table), err
}

// checkSubqueries refuses sub-queries that cannot run where the statement
// runs. A statement on a sharded table (m) that runs on one shard may
// hold sub-queries on sharded tables constrained to that same shard; any
// other sub-query (on several shards, or on an unsharded table, which
// lives on the default connection) is refused. A statement on an
// unsharded table (m nil) may hold no sub-query on a sharded one.
func (p *Plugin) checkSubqueries(stmt *gorm.Statement, m *model, shards []int, snap *router.Snapshot) error {
	for _, sub := range subqueries(stmt) {
		var err error
		sm, table, e := p.subTable(sub)
		switch {
		case e != nil:
			err = fmt.Errorf("%w: sub-query: %w", ErrUnroutableSQL, e)
		case m == nil && table != "":
			err = fmt.Errorf("%w: a sub-query on sharded table %q inside a statement on an unsharded table; query the shards first, then use the values", ErrUnroutableSQL, table)
		case m == nil:
		case sm == nil && table != "":
			err = fmt.Errorf("%w: a raw sub-query on sharded table %q; build it with the plugin's model so its shard can be checked", ErrUnroutableSQL, table)
		case sm == nil:
			err = fmt.Errorf("%w: a sub-query on unsharded table %q inside a statement on sharded table %q would run on the shard's server; run it separately", ErrUnroutableSQL, sub.Statement.Table, m.table)
		case len(shards) != 1:
			err = fmt.Errorf("%w: a sub-query on %q inside a statement on %d shards; sub-queries run only in a one-shard statement, on that shard", ErrUnroutableSQL, table, len(shards))
		default:
			set, e := sm.shardsOf(sub, opQuery, snap)
			if e == nil {
				sc, ok := scopeOf(sub.Statement)
				set, e = p.scoped(sc, ok, set, snap)
			}
			if e != nil {
				err = fmt.Errorf("%w: sub-query on %q: %w", ErrUnroutableSQL, table, e)
			} else if !set.known || set.all || len(set.list) != 1 || set.list[0] != shards[0] {
				err = fmt.Errorf("%w: a sub-query on %q is not constrained to the statement's shard %d; give it the same shard key or ID", ErrUnroutableSQL, table, shards[0])
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkUnshardedJoins refuses a statement on an unsharded table whose
// joins or table expression name a sharded table: it runs on the default
// connection, where the shards' tables are not.
func (p *Plugin) checkUnshardedJoins(stmt *gorm.Statement) error {
	for _, j := range stmt.Joins {
		name := j.Name
		if j.Expression != nil {
			name = exprSQL(j.Expression)
		}
		if t := p.mentions(name); t != "" {
			return fmt.Errorf("%w: a join names sharded table %q in a statement on an unsharded table; query the shards separately", ErrUnroutableSQL, t)
		}
	}
	for _, j := range fromJoins(stmt) {
		if t := p.mentions(exprSQL(j)); t != "" {
			return fmt.Errorf("%w: a join names sharded table %q in a statement on an unsharded table; query the shards separately", ErrUnroutableSQL, t)
		}
	}
	if stmt.TableExpr != nil {
		if t := p.mentions(stmt.TableExpr.SQL); t != "" {
			return fmt.Errorf("%w: table expression %q names sharded table %q; use the model and let the plugin pick the shard", ErrUnroutableSQL, stmt.TableExpr.SQL, t)
		}
	}
	return nil
}

// fromJoins returns the joins a statement's FROM clause carries: GORM's
// many2many Association joins its join table so (clause.From{Joins}),
// apart from stmt.Joins, and builds them into the same FROM.
func fromJoins(stmt *gorm.Statement) []clause.Join {
	c, ok := stmt.Clauses["FROM"]
	if !ok {
		return nil
	}
	f, _ := c.Expression.(clause.From)
	return f.Joins
}

// joinsTables reports whether a statement joins other tables, through
// Joins or its FROM clause: on one shard they are to resolve in the
// shard's schema (search_path).
func joinsTables(stmt *gorm.Statement) bool {
	return len(stmt.Joins) > 0 || len(fromJoins(stmt)) > 0
}

// checkFromJoins refuses a statement of several shards whose FROM clause
// joins other tables (a many2many Association read across shards): the
// colocation of a join table's rows with the model's cannot be proved
// from it, and a read merged from shards whose joins each miss the pairs
// of the others' rows would be silently short.
func checkFromJoins(stmt *gorm.Statement, shards int) error {
	js := fromJoins(stmt)
	if len(js) == 0 || shards <= 1 {
		return nil
	}
	return fmt.Errorf("%w: the statement joins %q (a many2many Association, or clause.From joins) across %d shards; scope it to one shard, e.g. db.Clauses(plugin.ShardOfID(owner.ID)).Model(&owner).Association(...), where the join resolves in the shard's schema",
		ErrUnroutableSQL, js[0].Table.Name, shards)
}

// exprSQL returns the SQL text of a raw expression, or "".
func exprSQL(e clause.Expression) string {
	switch x := e.(type) {
	case clause.Expr:
		return x.SQL
	case clause.NamedExpr:
		return x.SQL
	case clause.Join:
		return x.Table.Name + " " + exprSQL(x.Expression)
	}
	if v := reflect.ValueOf(e); v.Kind() == reflect.String {
		return v.String()
	}
	return ""
}
