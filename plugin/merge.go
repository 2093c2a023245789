package plugin

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"
)

// fanoutByServer runs run for each position of the plan's shards: the
// shards of one server one after another, the servers at once, each on a
// clone of the statement. A read in GORM's own transaction, or on one
// server, runs on the statement itself. The first error is the
// statement's; the other servers stop at their next shard. A server that
// is unavailable fails the read with a *ServerError naming the shards not
// read, or, with pr (a Partial read), is recorded there and its units
// are returned as lost, the read going on with the other servers.
func (p *Plugin) fanoutByServer(db *gorm.DB, d *decision, units [][]int, pr *PartialResult, run func(db *gorm.DB, u int) bool) (lost []int) {
	byServer := map[string][]int{}
	var servers []string
	for u, unit := range units {
		srv := d.places[unit[0]].Server
		if _, ok := byServer[srv]; !ok {
			servers = append(servers, srv)
		}
		byServer[srv] = append(byServer[srv], u)
	}
	var (
		mu     sync.Mutex
		failed atomic.Bool
	)
	// serve runs one server's units; it returns the error that stops the
	// read, nil when the server is done or recorded as missing.
	serve := func(sdb *gorm.DB, server string) error {
		us := byServer[server]
		for k, u := range us {
			if failed.Load() {
				return nil
			}
			if run(sdb, u) {
				continue
			}
			err := sdb.Error
			if !unavailable(err) {
				return err
			}
			se := &ServerError{Server: server, Table: d.m.table, Err: err}
			var known *ServerError
			if errors.As(err, &known) {
				se.Err = known.Err
			}
			for _, u := range us[k:] {
				for _, i := range units[u] {
					se.Shards = append(se.Shards, d.shards[i])
				}
			}
			slices.Sort(se.Shards)
			if s, gerr := p.pools.get(d.snap, server); gerr == nil {
				s.report(err, p.cfg.ServerRetry)
			}
			if pr == nil {
				return se
			}
			mu.Lock()
			pr.add(se)
			lost = append(lost, us[k:]...)
			mu.Unlock()
			sdb.Error = nil
			return nil
		}
		return nil
	}
	if len(servers) == 1 || d.tx != nil || db.DryRun {
		for _, server := range servers {
			if err := serve(db, server); err != nil {
				db.Error = err
				return lost
			}
		}
		return lost
	}
	var g errgroup.Group
	for _, server := range servers {
		sdb := db.Session(&gorm.Session{Context: db.Statement.Context}) // a clone of the statement
		sdb.Statement.BuildClauses = db.Statement.BuildClauses          // set per callback chain, not cloned
		g.Go(func() error {
			err := serve(sdb, server)
			if err != nil {
				failed.Store(true)
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		db.AddError(err)
	}
	return lost
}

// fanoutQuery runs a query on each shard of its plan and merges the rows:
// slices are concatenated, then sorted by the ORDER BY columns (model
// fields or map keys) and cut by LIMIT/OFFSET; a single-row destination
// gets the first merged row; a count is summed.
func (p *Plugin) fanoutQuery(db *gorm.DB, f *decision) {
	stmt := db.Statement
	s := save(stmt)
	defer s.restore(stmt)
	if ap, ok, err := planAggregate(stmt, f.m, reflect.Indirect(s.rv)); err != nil {
		fail(db, f.m, -1, err)
		return
	} else if ok {
		p.fanoutAggregate(db, f, ap, s) // aggregate.go
		return
	}
	raise := stmt.RaiseErrorOnNotFound
	defer func() { stmt.RaiseErrorOnNotFound = raise }()
	stmt.RaiseErrorOnNotFound = false

	if _, grouped := stmt.Clauses["GROUP BY"]; grouped || stmt.Distinct {
		fail(db, f.m, -1, fmt.Errorf("%w: GROUP BY and DISTINCT work per shard, so their rows from several shards cannot be merged; scope the query to one shard", ErrUnroutableSQL))
		return
	}
	if err := p.colocatedJoins(stmt, f.m); err != nil {
		fail(db, f.m, -1, err)
		return
	}
	rv := reflect.Indirect(s.rv)
	var (
		count    bool
		sliceTyp reflect.Type
		single   bool
	)
	switch rv.Kind() {
	case reflect.Slice:
		sliceTyp = rv.Type()
	case reflect.Struct, reflect.Map:
		sliceTyp, single = reflect.SliceOf(rv.Type()), true
	case reflect.Int64, reflect.Int:
		if !isCount(stmt) || hasFunctions(stmt, true) {
			fail(db, f.m, -1, fmt.Errorf("%w: only a count adds up across shards; scope other aggregates to one shard", ErrUnroutableSQL))
			return
		}
		count = true
	default:
		fail(db, f.m, -1, fmt.Errorf("%w: cannot merge a %s result across shards; use Find into a slice, or scope the query to one shard", ErrUnroutableSQL, rv.Kind()))
		return
	}
	if !count && hasFunctions(stmt, false) {
		fail(db, f.m, -1, fmt.Errorf("%w: the select list calls functions (aggregates and window functions work per shard); select plain columns across shards, or scope the query to one shard", ErrUnroutableSQL))
		return
	}
	var keys []orderKey
	if !count {
		var err error
		if keys, err = orderKeys(db, f.m, sliceTyp.Elem()); err != nil {
			fail(db, f.m, -1, err)
			return
		}
	}
	limit, offset := -1, 0
	base := s.clauses
	if c, ok := base["LIMIT"]; ok {
		if l, ok := c.Expression.(clause.Limit); ok && (l.Limit != nil || l.Offset > 0) {
			offset = l.Offset
			var e clause.Expression = literalLimit(-1) // OFFSET alone: every shard's rows
			if l.Limit != nil {
				limit = *l.Limit
				e = literalLimit(limit + offset)
			}
			base = cloneWith(base, "LIMIT", clause.Clause{Name: c.Name, Expression: e, BeforeExpression: c.BeforeExpression, AfterExpression: c.AfterExpression, AfterNameExpression: c.AfterNameExpression})
		}
	}

	// Each unit's rows (or count) land at the unit's position in the
	// plan, so the merge does not depend on which server answers first.
	units := f.units(unionShards)
	if !unionable(stmt) {
		units = f.units(1)
	}
	pushed := -1
	if limit >= 0 {
		pushed = limit + offset
	}
	counts := make([]int64, len(units))
	parts := make([]reflect.Value, len(units)) // a unit's rows until the unit is read
	var mg *pageMerger
	if !count {
		mg = newPageMerger(sliceTyp, keys, pushed)
	}
	// runShard reads shard i into unit u's result, or, given the unit's
	// shards, the whole unit in one statement (unioned reports which).
	runShard := func(db *gorm.DB, u, i int, unit []int) (ok, unioned bool) {
		stmt := db.Statement
		if err := p.prepare(db, f, i, base); err != nil {
			fail(db, f.m, f.shards[i], err)
			return false, false
		}
		var n int64
		var tmp reflect.Value
		if count {
			stmt.Dest, stmt.ReflectValue = &n, reflect.ValueOf(&n).Elem()
		} else {
			tmp = reflect.New(sliceTyp)
			stmt.Dest, stmt.ReflectValue = tmp.Interface(), tmp.Elem()
		}
		if unit != nil && p.unionSQL(db, f, unit, keys, pushed, count, true) {
			unioned = true
			p.bounded(db, p.orig.query)
		} else {
			stmt.SQL.Reset()
			stmt.Vars = nil
			p.bounded(db, p.runQuery)
		}
		if db.Error != nil {
			return false, unioned
		}
		counts[u] += n
		if !count {
			parts[u] = appendRows(parts[u], tmp.Elem())
		}
		return true, unioned
	}
	readUnit := func(db *gorm.DB, u int) bool {
		unit := units[u]
		rest := unit
		if len(unit) > 1 && !db.DryRun {
			ok, unioned := runShard(db, u, unit[0], unit)
			if !ok || unioned {
				return ok
			}
			rest = unit[1:] // the first shard was read alone
		}
		for _, i := range rest {
			if ok, _ := runShard(db, u, i, nil); !ok {
				return false
			}
		}
		return true
	}
	// runUnit reads a unit and merges its rows once all of them are in: a
	// unit whose server fails part-way adds none (Partial leaves it out).
	runUnit := func(db *gorm.DB, u int) bool {
		if mg != nil && mg.full() {
			return true
		}
		if !readUnit(db, u) {
			return false
		}
		if mg != nil {
			mg.add(u, parts[u])
			parts[u] = reflect.Value{}
		}
		return true
	}
	for _, u := range p.fanoutByServer(db, f, units, partialOf(stmt), runUnit) {
		counts[u], parts[u] = 0, reflect.Value{} // a server that did not answer: none of its rows
	}
	if db.Error != nil {
		return
	}
	if count {
		var sum int64
		for _, n := range counts {
			sum += n
		}
		rv.SetInt(sum)
		db.RowsAffected = 1
		return
	}
	acc := mg.page(offset, limit)
	db.RowsAffected = int64(acc.Len())
	switch {
	case single && acc.Len() > 0:
		rv.Set(acc.Index(0))
	case single:
		if raise {
			db.AddError(gorm.ErrRecordNotFound)
		}
	default:
		rv.Set(acc)
	}
}

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

func cloneWith(m map[string]clause.Clause, k string, v clause.Clause) map[string]clause.Clause {
	out := make(map[string]clause.Clause, len(m))
	for key, val := range m {
		out[key] = val
	}
	out[k] = v
	return out
}

// orderKey is one ORDER BY column resolved to a field of the rows the
// query returns (or a map key).
type orderKey struct {
	field  *schema.Field // of the destination's row type; nil: map rows, use name
	name   string
	desc   bool
	scalar bool // the row is the value
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
			if !orderable(typ) {
				return nil, fmt.Errorf("%w: ORDER BY %s across shards: the plugin merges rows in order only by integer, float, string, bool and time columns", ErrUnroutableSQL, name)
			}
			if err := m.textOrderErr(db.Statement.Context, name); err != nil {
				return nil, err
			}
			keys = append(keys, k)
		}
	}
	return keys, nil
}

var timeType = reflect.TypeOf(time.Time{})

// orderable reports whether compare orders values of type t as Postgres
// orders the column.
func orderable(t reflect.Type) bool {
	if t == nil {
		return false
	}
	for t.Kind() == reflect.Ptr {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64, reflect.String, reflect.Bool:
		return true
	}
	return t == timeType
}

func isFloat(t reflect.Type) bool {
	for t.Kind() == reflect.Ptr {
		t = t.Elem()
	}
	return t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64
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

// compare orders two scalar values as Postgres does: NULL (a nil
// pointer, a missing map value) after every value; unknown kinds equal.
func compare(a, b reflect.Value) int {
	switch {
	case !a.IsValid() && !b.IsValid():
		return 0
	case !a.IsValid():
		return 1
	case !b.IsValid():
		return -1
	}
	switch a.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return cmp3(a.Int() < b.Int(), a.Int() > b.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return cmp3(a.Uint() < b.Uint(), a.Uint() > b.Uint())
	case reflect.Float32, reflect.Float64:
		return compareFloat(a.Float(), b.Float())
	case reflect.String:
		return strings.Compare(a.String(), b.String())
	case reflect.Bool:
		return cmp3(!a.Bool() && b.Bool(), a.Bool() && !b.Bool())
	}
	if ta, ok := a.Interface().(time.Time); ok {
		if tb, ok := b.Interface().(time.Time); ok {
			return ta.Compare(tb)
		}
	}
	return 0
}

// compareFloat orders floats as Postgres orders float4 and float8: NaN
// equals NaN and sorts above every number, +Inf included.
func compareFloat(x, y float64) int {
	switch xn, yn := math.IsNaN(x), math.IsNaN(y); {
	case xn && yn:
		return 0
	case xn:
		return 1
	case yn:
		return -1
	}
	return cmp3(x < y, x > y)
}

func cmp3(less, more bool) int {
	switch {
	case less:
		return -1
	case more:
		return 1
	}
	return 0
}
