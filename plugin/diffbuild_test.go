package plugin

import (
	"context"
	"fmt"
	"reflect"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Running a case: one function builds the GORM chain and its Go text
// together, so the printed reproduction is exactly what ran.

// photoKey is the smaller struct destination.
type photoKey struct {
	ID     int64
	UserID int64
}

// userCount is the destination of a grouped count.
type userCount struct {
	UserID int64
	N      int64
}

// userOnly is the destination of a DISTINCT user_id.
type userOnly struct {
	UserID int64
}

// diffEpoch is the creation time of seeded and created rows: rows a
// statement creates with the column default (now()) compare as "now".
var diffEpoch = time.Date(2020, 3, 1, 12, 0, 0, 0, time.UTC)

// result is one side's outcome of a case.
type result struct {
	err      error
	panicked string
	rows     []string // canonical rows of the destination
	affected int64
	ids      []int64 // IDs of the rows a create or save wrote, in order
}

// chain builds a statement and its Go text side by side. With a nil q it
// only prints. upTo and from split a chain in two (diffconc_test.go):
// with upTo set, only the steps up to that one apply; with from set,
// only the steps after that one do (q holds the steps before).
type chain struct {
	q     *gorm.DB
	text  strings.Builder
	steps int
	upTo  int
	from  int
}

func (ch *chain) do(text string, f func(*gorm.DB) *gorm.DB) {
	ch.steps++
	if ch.q != nil && (ch.upTo == 0 || ch.steps <= ch.upTo) && ch.steps > ch.from {
		ch.q = f(ch.q)
	}
	ch.text.WriteString("." + text)
}

func goList[T any](xs []T) string {
	var b strings.Builder
	for i, x := range xs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%#v", x)
	}
	return b.String()
}

// render returns a condition's arguments for Where/Or/Not (built on root,
// a fresh *gorm.DB of the side, when root is not nil) and their Go text,
// on Pin instead of Photo when pins is set.
func (c cond) render(root *gorm.DB, pins bool) ([]any, string) {
	if c.Kind >= numConds {
		return c.renderSlug()
	}
	var args []any
	var text string
	switch c.Kind {
	case cKeyEq:
		args, text = []any{"user_id = ?", c.Users[0]}, fmt.Sprintf(`"user_id = ?", %d`, c.Users[0])
	case cKeyIn:
		args, text = []any{"user_id IN ?", c.Users}, fmt.Sprintf(`"user_id IN ?", []int64{%s}`, goList(c.Users))
	case cIDEq:
		args, text = []any{"id = ?", c.IDs[0]}, fmt.Sprintf(`"id = ?", %d`, c.IDs[0])
	case cIDIn:
		args, text = []any{"id IN ?", c.IDs}, fmt.Sprintf(`"id IN ?", []int64{%s}`, goList(c.IDs))
	case cLikesGt:
		args, text = []any{"likes > ?", c.N}, fmt.Sprintf(`"likes > ?", %d`, c.N)
	case cCaptionEq:
		args, text = []any{"caption = ?", c.S}, fmt.Sprintf(`"caption = ?", %q`, c.S)
	case cStruct:
		args, text = []any{&Photo{UserID: c.Users[0], Caption: c.S}}, fmt.Sprintf(`&Photo{UserID: %d, Caption: %q}`, c.Users[0], c.S)
		if pins {
			args, text = []any{&Pin{UserID: c.Users[0], Caption: c.S}}, fmt.Sprintf(`&Pin{UserID: %d, Caption: %q}`, c.Users[0], c.S)
		}
	case cMap:
		if len(c.Users) == 1 {
			args, text = []any{map[string]any{"user_id": c.Users[0]}}, fmt.Sprintf(`map[string]any{"user_id": %d}`, c.Users[0])
		} else {
			args, text = []any{map[string]any{"user_id": c.Users}}, fmt.Sprintf(`map[string]any{"user_id": []int64{%s}}`, goList(c.Users))
		}
	case cClauseIn:
		vals := make([]any, len(c.Users))
		for i, u := range c.Users {
			vals[i] = u
		}
		args = []any{clause.IN{Column: clause.Column{Name: "user_id"}, Values: vals}}
		text = fmt.Sprintf(`clause.IN{Column: clause.Column{Name: "user_id"}, Values: []any{%s}}`, goList(c.Users))
	case cRawOr:
		args, text = []any{"user_id = ? OR user_id = ?", c.Users[0], c.Users[1]}, fmt.Sprintf(`"user_id = ? OR user_id = ?", %d, %d`, c.Users[0], c.Users[1])
	case cRawOrMixed:
		args, text = []any{"user_id = ? OR likes > ?", c.Users[0], c.N}, fmt.Sprintf(`"user_id = ? OR likes > ?", %d, %d`, c.Users[0], c.N)
	case cKeyExpr:
		args, text = []any{"user_id + 0 = ?", c.Users[0]}, fmt.Sprintf(`"user_id + 0 = ?", %d`, c.Users[0])
	case cKeyAndID:
		args, text = []any{"user_id = ? AND id = ?", c.Users[0], c.IDs[0]}, fmt.Sprintf(`"user_id = ? AND id = ?", %d, %d`, c.Users[0], c.IDs[0])
	case cSub:
		kid, kt := c.Kids[0].render(root, pins)
		model, name := any(&Photo{}), "Photo"
		if pins {
			model, name = &Pin{}, "Pin"
		}
		if root != nil {
			args = []any{"id IN (?)", root.Model(model).Select("id").Where(kid[0], kid[1:]...)}
		}
		text = fmt.Sprintf(`"id IN (?)", db.Model(&%s{}).Select("id").Where(%s)`, name, kt)
	case cGroup:
		a, at := c.Kids[0].render(root, pins)
		b, bt := c.Kids[1].render(root, pins)
		if root != nil {
			args = []any{root.Where(a[0], a[1:]...).Or(b[0], b[1:]...)}
		}
		text = fmt.Sprintf(`db.Where(%s).Or(%s)`, at, bt)
	}
	return args, text
}

// orderTotal reports whether the case's rows come in one defined order,
// so that the two sides must agree on it.
func (c dcase) orderTotal() bool {
	if c.Agg != nil {
		return c.Agg.Total
	}
	switch c.Op {
	case dFirst, dLast, dGroup, dDistinct:
		return true // GORM adds the primary key; group and distinct order by user_id
	case dCount:
		return true
	}
	if c.Order == "" {
		return false
	}
	parts := strings.Split(c.Order, ",")
	last := strings.TrimSpace(parts[len(parts)-1])
	return last == "id" || last == "id desc"
}

// ordered reports whether the rows must be compared in order (else as a
// multiset), and exact whether they must be equal (else, with LIMIT or
// OFFSET over an order that is not total, the plugin's rows must be a
// same-sized part of the unlimited answer).
func (c dcase) ordered() (ordered, exact bool) {
	total := c.orderTotal()
	limited := c.Limit != 0 || c.Offset != 0 || c.Op == dTake
	return total, total || !limited
}

// code prints the case as Go.
func (c dcase) code() string {
	var ch chain
	c.build(&ch, nil, nil)
	return ch.text.String()
}

// run runs the case on a side. root is the side's *gorm.DB; ids, on the
// plain side, are the IDs the sharded side gave created rows.
func (c dcase) run(ctx context.Context, root *gorm.DB, ids []int64) (res result) {
	defer func() {
		if r := recover(); r != nil {
			res.panicked = fmt.Sprintf("%v\n%s", r, debug.Stack())
		}
	}()
	ch := chain{q: root.WithContext(ctx)}
	return c.build(&ch, root, ids)
}

// build applies the case to ch (running it when ch.q is set) and returns
// the outcome.
func (c dcase) build(ch *chain, root *gorm.DB, ids []int64) result {
	ch.text.WriteString("db")
	if c.SkipTx {
		ch.do("Session(&gorm.Session{SkipDefaultTransaction: true})", func(q *gorm.DB) *gorm.DB {
			return q.Session(&gorm.Session{SkipDefaultTransaction: true})
		})
	}
	if c.All {
		ch.do("Clauses(AllShards())", func(q *gorm.DB) *gorm.DB { return q.Clauses(AllShards()) })
	}
	if c.Returning {
		ch.do("Clauses(clause.Returning{})", func(q *gorm.DB) *gorm.DB { return q.Clauses(clause.Returning{}) })
	}
	ret := &rowsDest{isPin: c.Pins}
	name := c.modelName()
	switch c.Op {
	case dFindSmall, dFindMap, dCount, dPluckID, dPluckCaption, dScan, dGroup, dDistinct:
		ch.do("Model(&"+name+"{})", func(q *gorm.DB) *gorm.DB { return q.Model(c.newModel(0, 0)) })
	case dUpdate:
		switch {
		case c.Returning:
			ch.do("Model(&ret)", func(q *gorm.DB) *gorm.DB { return q.Model(ret.ptr()) })
		case c.Model != nil:
			m := c.newModel(c.Model.ID, c.Model.UserID)
			ch.do(fmt.Sprintf("Model(&%s{ID: %d, UserID: %d})", name, c.Model.ID, c.Model.UserID), func(q *gorm.DB) *gorm.DB { return q.Model(m) })
		default:
			ch.do("Model(&"+name+"{})", func(q *gorm.DB) *gorm.DB { return q.Model(c.newModel(0, 0)) })
		}
	}
	if len(c.Select) > 0 {
		sel := c.Select
		ch.do(fmt.Sprintf("Select(%s)", goList(sel)), func(q *gorm.DB) *gorm.DB {
			return q.Select(sel[0], toAny(sel[1:])...)
		})
	}
	if len(c.Omit) > 0 {
		om := c.Omit
		ch.do(fmt.Sprintf("Omit(%s)", goList(om)), func(q *gorm.DB) *gorm.DB { return q.Omit(om...) })
	}
	switch {
	case c.Agg != nil:
		c.Agg.build(ch)
	case c.Op == dGroup:
		ch.do(`Select("user_id, count(*) AS n").Group("user_id").Order("user_id")`, func(q *gorm.DB) *gorm.DB {
			return q.Select("user_id, count(*) AS n").Group("user_id").Order("user_id")
		})
	case c.Op == dDistinct:
		ch.do(`Distinct("user_id").Order("user_id")`, func(q *gorm.DB) *gorm.DB { return q.Distinct("user_id").Order("user_id") })
	}
	for _, cl := range c.Calls {
		args, text := cl.C.render(root, c.Pins)
		name := [...]string{"Where", "Or", "Not"}[cl.How]
		ch.do(fmt.Sprintf("%s(%s)", name, text), func(q *gorm.DB) *gorm.DB {
			switch cl.How {
			case callOr:
				return q.Or(args[0], args[1:]...)
			case callNot:
				return q.Not(args[0], args[1:]...)
			}
			return q.Where(args[0], args[1:]...)
		})
	}
	if c.Order != "" {
		o := c.Order
		ch.do(fmt.Sprintf("Order(%q)", o), func(q *gorm.DB) *gorm.DB { return q.Order(o) })
	}
	if c.Limit != 0 {
		n := c.Limit
		ch.do(fmt.Sprintf("Limit(%d)", n), func(q *gorm.DB) *gorm.DB { return q.Limit(n) })
	}
	if c.Offset != 0 {
		n := c.Offset
		ch.do(fmt.Sprintf("Offset(%d)", n), func(q *gorm.DB) *gorm.DB { return q.Offset(n) })
	}
	var res result
	var canon func() []string
	var written func() []int64
	switch c.Op {
	case dFind:
		rows := &rowsDest{isPin: c.Pins}
		if len(c.Inline) > 0 {
			ids := c.Inline
			ch.do(fmt.Sprintf("Find(&rows, []int64{%s}) // rows []%s", goList(ids), name), func(q *gorm.DB) *gorm.DB { return q.Find(rows.ptr(), ids) })
		} else {
			ch.do("Find(&rows) // rows []"+name, func(q *gorm.DB) *gorm.DB { return q.Find(rows.ptr()) })
		}
		canon = rows.canon
	case dFindSmall, dScan:
		var rows []photoKey
		name := map[bool]string{true: "Scan", false: "Find"}[c.Op == dScan]
		if c.viaRows() {
			name = "Rows() then ScanRows, row by row, into"
		}
		ch.do(name+"(&rows) // rows []photoKey{ID, UserID int64}", func(q *gorm.DB) *gorm.DB {
			switch {
			case c.viaRows():
				return scanRowByRow(q, &rows)
			case c.Op == dScan:
				return q.Scan(&rows)
			}
			return q.Find(&rows)
		})
		canon = func() []string {
			out := make([]string, len(rows))
			for i, r := range rows {
				out[i] = fmt.Sprintf("id=%d user=%d", r.ID, r.UserID)
			}
			return out
		}
	case dFindMap:
		var rows []map[string]any
		ch.do("Find(&rows) // rows []map[string]any", func(q *gorm.DB) *gorm.DB { return q.Find(&rows) })
		canon = func() []string {
			out := make([]string, len(rows))
			for i, r := range rows {
				out[i] = mapRow(r)
			}
			return out
		}
	case dFirst, dTake, dLast:
		row := &rowDest{isPin: c.Pins}
		call := map[dop]string{dFirst: "First", dTake: "Take", dLast: "Last"}[c.Op]
		text := call + "(&row) // row " + name
		if len(c.Inline) > 0 {
			text = fmt.Sprintf("%s(&row, %d) // row %s", call, c.Inline[0], name)
		}
		ch.do(text, func(q *gorm.DB) *gorm.DB {
			switch c.Op {
			case dFirst:
				if len(c.Inline) > 0 {
					return q.First(row.ptr(), c.Inline[0])
				}
				return q.First(row.ptr())
			case dTake:
				return q.Take(row.ptr())
			}
			return q.Last(row.ptr())
		})
		canon = row.canon
	case dCount:
		var n int64
		ch.do("Count(&n)", func(q *gorm.DB) *gorm.DB { return q.Count(&n) })
		canon = func() []string { return []string{fmt.Sprintf("count=%d", n)} }
	case dPluckID:
		var ids []int64
		ch.do(`Pluck("id", &ids) // ids []int64`, func(q *gorm.DB) *gorm.DB { return q.Pluck("id", &ids) })
		canon = func() []string { return fmtAll(ids, "%d") }
	case dPluckCaption:
		var caps []string
		ch.do(`Pluck("caption", &caps) // caps []string`, func(q *gorm.DB) *gorm.DB { return q.Pluck("caption", &caps) })
		canon = func() []string { return fmtAll(caps, "%q") }
	case dGroup, dDistinct:
		if c.Agg != nil {
			canon = c.Agg.finish(ch)
			break
		}
		if c.Op == dDistinct {
			var rows []userOnly
			ch.do("Find(&rows) // rows []struct{UserID int64}", func(q *gorm.DB) *gorm.DB { return q.Find(&rows) })
			canon = func() []string {
				out := make([]string, len(rows))
				for i, r := range rows {
					out[i] = fmt.Sprintf("user=%d", r.UserID)
				}
				return out
			}
			break
		}
		var rows []userCount
		ch.do("Find(&rows) // rows []struct{UserID, N int64}", func(q *gorm.DB) *gorm.DB { return q.Find(&rows) })
		canon = func() []string {
			out := make([]string, len(rows))
			for i, r := range rows {
				out[i] = fmt.Sprintf("user=%d n=%d", r.UserID, r.N)
			}
			return out
		}
	case dUpdate:
		s := c.Set
		var text string
		var f func(q *gorm.DB) *gorm.DB
		switch s.Kind {
		case setCaption:
			text, f = fmt.Sprintf(`Update("caption", %q)`, s.S), func(q *gorm.DB) *gorm.DB { return q.Update("caption", s.S) }
		case setLikes:
			text, f = fmt.Sprintf(`Update("likes", %d)`, s.N), func(q *gorm.DB) *gorm.DB { return q.Update("likes", s.N) }
		case setMap:
			text = fmt.Sprintf(`Updates(map[string]any{"caption": %q, "likes": %d})`, s.S, s.N)
			f = func(q *gorm.DB) *gorm.DB { return q.Updates(map[string]any{"caption": s.S, "likes": s.N}) }
		case setStruct:
			text, f = fmt.Sprintf(`Updates(Photo{Likes: %d})`, s.N), func(q *gorm.DB) *gorm.DB { return q.Updates(Photo{Likes: s.N}) }
			if c.Pins {
				text, f = fmt.Sprintf(`Updates(Pin{Likes: %d})`, s.N), func(q *gorm.DB) *gorm.DB { return q.Updates(Pin{Likes: s.N}) }
			}
		case setExpr:
			text = fmt.Sprintf(`UpdateColumn("likes", gorm.Expr("likes + ?", %d))`, s.N)
			f = func(q *gorm.DB) *gorm.DB { return q.UpdateColumn("likes", gorm.Expr("likes + ?", s.N)) }
		case setKey:
			text, f = fmt.Sprintf(`Update("user_id", %d)`, s.U), func(q *gorm.DB) *gorm.DB { return q.Update("user_id", s.U) }
		case setKeyMap:
			text = fmt.Sprintf(`Updates(map[string]any{"user_id": %d, "caption": %q})`, s.U, s.S)
			f = func(q *gorm.DB) *gorm.DB { return q.Updates(map[string]any{"user_id": s.U, "caption": s.S}) }
		case setID:
			text, f = fmt.Sprintf(`Update("id", %d)`, s.ID), func(q *gorm.DB) *gorm.DB { return q.Update("id", s.ID) }
		case setSlug, setSlugNull, setSlugMap:
			text, f = s.slugCall()
		}
		if c.Returning {
			text += " // ret []" + name
		}
		ch.do(text, f)
		canon = ret.canon
	case dDelete:
		switch {
		case c.Returning:
			ch.do("Delete(&ret) // ret []"+name, func(q *gorm.DB) *gorm.DB { return q.Delete(ret.ptr()) })
		case c.Model != nil:
			m := c.newModel(c.Model.ID, c.Model.UserID)
			ch.do(fmt.Sprintf("Delete(&%s{ID: %d, UserID: %d})", name, c.Model.ID, c.Model.UserID), func(q *gorm.DB) *gorm.DB { return q.Delete(m) })
		default:
			ch.do("Delete(&"+name+"{})", func(q *gorm.DB) *gorm.DB { return q.Delete(c.newModel(0, 0)) })
		}
		canon = ret.canon
	case dDeleteIDs:
		ids := make([]int64, len(c.Rows))
		for i, r := range c.Rows {
			ids[i] = r.ID
		}
		ch.do(fmt.Sprintf("Delete(&%s{}, []int64{%s})", name, goList(ids)), func(q *gorm.DB) *gorm.DB { return q.Delete(c.newModel(0, 0), ids) })
		canon = func() []string { return nil }
	case dCreate, dSave:
		rows := c.written(ids)
		var lits []string
		for _, r := range c.Rows {
			lits = append(lits, c.rowLit(r))
		}
		call := map[dop]string{dCreate: "Create", dSave: "Save"}[c.Op]
		if c.Many {
			ch.do(fmt.Sprintf("%s(&[]%s{%s})", call, name, strings.Join(lits, ", ")), func(q *gorm.DB) *gorm.DB {
				if c.Op == dSave {
					return q.Save(rows.ptr())
				}
				return q.Create(rows.ptr())
			})
		} else {
			ch.do(fmt.Sprintf("%s(&%s%s)", call, name, lits[0]), func(q *gorm.DB) *gorm.DB {
				if c.Op == dSave {
					return q.Save(rows.first())
				}
				return q.Create(rows.first())
			})
		}
		canon = rows.canon
		written = rows.ids
	}
	if ch.q == nil {
		return res
	}
	res.err = ch.q.Error
	res.affected = ch.q.RowsAffected
	res.rows = canon()
	if written != nil {
		res.ids = written()
	}
	return res
}

// viaRows reports whether a scan case reads through Rows and ScanRows
// (the "rows" destination) instead of Scan: half of them, chosen by what
// the case already holds, so that the generator's stream, and with it
// every case of the fuzz corpus, stays as it is.
func (c dcase) viaRows() bool {
	return c.Op == dScan && (c.Limit+c.Offset+len(c.Calls))%2 == 1
}

// scanRowByRow reads q's Rows and scans each into a photoKey with
// ScanRows, as a caller of Rows does.
func scanRowByRow(q *gorm.DB, rows *[]photoKey) *gorm.DB {
	rs, err := q.Rows()
	if err != nil {
		return &gorm.DB{Error: err}
	}
	defer rs.Close()
	var n int64
	for rs.Next() {
		var r photoKey
		if err := q.ScanRows(rs, &r); err != nil {
			return &gorm.DB{Error: err}
		}
		*rows = append(*rows, r)
		n++
	}
	return &gorm.DB{Error: rs.Err(), RowsAffected: n}
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func fmtAll[T any](xs []T, f string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = fmt.Sprintf(f, x)
	}
	return out
}

func photoRows(ps []Photo) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = fmt.Sprintf("id=%d user=%d caption=%q likes=%d at=%s", p.ID, p.UserID, p.Caption, p.Likes, normTime(p.CreatedAt))
	}
	return out
}

func mapRow(r map[string]any) string {
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
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Ptr && !rv.IsNil() {
			v = fmt.Sprintf("*%v", rv.Elem()) // a nullable column's field type, *string
		}
		fmt.Fprintf(&b, "%s=%v ", k, v)
	}
	return strings.TrimSpace(b.String())
}

// normTime prints a time; times the database filled in (now()) print as
// "now", since the two sides write them at different instants.
func normTime(t time.Time) string {
	switch {
	case t.IsZero():
		return "zero"
	case t.After(diffEpoch.AddDate(5, 0, 0)):
		return "now"
	}
	return t.UTC().Format(time.RFC3339Nano)
}
