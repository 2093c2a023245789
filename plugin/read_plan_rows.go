package plugin

import (
	"fmt"
	"reflect"
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"
)

// What a multi-shard read of rows may join and select, so that the merge
// of the shards' rows is the answer one table would give (what it may
// order by: read_plan_order.go).

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
