package plugin

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/callbacks"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"

	"github.com/shardkit/shardkit/internal/pgorder"
	"github.com/shardkit/shardkit/internal/sqlcond"
)

// The ORDER BY of a read of rows across shards, resolved to the keys the
// merge orders by: columns the rows carry (orderKeys), or, for what they
// do not carry, values each shard selects under hidden aliases, which the
// merge orders by and drops before GORM scans the rows (hiddenOrderKeys).

// orderKey is one ORDER BY column resolved to a field of the rows the
// query returns (or a map key).
type orderKey struct {
	field  *schema.Field // of the destination's row type; nil: map rows, use name
	name   string
	desc   bool
	scalar bool // the row is the value
	// coll: text in a collation that is not byte order; such rows are
	// ordered in Postgres (read_merge_coll.go)
	coll *collation
	// hidden: the key is not read from the rows but from a column each
	// shard selects for it under alias, dropped before the rows are
	// scanned (hiddenOrderKeys); sql is what the shards select, expr
	// whether it is an expression (its collation unknown to the plugin).
	hidden bool
	alias  string
	sql    string
	expr   bool
	// opaque: an expression over a joined table the plugin does not
	// know, whose text's collation it cannot tell
	opaque bool
	nulls  int8 // hidden: NULLS FIRST (1) or LAST (-1); 0: Postgres's default for the direction
	// as: the kind the merge reads the key's Go values as (a numeric
	// column's text as numeric; 0: as FromReflect reads them)
	as pgorder.Kind
	// pgType: hidden values that only Postgres orders (citext, inet,
	// interval, …), sent to it as text and ordered as this type
	pgType string
}

// ord is how the key orders values, as Postgres does.
func (k orderKey) ord() pgorder.Order {
	o := pgorder.Default(k.desc)
	switch k.nulls {
	case 1:
		o.NullsFirst = true
	case -1:
		o.NullsFirst = false
	}
	return o
}

// nullsSQL is the key's NULLS clause, "" for the default.
func (k orderKey) nullsSQL() string {
	switch k.nulls {
	case 1:
		return " NULLS FIRST"
	case -1:
		return " NULLS LAST"
	}
	return ""
}

// orderKeys resolves the ORDER BY columns of a multi-shard query against
// what each shard returns: a column the query does not select, or that
// the destination has no field for, cannot order the merged rows.
func orderKeys(db *gorm.DB, m *model, elem reflect.Type) ([]orderKey, error) {
	stmt := db.Statement
	c, ok := stmt.Clauses["ORDER BY"]
	if !ok {
		return nil, nil
	}
	ob, ok := c.Expression.(clause.OrderBy)
	if !ok || ob.Expression != nil {
		return nil, fmt.Errorf("%w: ORDER BY expression cannot be merged across shards", ErrUnroutableSQL)
	}
	for elem.Kind() == reflect.Ptr {
		elem = elem.Elem()
	}
	var dest *schema.Schema
	if elem.Kind() == reflect.Struct {
		ds := &gorm.Statement{DB: db}
		if err := ds.Parse(reflect.New(elem).Interface()); err != nil {
			return nil, fmt.Errorf("%w: merge into %s: %w", ErrUnroutableSQL, elem, err)
		}
		dest = ds.Schema
	}
	selected, explicit := selectedColumns(stmt)
	var keys []orderKey
	var err error
	for _, col := range ob.Columns {
		var parts [][2]string // name, direction
		if col.Column.Raw {
			for _, item := range strings.Split(col.Column.Name, ",") {
				f := strings.Fields(item)
				if len(f) == 0 || len(f) > 2 {
					return nil, fmt.Errorf("%w: ORDER BY %q cannot be merged across shards", ErrUnroutableSQL, col.Column.Name)
				}
				dir := ""
				if len(f) == 2 {
					dir = strings.ToLower(f[1])
				}
				parts = append(parts, [2]string{f[0], dir})
			}
		} else {
			dir := ""
			if col.Desc {
				dir = "desc"
			}
			parts = append(parts, [2]string{col.Column.Name, dir})
		}
		for _, pt := range parts {
			table, name := splitColumn(pt[0])
			if name == clause.PrimaryKey {
				name = m.pk.DBName
			}
			if table == "?" || !m.ownTable(stmt, table) {
				return nil, fmt.Errorf("%w: ORDER BY %q is not a column of %s", ErrUnroutableSQL, pt[0], m.table)
			}
			if pt[1] != "" && pt[1] != "asc" && pt[1] != "desc" {
				return nil, fmt.Errorf("%w: ORDER BY %q cannot be merged across shards", ErrUnroutableSQL, pt[0]+" "+pt[1])
			}
			if explicit && !selected[name] && !selected["*"] {
				return nil, fmt.Errorf("%w: ORDER BY %s across shards needs %s in the Select list, so that the rows can be merged in order", ErrUnroutableSQL, name, name)
			}
			k := orderKey{name: name, desc: pt[1] == "desc"}
			var typ reflect.Type
			switch {
			case dest != nil:
				if k.field = dest.LookUpField(name); k.field == nil || k.field.DBName != name {
					return nil, fmt.Errorf("%w: ORDER BY %s across shards needs a %s field in the destination %s to merge the rows in order", ErrUnroutableSQL, name, name, elem)
				}
				typ = k.field.FieldType
			case elem.Kind() == reflect.Map:
				// map values are what the driver returns for the column:
				// ordered only where the model's field says it is a
				// plain integer, string, bool or time
				if f := m.schema.LookUpField(name); f != nil && f.DBName == name && !isFloat(f.FieldType) {
					typ = f.FieldType
				}
			default: // Pluck: the rows are the values of the one selected column
				if len(ob.Columns) != 1 || len(parts) != 1 || selectedColumn(stmt) != name {
					return nil, fmt.Errorf("%w: plucked values from several shards can only be ordered by the plucked column", ErrUnroutableSQL)
				}
				k.scalar, typ = true, elem
			}
			if !pgorder.Orderable(typ) {
				return nil, fmt.Errorf("%w: ORDER BY %s across shards: the plugin merges rows in order only by integer, float, string, bool and time columns", ErrUnroutableSQL, name)
			}
			read := typ // what holds the values the merge reads: a map's are the driver's, NULL as nil
			if k.field == nil && !k.scalar {
				read = reflect.PointerTo(typ)
			}
			var exact bool
			if k.as, exact = m.columnType(name).goKind(read); !exact {
				return nil, fmt.Errorf("%w: ORDER BY %s across shards: its %s values do not order as the column's %s", ErrUnroutableSQL, name, typ, m.columnType(name).cast)
			}
			if k.coll, err = m.textOrder(db.Statement.Context, name); err != nil {
				return nil, err
			}
			if k.coll != nil && k.field == nil && !k.scalar {
				return nil, fmt.Errorf("%w: ORDER BY %s across shards: rows read into maps cannot be ordered by text in collation %q; read them into a struct, or scope the query to one shard",
					ErrUnroutableSQL, name, k.coll.name)
			}
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// hiddenPrefix starts the alias of an ORDER BY value each shard selects
// for the merge and the merge drops.
const hiddenPrefix = "__shardkit_order_"

// hiddenOrderKeys resolves the ORDER BY of a multi-shard read of rows
// that do not carry what it orders by (a column not selected or not in
// the destination, an expression, text read into maps): every term
// becomes a value each shard selects under a hidden alias, the merge
// orders by those values and drops them before GORM scans the rows.
func hiddenOrderKeys(db *gorm.DB, m *model) ([]orderKey, error) {
	stmt := db.Statement
	ob, ok := stmt.Clauses["ORDER BY"].Expression.(clause.OrderBy)
	if !ok || ob.Expression != nil {
		return nil, fmt.Errorf("%w: ORDER BY expression with bind variables cannot be merged across shards", ErrUnroutableSQL)
	}
	var keys []orderKey
	for _, col := range ob.Columns {
		text := orderColumnText(m, col)
		toks, _, ok := sqlcond.Lex(text, false, nil)
		if !ok {
			return nil, fmt.Errorf("%w: ORDER BY %q cannot be read to merge rows across shards", ErrUnroutableSQL, text)
		}
		for _, term := range sqlcond.Items(toks) {
			k, err := hiddenKey(db, m, term)
			if err != nil {
				return nil, err
			}
			k.alias = hiddenPrefix + strconv.Itoa(len(keys))
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// hiddenKey reads one ORDER BY term: a column of the model or an
// expression over the row, ASC or DESC.
func hiddenKey(db *gorm.DB, m *model, t []sqlcond.Token) (orderKey, error) {
	src := sqlcond.Text(t)
	k := orderKey{hidden: true}
	n := len(t)
	if n >= 2 && t[n-2].Keyword("nulls") && (t[n-1].Keyword("first") || t[n-1].Keyword("last")) {
		k.nulls = 1
		if t[n-1].Keyword("last") {
			k.nulls = -1
		}
		n -= 2
	}
	if n > 0 && (t[n-1].Keyword("asc") || t[n-1].Keyword("desc")) {
		k.desc = t[n-1].Keyword("desc")
		n--
	}
	e := t[:n]
	for i, x := range e {
		switch {
		case x.Keyword("nulls") || x.Keyword("using") || x.Keyword("collate"):
			return k, fmt.Errorf("%w: ORDER BY %s across shards: USING and COLLATE are not merged (nor NULLS where it is not last); order by the column or expression, ASC or DESC, NULLS FIRST or LAST", ErrUnroutableSQL, src)
		case x.Kind == sqlcond.Param || x.Keyword("select") || x.Keyword("over"):
			return k, fmt.Errorf("%w: ORDER BY %s across shards: a sub-query, window or bind variable cannot order merged rows; scope the query to one shard", ErrUnroutableSQL, src)
		case x.Kind == sqlcond.Ident && !x.Quoted && i+1 < len(e) && e[i+1].Kind == sqlcond.LParen && (aggNames[x.Text] != 0 || notCombined[x.Text]):
			return k, fmt.Errorf("%w: ORDER BY %s across shards: an aggregate orders groups, not rows; select it with Group", ErrUnroutableSQL, src)
		case x.Kind == sqlcond.Dot && i == 1 && !m.ownTable(db.Statement, e[0].Text):
			return k, fmt.Errorf("%w: ORDER BY %s is not a column of %s", ErrUnroutableSQL, src, m.table)
		}
	}
	if len(e) == 0 {
		return k, fmt.Errorf("%w: ORDER BY %s cannot be merged across shards", ErrUnroutableSQL, src)
	}
	if col, end := sqlcond.ColumnAt(e, 0); col != "" && end == len(e) {
		own, err := ownColumn(db.Statement, m, e, col)
		if err != nil {
			return k, fmt.Errorf("%w: ORDER BY %s is not a column of %s", ErrUnroutableSQL, src, m.table)
		}
		k.name, k.sql = own, qualifiedColumn(db.Statement, own)
		switch ct := m.columnType(own); {
		case ct == nil:
		case ct.typtype == 'e' && ct.category != 'A':
			// an enum orders by its labels' positions: each shard selects
			// the position, an integer the merge orders (the labels of a
			// type each schema defines come from one per-shard SQL)
			k.sql = "array_position(enum_range(" + k.sql + "), " + k.sql + ")"
			return k, nil
		case ct.driverKind() != pgorder.Other:
		case ct.perSchema:
			return k, errPerSchemaType(own, ct.cast)
		default:
			k.pgType = ct.cast
		}
		k.coll, err = m.textOrder(db.Statement.Context, own)
		return k, err
	}
	k.name, k.sql, k.expr = tokensSQL(e), tokensSQL(e), true
	// Text the expression computes is in the database's default
	// collation: ordered in Postgres when that is not byte order (values
	// of other types are ordered there alike, exactly).
	joined, known := joinedTables(db.Statement, m)
	if !known {
		// text of a table the plugin does not know: its order is not
		// known either
		k.opaque = true
		return k, nil
	}
	k.coll = m.exprTextOrder(db.Statement.Context, joined...)
	return k, nil
}

// joinedTables returns the tables the statement joins to the model's
// (GORM's Joins of the model's associations), and whether it knows every
// one: a join of another kind is refused across shards (colocatedJoins),
// and a FROM clause's joins too (checkFromJoins).
func joinedTables(stmt *gorm.Statement, m *model) ([]string, bool) {
	var out []string
	for _, j := range stmt.Joins {
		rel, ok := m.schema.Relationships.Relations[j.Name]
		if !ok || rel.FieldSchema == nil {
			return nil, false
		}
		out = append(out, rel.FieldSchema.Table)
	}
	return out, len(fromJoins(stmt)) == 0
}

// qualifiedColumn is a column of the model as each shard's select list
// names it: qualified by the model's table (its alias, as GORM names the
// model's columns) where the statement joins another table, since a name
// both tables have is ambiguous there; in ORDER BY, Postgres reads a bare
// name as the select list's column, which GORM gives the model's.
func qualifiedColumn(stmt *gorm.Statement, col string) string {
	if stmt.Table == "" || !joinsTables(stmt) {
		return sqlcond.QuoteIdent(col)
	}
	return stmt.Quote(clause.Column{Table: clause.CurrentTable, Name: col})
}

// hiddenSelect is the SELECT clause of each shard's statement in a read
// with hidden ORDER BY values: the select list GORM builds for the
// statement, then each value under its alias.
func hiddenSelect(db *gorm.DB, m *model, keys []orderKey) (clause.Clause, error) {
	stmt := db.Statement
	c, cols := gormSelect(db), modelColumns(stmt, m)
	var extra []string
	for _, k := range keys {
		extra = append(extra, k.sql+" AS "+sqlcond.QuoteIdent(k.alias))
	}
	switch e := c.Expression.(type) {
	case clause.Select:
		if e.Distinct {
			return c, fmt.Errorf("%w: DISTINCT rows ordered by what they do not select cannot be merged across shards (Postgres refuses it too)", ErrUnroutableSQL)
		}
		e.Columns = slices.Clone(e.Columns)
		if len(e.Columns) == 0 && cols != nil {
			for _, name := range cols {
				e.Columns = append(e.Columns, clause.Column{Name: name})
			}
		} else if len(e.Columns) == 0 {
			e.Columns = append(e.Columns, clause.Column{Name: "*", Raw: true})
		}
		for _, x := range extra {
			e.Columns = append(e.Columns, clause.Column{Name: x, Raw: true})
		}
		c.Expression = e
	case clause.Expr:
		e.SQL += ", " + strings.Join(extra, ", ")
		c.Expression = e
	default:
		return c, fmt.Errorf("%w: this select list cannot carry the ORDER BY values a merge across shards needs; select the ORDER BY columns", ErrUnroutableSQL)
	}
	c.Name = "SELECT"
	return c, nil
}

// gormSelect is the SELECT clause GORM builds for the statement, built on
// a private copy of its clauses that is then dropped.
func gormSelect(db *gorm.DB) clause.Clause {
	stmt := db.Statement
	clauses, text, vars := stmt.Clauses, stmt.SQL.String(), stmt.Vars
	defer func() {
		stmt.Clauses, stmt.Vars = clauses, vars
		stmt.SQL.Reset()
		stmt.SQL.WriteString(text)
	}()
	stmt.Clauses = ownClauses(clauses)
	stmt.SQL.Reset()
	stmt.Vars = nil
	callbacks.BuildQuerySQL(db)
	return stmt.Clauses["SELECT"]
}

// orderColumnText is an ORDER BY column as the SQL GORM writes for it: a
// raw column's text as it is; a named one quoted, with its table (the
// model's for the current table) and DESC. clause.PrimaryKey, which First
// and Last order by, is the model's primary key.
func orderColumnText(m *model, col clause.OrderByColumn) string {
	if col.Column.Raw {
		return col.Column.Name
	}
	name, table := col.Column.Name, col.Column.Table
	if name == clause.PrimaryKey {
		name = m.pk.DBName
	}
	if table == clause.CurrentTable {
		table = m.table
	}
	text := sqlcond.QuoteIdent(name)
	if table != "" {
		text = sqlcond.QuoteIdent(table) + "." + text
	}
	if col.Desc {
		text += " DESC"
	}
	return text
}
