package plugin

import (
	"fmt"
	"reflect"
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"

	"github.com/shardkit/shardkit/internal/pgorder"
)

// What a multi-shard read of rows may join, select and order by, so that
// the merge of the shards' rows is the answer one table would give.

// colocatedJoins allows joins in a multi-shard read only where each
// shard's join finds all its pairs in that shard: a belongs-to
// association through the model's shard:"id" field, whose target lives
// in the shard of that ID. Each shard's joined rows are then the whole
// answer's rows of that shard.
func (p *Plugin) colocatedJoins(stmt *gorm.Statement, m *model) error {
	for _, j := range stmt.Joins {
		rel, ok := m.schema.Relationships.Relations[j.Name]
		if ok && j.Expression == nil && len(j.Conds) == 0 && j.On == nil && m.kind == keyID && rel.Type == schema.BelongsTo {
			target, known := p.byTable[rel.FieldSchema.Table]
			if known && len(rel.References) == 1 && rel.References[0].ForeignKey == m.key && rel.References[0].PrimaryKey == target.pk {
				continue
			}
		}
		return fmt.Errorf("%w: join %q across shards: only a belongs-to association through the shard:\"id\" field is joined within each shard; scope the query to one shard", ErrUnroutableSQL, j.Name)
	}
	return nil
}

// orderKey is one ORDER BY column resolved to a field of the rows the
// query returns (or a map key).
type orderKey struct {
	field  *schema.Field // of the destination's row type; nil: map rows, use name
	name   string
	desc   bool
	scalar bool // the row is the value
	// coll: text in a collation that is not byte order; such rows are
	// ordered in Postgres (collmerge.go)
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

// selectedColumns returns the columns an explicit Select names (an
// alias for `expr AS name`), and whether there is an explicit Select.
func selectedColumns(stmt *gorm.Statement) (map[string]bool, bool) {
	var items []string
	for _, s := range stmt.Selects {
		items = append(items, splitTop(s)...)
	}
	if c, ok := stmt.Clauses["SELECT"]; ok {
		if sel, ok := c.Expression.(clause.Select); ok {
			for _, col := range sel.Columns {
				if col.Raw {
					items = append(items, splitTop(col.Name)...)
				} else {
					items = append(items, col.Name)
				}
			}
			if e, ok := sel.Expression.(clause.Expr); ok {
				items = append(items, splitTop(e.SQL)...)
			}
		}
	}
	if len(items) == 0 {
		return nil, false
	}
	out := make(map[string]bool, len(items))
	for _, it := range items {
		f := strings.Fields(it)
		switch {
		case len(f) >= 3 && strings.EqualFold(f[len(f)-2], "as"):
			_, name := splitColumn(f[len(f)-1])
			out[name] = true
		case len(f) == 1:
			_, name := splitColumn(f[0])
			if f[0] == "*" || strings.HasSuffix(f[0], ".*") {
				name = "*"
			}
			out[name] = true
		}
	}
	return out, true
}

// splitTop splits a select list at its top-level commas.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// hasFunctions reports whether the select list calls a function (an
// aggregate, a window function): merged from several shards, their
// per-shard results would be wrong. With count set, one plain count(*)
// is allowed (it adds up).
func hasFunctions(stmt *gorm.Statement, count bool) bool {
	var texts []string
	texts = append(texts, stmt.Selects...)
	if c, ok := stmt.Clauses["SELECT"]; ok {
		if sel, ok := c.Expression.(clause.Select); ok {
			for _, col := range sel.Columns {
				if col.Raw {
					texts = append(texts, col.Name)
				}
			}
			if e, ok := sel.Expression.(clause.Expr); ok {
				texts = append(texts, e.SQL)
			}
		} else if e, ok := c.Expression.(clause.Expr); ok {
			texts = append(texts, e.SQL)
		}
	}
	calls := 0
	for _, t := range texts {
		for i := 0; i < len(t); i++ {
			if t[i] == '(' {
				calls++
			}
		}
	}
	if count {
		return calls > 1
	}
	return calls > 0
}

// isCount reports whether the statement selects a plain count, as Count
// does. COUNT(DISTINCT …) does not add up across shards.
func isCount(stmt *gorm.Statement) bool {
	sql := ""
	if c, ok := stmt.Clauses["SELECT"]; ok {
		switch e := c.Expression.(type) {
		case clause.Expr: // clause.Select merges its expression in
			sql = e.SQL
		case clause.Select:
			if x, ok := e.Expression.(clause.Expr); ok {
				sql = x.SQL
			}
		}
	}
	if sql == "" && len(stmt.Selects) > 0 {
		sql = stmt.Selects[0]
	}
	sql = strings.ToLower(strings.Join(strings.Fields(sql), ""))
	return strings.HasPrefix(sql, "count(") && !strings.HasPrefix(sql, "count(distinct")
}

// selectedColumn names the one column a statement selects, or "".
func selectedColumn(stmt *gorm.Statement) string {
	if len(stmt.Selects) == 1 {
		_, c := splitColumn(stmt.Selects[0])
		return c
	}
	if c, ok := stmt.Clauses["SELECT"]; ok {
		if sel, ok := c.Expression.(clause.Select); ok && len(sel.Columns) == 1 {
			_, name := splitColumn(sel.Columns[0].Name)
			return name
		}
	}
	return ""
}

func isFloat(t reflect.Type) bool {
	for t.Kind() == reflect.Ptr {
		t = t.Elem()
	}
	return t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64
}
