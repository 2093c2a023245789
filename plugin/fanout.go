package plugin

import (
	"errors"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
	"gorm.io/gorm"
	"gorm.io/gorm/callbacks"
)

// fanoutQuery runs a read of several shards: planned once (readplan.go),
// its units read, the servers at once, then their answers merged into
// the statement's destination.
func (p *Plugin) fanoutQuery(db *gorm.DB, d *decision) {
	stmt := db.Statement
	s := save(stmt)
	defer s.restore(stmt)
	rp, err := p.planRead(db, d, s)
	if err != nil {
		fail(db, d.m, -1, err)
		return
	}
	if rp.shape != shapeAggregate {
		// each shard's empty answer is not the read's; the merge raises
		// ErrRecordNotFound for the whole read
		defer func() { stmt.RaiseErrorOnNotFound = rp.raise }()
		stmt.RaiseErrorOnNotFound = false
	}
	res := newReadResults(rp)
	run := func(db *gorm.DB, u int) bool { return p.readUnit(db, rp, res, u) }
	for _, u := range p.fanoutByServer(db, d, rp.units, partialOf(stmt), run) {
		res.drop(u) // a server that did not answer (Partial): none of its rows
	}
	if db.Error != nil {
		return
	}
	p.mergeRead(db, rp, res, s)
}

// readResults are the units' answers, each at its unit's position in the
// plan, so that the merge does not depend on which server answers first.
type readResults struct {
	counts []int64         // shapeCount
	rows   []reflect.Value // shapeRows: a unit's rows until the unit is merged into page
	page   *pageMerger     // shapeRows
	parts  []partials      // shapeAggregate
}

func newReadResults(rp *readPlan) *readResults {
	n := len(rp.units)
	switch rp.shape {
	case shapeCount:
		return &readResults{counts: make([]int64, n)}
	case shapeAggregate:
		return &readResults{parts: make([]partials, n)}
	}
	return &readResults{rows: make([]reflect.Value, n), page: newPageMerger(rp.sliceTyp, rp.keys, rp.pushed)}
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
	}
}

// into points the statement at a fresh destination for one statement of
// unit u, and returns the function that adds what it read to the unit's
// answer.
func (r *readResults) into(stmt *gorm.Statement, rp *readPlan, u int) func() {
	switch rp.shape {
	case shapeCount:
		n := new(int64)
		stmt.Dest, stmt.ReflectValue = n, reflect.ValueOf(n).Elem()
		return func() { r.counts[u] += *n }
	case shapeAggregate:
		// GORM builds the statement for a destination; the partial rows
		// are read by partials.read, not scanned into it.
		var tmp []map[string]any
		stmt.Dest, stmt.ReflectValue = &tmp, reflect.ValueOf(&tmp).Elem()
		return func() {}
	}
	tmp := reflect.New(rp.sliceTyp)
	stmt.Dest, stmt.ReflectValue = tmp.Interface(), tmp.Elem()
	return func() { r.rows[u] = appendRows(r.rows[u], tmp.Elem()) }
}

// readUnit reads unit u and, for rows, merges them into the page once
// all of them are in: a unit whose server fails part-way adds none
// (Partial leaves it out).
func (p *Plugin) readUnit(db *gorm.DB, rp *readPlan, res *readResults, u int) bool {
	if res.page != nil && res.page.full() {
		return true
	}
	if !p.readShards(db, rp, res, u) {
		return false
	}
	if res.page != nil {
		res.page.add(u, res.rows[u])
		res.rows[u] = reflect.Value{}
	}
	return true
}

// readShards reads a unit's shards in one statement where its text
// allows (see unionSQL), else one shard at a time.
func (p *Plugin) readShards(db *gorm.DB, rp *readPlan, res *readResults, u int) bool {
	unit := rp.units[u]
	rest := unit
	if len(unit) > 1 && !db.DryRun {
		ok, unioned := p.readOne(db, rp, res, u, unit[0], unit)
		if !ok || unioned {
			return ok
		}
		rest = unit[1:] // the first shard was read alone
	}
	for _, i := range rest {
		if ok, _ := p.readOne(db, rp, res, u, i, nil); !ok {
			return false
		}
	}
	return true
}

// readOne runs one statement of unit u: shard i's, or, given the unit's
// shards in union, all of them at once (unioned reports which).
func (p *Plugin) readOne(db *gorm.DB, rp *readPlan, res *readResults, u, i int, union []int) (ok, unioned bool) {
	stmt := db.Statement
	if err := p.prepare(db, rp.d, i, rp.base); err != nil {
		fail(db, rp.d.m, rp.d.shards[i], err)
		return false, false
	}
	collect := res.into(stmt, rp, u)
	unioned = union != nil && p.unionSQL(db, rp, union)
	switch {
	case rp.shape == shapeAggregate:
		if !unioned {
			callbacks.BuildQuerySQL(db)
		}
		if db.Error == nil && !db.DryRun {
			p.bounded(db, func(db *gorm.DB) { db.AddError(res.parts[u].read(db.Statement)) })
		}
	case unioned:
		p.bounded(db, p.orig.query)
	default:
		stmt.SQL.Reset()
		stmt.Vars = nil
		p.bounded(db, p.runQuery)
	}
	if db.Error != nil {
		return false, unioned
	}
	collect()
	return true, unioned
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
		rows, err := ap.merge(res.parts)
		if err != nil {
			fail(db, rp.d.m, -1, err)
			return
		}
		stmt.Dest, stmt.ReflectValue = s.dest, s.rv
		p.scanMerged(db, rows)
		return
	}
	acc := res.page.page(rp.offset, rp.limit)
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
