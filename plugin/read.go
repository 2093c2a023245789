package plugin

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync/atomic"

	"gorm.io/gorm"

	"github.com/shardkit/shardkit/internal/memrows"
	"github.com/shardkit/shardkit/internal/pgorder"
)

// fanoutQuery runs a read of several shards in five stages, each in the
// files named for it (doc.go maps them): plan (read_plan*.go: what each
// shard runs, how the shards are batched, how the answers merge), render
// (read_render*.go: every statement's text and arguments, built with
// GORM), execute (read_exec*.go: the servers at once, each running its
// statements' text and reading their rows), merge (read_merge*.go, and
// take and mergeRead here: each answer merged as it arrives) and scan
// (read_scan*.go: only the page scanned by GORM, or the merged rows
// served as *sql.Rows). All but execute run on the caller's goroutine;
// execute's goroutines never touch GORM state.
func (p *Plugin) fanoutQuery(db *gorm.DB, d *decision) { p.readAcrossFresh(db, d, nil) }

// readAcross is fanoutQuery's stages. With out set (Row, Rows, Scan), the
// merged rows are not scanned into the statement's destination: they are
// left in *out as the driver returned them, with their columns, in the
// order and number Find would scan them (read_scan_rows.go).
func (p *Plugin) readAcross(db *gorm.DB, d *decision, out **memrows.Rows) {
	stmt := db.Statement
	s := save(stmt)
	defer s.restore(stmt)
	plan := s
	if out != nil {
		plan.rv = reflect.ValueOf(new([][]any))
	}
	rp, err := p.planRead(db, d, plan)
	if err != nil {
		fail(db, d.m, -1, err)
		return
	}
	rp.raw = out != nil
	rp.kinds, rp.late = rp.lateScan()
	if rp.shape != shapeAggregate {
		// each shard's empty answer is not the read's; the merge raises
		// ErrRecordNotFound for the whole read
		defer func() { stmt.RaiseErrorOnNotFound = rp.raise }()
		stmt.RaiseErrorOnNotFound = false
	}
	stmts, err := p.renderRead(db, rp)
	if err != nil {
		db.AddError(err)
		return
	}
	res := newReadResults(rp, stmts, partialOf(stmt))
	if f := res.pageFilter(rp, &p.cutRows); f != nil {
		for k := range stmts {
			if stmts[k].named {
				stmts[k].filter = f
			}
		}
	}
	if !db.DryRun {
		var enough *atomic.Bool // only a read whose page can fill stops early
		if res.page != nil && res.page.canFill() {
			enough = &res.enough
		}
		x := newReadExec(p, stmt.Context, d.m.table, stmts, enough)
		x.run(d.tx != nil, func(k int) bool { return p.take(db, rp, res, x, k) })
		if db.Error != nil {
			return
		}
	}
	p.mergeRead(db, rp, res, s)
	if out != nil {
		*out = res.out
	}
}

// readResults are the units' answers, each at its unit's position in the
// plan, so that the merge does not depend on which server answers first.
// Only the caller's goroutine reads and writes them.
type readResults struct {
	counts  []int64             // shapeCount
	rows    []reflect.Value     // shapeRows: a unit's rows until the unit is merged into page
	hk      [][][]pgorder.Value // shapeRows with hidden keys: a unit's rows' ORDER BY values
	raw     [][][]any           // and the same as the driver returned them
	page    *pageMerger         // shapeRows
	parts   []partials          // shapeAggregate
	pending []int               // per unit, its statements not answered yet
	partial *PartialResult      // the read's Partial scope, nil without one
	enough  atomic.Bool         // the page needs no more rows (see pageMerger.full)
	served  []string            // the servers that answered, in order, none that failed after
	cols    []memrows.Column    // rp.raw: the columns of the rows, as the first answer gave them
	out     *memrows.Rows       // rp.raw: the merged rows
	// rp.late: the column sets the answers came with, and where each
	// holds the ORDER BY keys (nil: not all found) (read_scan_late.go)
	colsets [][]memrows.Column
	keyCols [][]int
}

func newReadResults(rp *readPlan, stmts []readStmt, pr *PartialResult) *readResults {
	n := len(rp.units)
	r := &readResults{pending: make([]int, n), partial: pr}
	for _, st := range stmts {
		r.pending[st.unit]++
	}
	switch rp.shape {
	case shapeCount:
		r.counts = make([]int64, n)
	case shapeAggregate:
		r.parts = make([]partials, n)
	default:
		keep := rp.pushed
		if rp.pgOrder() {
			keep = -1 // every candidate, ordered in Postgres at the end (read_merge_coll.go)
		}
		r.rows, r.page = make([]reflect.Value, n), newPageMerger(rp.sliceTyp, rp.keys, keep)
		switch {
		case rp.hidden:
			r.hk, r.raw = make([][][]pgorder.Value, n), make([][][]any, n)
		case rp.late:
			r.hk = make([][][]pgorder.Value, n)
		}
		if rp.scansPage() {
			r.page = newPageMerger(lateRowsType, rp.keys, keep)
		}
	}
	return r
}

// take handles statement k's answer on the caller's goroutine: its rows
// are scanned and kept for their unit, and a unit whose statements are
// all in is merged; a failure fails the read, or, for a server that is
// unavailable in a Partial read, leaves that server's units from k's on
// out of it. It returns false when the read has failed.
func (p *Plugin) take(db *gorm.DB, rp *readPlan, res *readResults, x *readExec, k int) bool {
	st, a := &x.stmts[k], x.answer(k)
	if a.err != nil {
		return p.unitFailed(db, rp, res, x, k)
	}
	u := st.unit
	switch rp.shape {
	case shapeCount:
		var n int64
		if !p.scanAnswer(db, a.rows, &n) {
			return false
		}
		res.counts[u] += n
	case shapeAggregate:
		if res.parts[u].cols == nil {
			res.parts[u].cols = a.rows.cols
		}
		res.parts[u].rows = append(res.parts[u].rows, a.rows.rows...)
	default:
		rows := a.rows
		if rp.hidden {
			var hk [][]pgorder.Value
			var raw [][]any
			var err error
			if rows, hk, raw, err = p.hiddenValues(db, rp, rows); err != nil {
				fail(db, rp.d.m, -1, err)
				return false
			}
			res.hk[u], res.raw[u] = append(res.hk[u], hk...), append(res.raw[u], raw...)
		}
		if rp.raw {
			if res.cols == nil {
				res.cols = rows.cols
			}
			res.rows[u] = appendRows(res.rows[u], reflect.ValueOf(rows.rows))
			break
		}
		if rp.late {
			lr, hk, ok := p.lateRows(db, rp, res, u, rows)
			if !ok {
				return false
			}
			res.rows[u], res.hk[u] = appendRows(res.rows[u], reflect.ValueOf(lr)), append(res.hk[u], hk...)
			break
		}
		if rp.scansPage() {
			res.rows[u] = appendRows(res.rows[u], reflect.ValueOf(res.unscanned(rows)))
			break
		}
		tmp := reflect.New(rp.sliceTyp)
		if !p.scanAnswer(db, rows, tmp.Interface()) {
			return false
		}
		res.rows[u] = appendRows(res.rows[u], tmp.Elem())
	}
	if !slices.Contains(res.served, st.server) {
		res.served = append(res.served, st.server)
	}
	if res.pending[u]--; res.pending[u] == 0 && res.page != nil {
		// a unit whose server fails part-way adds none (Partial)
		switch {
		case rp.hidden:
			res.page.add(u, res.rows[u], res.hk[u], res.raw[u])
			res.hk[u], res.raw[u] = nil, nil
		case rp.late:
			res.page.add(u, res.rows[u], res.hk[u], nil)
			res.hk[u] = nil
		default:
			res.page.add(u, res.rows[u], nil, nil)
		}
		res.rows[u] = reflect.Value{}
		if res.page.full() {
			res.enough.Store(true)
		}
	}
	return true
}

// unitFailed handles the failure of statement k (see take).
func (p *Plugin) unitFailed(db *gorm.DB, rp *readPlan, res *readResults, x *readExec, k int) bool {
	st, err := &x.stmts[k], x.answer(k).err
	if !unavailable(err) {
		db.AddError(err)
		return false
	}
	se := &ServerError{Server: st.server, Table: rp.d.m.table, Err: err}
	var known *ServerError
	if errors.As(err, &known) {
		se.Err = known.Err
	}
	units := x.following(k)
	for _, u := range units {
		for _, i := range rp.units[u] {
			se.Shards = append(se.Shards, rp.d.shards[i])
		}
	}
	slices.Sort(se.Shards)
	if s, gerr := p.pools.get(rp.d.snap, st.server); gerr == nil {
		s.report(err, p.cfg.ServerRetry)
	}
	if res.partial == nil {
		db.AddError(se)
		return false
	}
	res.partial.add(se)
	res.served = slices.DeleteFunc(res.served, func(s string) bool { return s == st.server })
	for _, u := range units {
		res.drop(u)
	}
	return true
}

// drop forgets what unit u read.
func (r *readResults) drop(u int) {
	switch {
	case r.counts != nil:
		r.counts[u] = 0
	case r.parts != nil:
		r.parts[u] = partials{}
	default:
		r.rows[u] = reflect.Value{}
		if r.hk != nil {
			r.hk[u] = nil
		}
		if r.raw != nil {
			r.raw[u] = nil
		}
	}
}

// scanAnswer scans a statement's rows into dest with GORM's own scanning,
// on the caller's goroutine, as GORM's query callback scans a server's
// rows: the same conversions, from the same driver values.
func (p *Plugin) scanAnswer(db *gorm.DB, pt partials, dest any) bool {
	rows, err := memrows.Query(context.Background(), pt.memRows())
	if err != nil {
		db.AddError(err)
		return false
	}
	defer rows.Close()
	stmt := db.Statement
	stmt.Dest, stmt.ReflectValue = dest, reflect.ValueOf(dest).Elem()
	gorm.Scan(rows, db, 0)
	return db.Error == nil
}

// mergeRead puts the merged answer of the units into the statement's
// destination.
func (p *Plugin) mergeRead(db *gorm.DB, rp *readPlan, res *readResults, s saved) {
	stmt := db.Statement
	rv := reflect.Indirect(s.rv)
	switch rp.shape {
	case shapeCount:
		var sum int64
		for _, n := range res.counts {
			sum += n
		}
		rv.SetInt(sum)
		db.RowsAffected = 1
		return
	case shapeAggregate:
		if db.DryRun {
			return
		}
		ap := rp.agg
		ap.table = rp.d.m.table
		ap.textColl = rp.d.m.anyTextCollation(stmt.Context)
		ap.nondet = rp.d.m.nondeterministicText()
		var rows *memrows.Rows
		var err error
		if cols := firstCols(res.parts); cols != nil && ap.finishReason(ap.kinds(cols)) != "" {
			rows, err = p.finishInPostgres(stmt.Context, rp, res.parts, res.served)
		} else {
			rows, err = ap.merge(res.parts)
		}
		if err != nil {
			fail(db, rp.d.m, -1, err)
			return
		}
		if rp.raw {
			res.out = rows
			return
		}
		stmt.Dest, stmt.ReflectValue = s.dest, s.rv
		p.scanMerged(db, rows)
		return
	}
	var acc reflect.Value
	if rp.pgOrder() && !db.DryRun {
		var err error
		if acc, err = p.orderInPostgres(stmt.Context, rp, res.page, res.served); err != nil {
			fail(db, rp.d.m, -1, err)
			return
		}
	} else {
		acc = res.page.page(rp.offset, rp.limit)
	}
	if rp.scansPage() {
		var ok bool
		if acc, ok = p.scanPage(db, rp, res, acc.Interface().([]lateRow)); !ok {
			return
		}
	}
	if rp.raw {
		res.out = partials{cols: res.cols, rows: acc.Interface().([][]any)}.memRows()
		return
	}
	db.RowsAffected = int64(acc.Len())
	switch {
	case rp.single && acc.Len() > 0:
		rv.Set(acc.Index(0))
	case rp.single:
		if rp.raise {
			db.AddError(gorm.ErrRecordNotFound)
		}
	default:
		rv.Set(acc)
	}
}

// firstCols returns the columns of the first unit that answered, nil if
// none did.
func firstCols(parts []partials) []memrows.Column {
	for _, pt := range parts {
		if pt.cols != nil {
			return pt.cols
		}
	}
	return nil
}

// hiddenValues splits an answer of a read with hidden ORDER BY values
// (its last columns, one per key) into the rows GORM scans and each row's
// ORDER BY values, on the caller's goroutine. It refuses values the
// merge cannot order as Postgres does.
func (p *Plugin) hiddenValues(db *gorm.DB, rp *readPlan, pt partials) (partials, [][]pgorder.Value, [][]any, error) {
	nk := len(rp.keys)
	w := len(pt.cols) - nk
	if w < 0 {
		return pt, nil, nil, fmt.Errorf("shardkit: an answer has %d columns, fewer than its %d ORDER BY values", len(pt.cols), nk)
	}
	if rp.hiddenTypes == nil {
		types := make([]string, nk)
		for j, k := range rp.keys {
			types[j] = pt.cols[w+j].DBType
			switch kind := pgorder.KindOf(types[j]); {
			case kind == pgorder.Other && k.pgType != "":
			case kind == pgorder.Other:
				return pt, nil, nil, fmt.Errorf("%w: ORDER BY %s across shards: the plugin does not order values of type %s; order by integer, numeric, float, text, time, bool or bytea values", ErrUnroutableSQL, k.name, types[j])
			case kind == pgorder.Text && k.expr && k.opaque:
				return pt, nil, nil, fmt.Errorf("%w: ORDER BY %s across shards: text computed by an expression over a joined table the plugin does not know cannot be ordered in its collation; order by a column, or scope the query to one shard", ErrUnroutableSQL, k.name)
			case kind == pgorder.Text && k.expr && k.coll == nil:
				joined, _ := joinedTables(db.Statement, rp.d.m)
				if c := rp.d.m.anyTextCollation(db.Statement.Context, joined...); c != "" {
					return pt, nil, nil, fmt.Errorf("%w: ORDER BY %s across shards: text computed by an expression cannot be ordered in its collation (%s has text in %s); order by a column, or scope the query to one shard", ErrUnroutableSQL, k.name, rp.d.m.table, c)
				}
			}
		}
		rp.hiddenTypes = types
	}
	out := partials{cols: pt.cols[:w], rows: make([][]any, len(pt.rows))}
	hk := make([][]pgorder.Value, len(pt.rows))
	raw := make([][]any, len(pt.rows))
	for i, row := range pt.rows {
		out.rows[i], raw[i] = row[:w], row[w:]
		hk[i] = make([]pgorder.Value, nk)
		for j := range nk {
			hk[i][j] = pgorder.Of(pgorder.KindOf(rp.hiddenTypes[j]), raw[i][j])
		}
	}
	return out, hk, raw, nil
}
