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

// subqueries calls fn for each sub-query (*gorm.DB) in the statement's
// clauses, joins, table expression and update values.
func subqueries(stmt *gorm.Statement, fn func(*gorm.DB)) {
	for _, c := range stmt.Clauses {
		walkValue(c.Expression, fn)
		walkValue(c.BeforeExpression, fn)
		walkValue(c.AfterNameExpression, fn)
		walkValue(c.AfterExpression, fn)
	}
	for _, j := range stmt.Joins {
		for _, v := range j.Conds {
			walkValue(v, fn)
		}
		if j.On != nil {
			walkValue(*j.On, fn)
		}
		walkValue(j.Expression, fn)
	}
	if stmt.TableExpr != nil {
		walkValue(*stmt.TableExpr, fn)
	}
	if d, ok := stmt.Dest.(map[string]any); ok {
		for _, v := range d {
			walkValue(v, fn)
		}
	}
}

func walkValue(v any, fn func(*gorm.DB)) {
	switch x := v.(type) {
	case nil:
	case *gorm.DB:
		fn(x)
	case clause.Expr:
		walkAll(x.Vars, fn)
	case *clause.Expr:
		if x != nil {
			walkAll(x.Vars, fn)
		}
	case clause.NamedExpr:
		walkAll(x.Vars, fn)
	case clause.Where:
		walkExprs(x.Exprs, fn)
	case clause.AndConditions:
		walkExprs(x.Exprs, fn)
	case clause.OrConditions:
		walkExprs(x.Exprs, fn)
	case clause.NotConditions:
		walkExprs(x.Exprs, fn)
	case clause.Eq:
		walkValue(x.Value, fn)
	case clause.Neq:
		walkValue(x.Value, fn)
	case clause.Gt:
		walkValue(x.Value, fn)
	case clause.Gte:
		walkValue(x.Value, fn)
	case clause.Lt:
		walkValue(x.Value, fn)
	case clause.Lte:
		walkValue(x.Value, fn)
	case clause.Like:
		walkValue(x.Value, fn)
	case clause.IN:
		walkAll(x.Values, fn)
	case clause.Select:
		walkValue(x.Expression, fn)
	case clause.OrderBy:
		walkValue(x.Expression, fn)
	case clause.GroupBy:
		walkExprs(x.Having, fn)
	case clause.Set:
		for _, a := range x {
			walkValue(a.Value, fn)
		}
	case clause.From:
		for _, j := range x.Joins {
			walkValue(j, fn)
		}
	case clause.Join:
		walkValue(x.Expression, fn)
		walkValue(x.ON, fn)
	case clause.OnConflict:
		walkExprs(x.Where.Exprs, fn)
		walkValue(x.DoUpdates, fn)
	case []any:
		walkAll(x, fn)
	}
}

func walkAll(vs []any, fn func(*gorm.DB)) {
	for _, v := range vs {
		walkValue(v, fn)
	}
}

func walkExprs(es []clause.Expression, fn func(*gorm.DB)) {
	for _, e := range es {
		walkValue(e, fn)
	}
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
	var err error
	subqueries(stmt, func(sub *gorm.DB) {
		if err != nil {
			return
		}
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
				set, e = p.scoped(sub.Statement, set, snap)
			}
			if e != nil {
				err = fmt.Errorf("%w: sub-query on %q: %w", ErrUnroutableSQL, table, e)
			} else if !set.known || set.all || len(set.list) != 1 || set.list[0] != shards[0] {
				err = fmt.Errorf("%w: a sub-query on %q is not constrained to the statement's shard %d; give it the same shard key or ID", ErrUnroutableSQL, table, shards[0])
			}
		}
	})
	return err
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
	if stmt.TableExpr != nil {
		if t := p.mentions(stmt.TableExpr.SQL); t != "" {
			return fmt.Errorf("%w: table expression %q names sharded table %q; use the model and let the plugin pick the shard", ErrUnroutableSQL, stmt.TableExpr.SQL, t)
		}
	}
	return nil
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
