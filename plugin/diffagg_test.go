package plugin

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"gorm.io/gorm"
)

// Aggregate shapes of the differential test: the group and distinct
// operations carry, most of the time, a random aggregate, GROUP BY or
// DISTINCT statement (with ORDER BY, LIMIT and OFFSET in the case's own
// fields), some of them shapes the plugin must refuse.

// aggDest is how an aggregate case reads its rows.
type aggDest uint8

const (
	aggToMaps   aggDest = iota // Find(&[]map[string]any)
	aggToStruct                // Find(&[]aggRow)
	aggToTake                  // Take(&map[string]any)
	aggToCount                 // Count(&n), no Select
	aggToPluck                 // Pluck(first output, &[]any)
)

// aggSpec is a generated aggregate statement.
type aggSpec struct {
	Select   string   // Select(...) text; "" with Count or Distinct
	Distinct []string // Distinct(cols...)
	Group    string   // Group(...)
	Having   int      // 1 + index in aggHavings; 0: none
	Order    string
	Dest     aggDest
	Total    bool // ORDER BY orders the rows totally (or there is one row)
	Refused  string
}

// aggRow is a struct destination of aggregate rows; aggregates are
// aliased a0…a3 and read as text.
type aggRow struct {
	UserID    int64
	Caption   string
	Likes     int64
	CreatedAt time.Time
	A0        string
	A1        string
	A2        string
	A3        string
}

var (
	aggItems = []string{"count(*)", "count(id)", "sum(likes)", "min(likes)", "max(likes)", "avg(likes)", "min(caption)", "max(caption)",
		"max(created_at)", "min(created_at)", "sum(user_id)", "avg(user_id)", "count(caption)", "COUNT(1)", "Sum(likes)", "avg(id)", "sum(id)",
		// finished in Postgres or combined from partials of expressions (read_merge_agg_final.go)
		"count(distinct user_id)", "count(DISTINCT caption)", "count(distinct likes % 3)", "sum(likes * 2)", "avg(likes + user_id)",
		"max(likes - 1)", "min(lower(caption))", "bool_and(likes > 0)", "bool_or(likes > 3)", "every(likes < 5)"}
	aggRefusedItems = []string{"string_agg(caption, ',')", "count(*) over ()",
		"max(likes) filter (where likes > 2)", "lower(caption)", "coalesce(sum(likes), 0)", "array_agg(likes)", "sum(distinct likes)"}
	// aggHavings are HAVING conditions with their one argument: counts,
	// sums, text in its collation, distinct counts, aggregates not
	// selected, grouped columns.
	aggHavings = []struct {
		cond string
		arg  any
	}{
		{"count(*) > ?", 1}, {"sum(likes) >= ?", 3}, {"min(caption) < ?", "b"}, {"count(distinct likes) > ?", 1},
		{"max(likes) - min(likes) < ?", 4}, {"avg(likes) > ?", 2.5}, {"count(*) > ? OR max(caption) = 'cat'", 2}, {"not bool_or(likes > ?)", 5},
	}
	aggGroups   = [][]string{nil, {"user_id"}, {"caption"}, {"likes"}, {"user_id", "caption"}, {"caption", "likes"}, {"created_at"}, {"likes", "user_id"}}
	distinctSet = []string{"user_id", "caption", "likes", "created_at"}
)

// aggGroup generates a grouped or ungrouped aggregate statement.
func (g *gen) aggGroup(c *dcase) *aggSpec {
	a := &aggSpec{Dest: aggDest(g.pick(5))}
	group := aggGroups[g.pick(len(aggGroups))]
	if a.Dest == aggToTake && len(group) > 0 {
		a.Dest = aggToMaps // Take of one group of many: any group is right
	}
	if a.Dest == aggToCount {
		if len(group) == 0 {
			group = []string{"user_id"}
		}
		a.Group = strings.Join(group, ", ")
		a.Total = true
		return a
	}
	type out struct{ name, expr string }
	var outs []out
	for _, col := range group {
		if g.pick(3) == 0 {
			continue // a grouped column need not be selected
		}
		expr := col
		if g.pick(6) == 0 {
			expr = "photos." + col
		}
		outs = append(outs, out{col, expr})
	}
	n := 1 + g.pick(3)
	for i := 0; i < n; i++ {
		item := aggItems[g.pick(len(aggItems))]
		name := strings.ToLower(item[:strings.IndexByte(item, '(')])
		if a.Dest == aggToStruct || g.coin() {
			name = fmt.Sprintf("a%d", i)
			item += " AS " + name
		}
		outs = append(outs, out{name, item})
	}
	if a.Dest == aggToPluck {
		outs = outs[len(outs)-1:] // Pluck reads one column
	}
	switch g.pick(12) {
	case 0:
		a.Refused = aggRefusedItems[g.pick(len(aggRefusedItems))]
		outs = append(outs, out{"r", a.Refused + " AS r"})
	case 1:
		if len(group) < 2 {
			outs = append(outs, out{"id", "id"}) // not grouped: Postgres refuses too
			a.Refused = "ungrouped column"
		}
	case 2, 3:
		a.Having = 1 + g.pick(len(aggHavings))
	}
	g.shuffle(len(outs), func(i, j int) { outs[i], outs[j] = outs[j], outs[i] })
	exprs := make([]string, len(outs))
	for i, o := range outs {
		exprs[i] = o.expr
	}
	a.Select = strings.Join(exprs, ", ")
	if len(group) > 0 {
		a.Group = strings.Join(group, ", ")
	}
	// ORDER BY: some outputs by name or position, and maybe every grouped
	// column after them, which makes the order total.
	var terms []string
	covered := map[string]bool{}
	for i := g.pick(3); i > 0; i-- {
		k := g.pick(len(outs))
		term := outs[k].name
		if g.pick(5) == 0 {
			term = fmt.Sprint(k + 1)
		}
		if g.coin() {
			term += " desc"
		}
		terms = append(terms, term)
		covered[outs[k].name] = true
	}
	if len(group) > 0 && g.pick(5) == 0 {
		// an aggregate not selected (finished in Postgres, read_merge_agg_final.go)
		terms = append(terms, []string{"sum(likes) desc", "count(distinct caption)", "min(caption)"}[g.pick(3)])
	}
	if len(group) > 0 && (len(terms) > 0 || g.coin()) && g.pick(4) != 0 {
		for _, col := range group {
			t := col
			if g.coin() {
				t += " desc"
			}
			terms = append(terms, t)
			covered[col] = true
		}
	}
	a.Order = strings.Join(terms, ", ")
	a.Total = len(group) == 0
	if len(group) > 0 {
		a.Total = true
		for _, col := range group {
			a.Total = a.Total && covered[col]
		}
	}
	g.limits(c)
	return a
}

// aggDistinct generates a DISTINCT statement on columns.
func (g *gen) aggDistinct(c *dcase) *aggSpec {
	a := &aggSpec{Dest: aggToMaps}
	cols := slices.Clone(distinctSet)
	g.shuffle(len(cols), func(i, j int) { cols[i], cols[j] = cols[j], cols[i] })
	cols = cols[:1+g.pick(3)]
	a.Distinct = cols
	if len(cols) == 1 && g.coin() {
		a.Dest = aggToPluck
	}
	var terms []string
	covered := 0
	for _, col := range cols {
		if g.pick(4) == 0 {
			continue
		}
		t := col
		if g.coin() {
			t += " desc"
		}
		terms = append(terms, t)
		covered++
	}
	a.Order = strings.Join(terms, ", ")
	a.Total = covered == len(cols)
	g.limits(c)
	return a
}

func (g *gen) limits(c *dcase) {
	if g.pick(3) == 2 {
		c.Limit = 1 + g.pick(6)
	}
	if g.pick(4) == 3 {
		c.Offset = 1 + g.pick(4)
	}
}

func (g *gen) shuffle(n int, swap func(i, j int)) {
	for i := n - 1; i > 0; i-- {
		swap(i, g.pick(i+1))
	}
}

// buildAgg adds the aggregate statement's calls before the conditions.
func (a *aggSpec) build(ch *chain) {
	if len(a.Distinct) > 0 {
		cols := a.Distinct
		if a.Dest == aggToPluck {
			ch.do("Distinct()", func(q *gorm.DB) *gorm.DB { return q.Distinct() })
		} else {
			ch.do(fmt.Sprintf("Distinct(%s)", goList(cols)), func(q *gorm.DB) *gorm.DB { return q.Distinct(toAny(cols)...) })
		}
	}
	if a.Select != "" && a.Dest != aggToPluck {
		s := a.Select
		ch.do(fmt.Sprintf("Select(%q)", s), func(q *gorm.DB) *gorm.DB { return q.Select(s) })
	}
	if a.Group != "" {
		gr := a.Group
		ch.do(fmt.Sprintf("Group(%q)", gr), func(q *gorm.DB) *gorm.DB { return q.Group(gr) })
	}
	if a.Having > 0 {
		h := aggHavings[a.Having-1]
		ch.do(fmt.Sprintf("Having(%q, %#v)", h.cond, h.arg), func(q *gorm.DB) *gorm.DB { return q.Having(h.cond, h.arg) })
	}
	if a.Order != "" {
		o := a.Order
		ch.do(fmt.Sprintf("Order(%q)", o), func(q *gorm.DB) *gorm.DB { return q.Order(o) })
	}
}

// finish reads the rows; it returns their canonical form.
func (a *aggSpec) finish(ch *chain) func() []string {
	switch a.Dest {
	case aggToStruct:
		var rows []aggRow
		ch.do("Find(&rows) // rows []aggRow", func(q *gorm.DB) *gorm.DB { return q.Find(&rows) })
		return func() []string { return fmtAll(rows, "%+v") }
	case aggToTake:
		var row map[string]any
		ch.do("Take(&row) // row map[string]any", func(q *gorm.DB) *gorm.DB { return q.Take(&row) })
		return func() []string {
			if row == nil {
				return nil
			}
			return []string{typedRow(row)}
		}
	case aggToCount:
		var n int64
		ch.do("Count(&n)", func(q *gorm.DB) *gorm.DB { return q.Count(&n) })
		return func() []string { return []string{fmt.Sprintf("count=%d", n)} }
	case aggToPluck:
		var vals []any
		col := a.Select
		if len(a.Distinct) > 0 {
			col = a.Distinct[0]
		}
		ch.do(fmt.Sprintf("Pluck(%q, &vals) // vals []any", col), func(q *gorm.DB) *gorm.DB { return q.Pluck(col, &vals) })
		return func() []string { return fmtAll(vals, "%T(%v)") }
	}
	var rows []map[string]any
	ch.do("Find(&rows) // rows []map[string]any", func(q *gorm.DB) *gorm.DB { return q.Find(&rows) })
	return func() []string {
		out := make([]string, len(rows))
		for i, r := range rows {
			out[i] = typedRow(r)
		}
		return out
	}
}

// typedRow prints a map row with each value's Go type.
func typedRow(r map[string]any) string {
	keys := make([]string, 0, len(r))
	for k := range r {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		v := r[k]
		if t, ok := v.(time.Time); ok {
			v = normTime(t)
		}
		fmt.Fprintf(&b, "%s=%T(%v) ", k, r[k], v)
	}
	return strings.TrimSpace(b.String())
}

func (a *aggSpec) clone() *aggSpec {
	if a == nil {
		return nil
	}
	b := *a
	b.Distinct = slices.Clone(a.Distinct)
	return &b
}

func (a *aggSpec) feature() string {
	switch {
	case a.Refused != "":
		return "refused aggregate shape (" + a.Refused + ")"
	case len(a.Distinct) > 0:
		return "DISTINCT columns"
	case a.Having > 0:
		return "HAVING"
	case a.Dest == aggToCount:
		return "count of groups"
	case a.Group != "":
		return "GROUP BY " + a.Group
	}
	return "aggregates without GROUP BY"
}
