package plugin

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"

	"gorm.io/gorm"
	"gorm.io/gorm/callbacks"

	"github.com/shardkit/shardkit/router"
)

// CopyFrom loads rows of a registered model into their shards with
// Postgres COPY: the bulk path for imports, where one INSERT per batch
// costs too much.
//
//	photos := []Photo{{UserID: 1, Caption: "a"}, {UserID: 2, Caption: "b"}}
//	report, err := plugin.CopyFrom(ctx, db, photos, plugin.OnCopyProgress(func(p plugin.CopyProgress) {
//		log.Printf("%d of %d rows", p.Rows, p.TotalRows)
//	}))
//
// rows is a slice (or a pointer to one) of a model registered with the
// plugin on db, or of pointers to it. Like db.Create, CopyFrom runs the
// rows' BeforeSave and BeforeCreate hooks (unless the session skips
// hooks), sets zero CreatedAt/UpdatedAt-style fields and fields with a Go
// default, and fills zero IDs, in the structs, from Config.IDs (a whole
// run of IDs per shard when the source has a Fill method, as
// *idgen.Generator does) or, without an ID slot, from the shard's own
// next_id() in the part's transaction. A zero field whose column has a
// database default gets that default, as with Create. Given IDs must lie
// in their row's shard; rows of a model keyed by its own ID need them.
// After hooks and associations are not run.
//
// The rows are split per logical shard; each shard's part is written by
// one COPY (one per set of columns, when some rows leave defaulted columns
// zero) in a transaction of its own on the shard's current home, so a part
// is in its shard completely or not at all. Parts on different servers,
// and up to CopyWorkers parts per server, run at once. A fenced shard's
// part waits as a write does (Config.FenceWait); a part the shard's old
// home refuses because the shard moved is rolled back and written once
// more on the new home.
//
// The report says what went where. When any part fails, the other parts
// are still written and err is a *CopyError holding the same report: the
// failed shards hold none of their part's rows, so loading those rows
// again (CopyReport.Failed) finishes the load. CopyFrom runs outside any
// transaction; call it on a db that is not in one.
func CopyFrom(ctx context.Context, db *gorm.DB, rows any, opts ...CopyOption) (*CopyReport, error) {
	cfg := copyConfig{workers: defaultCopyWorkers}
	for _, o := range opts {
		o(&cfg)
	}
	cfg.workers = max(cfg.workers, 1)
	p, ok := db.Config.Plugins[(&Plugin{}).Name()].(*Plugin)
	if !ok || p.byTable == nil {
		return nil, fmt.Errorf("shardkit: %w: CopyFrom needs a gorm.DB with the shardkit plugin installed (db.Use)", ErrInvalidConfig)
	}
	if _, inTx := db.Statement.ConnPool.(gorm.TxCommitter); inTx || txOf(db.Statement.ConnPool) != nil {
		return nil, fmt.Errorf("shardkit: %w: CopyFrom inside a transaction; it writes each shard's part in a transaction of its own, so call it outside one", ErrUnroutableSQL)
	}
	rv := reflect.Indirect(reflect.ValueOf(rows))
	if rv.Kind() != reflect.Slice {
		return nil, fmt.Errorf("shardkit: %w: CopyFrom of a %T; pass a slice of a registered model", ErrUnroutableSQL, rows)
	}
	m := p.modelOf(rv.Type().Elem())
	if m == nil {
		return nil, fmt.Errorf("shardkit: %w: CopyFrom of %s, which is not registered with the plugin", ErrInvalidModel, rv.Type().Elem())
	}
	db = db.WithContext(ctx)
	if len(db.Statement.Selects) > 0 || len(db.Statement.Omits) > 0 {
		return nil, fmt.Errorf("shardkit: %w: CopyFrom writes every column of %s; Select and Omit do not apply", ErrUnroutableSQL, m.schema.Name)
	}
	l, err := p.prepareCopy(db, m, rv)
	if err != nil {
		return nil, err
	}
	return p.runCopy(ctx, l, cfg)
}

// CopyOption configures one CopyFrom.
type CopyOption func(*copyConfig)

type copyConfig struct {
	workers  int
	progress func(CopyProgress)
}

// CopyWorkers sets how many shard parts CopyFrom writes at once on each
// server (each on a connection of its own). Values below 1 mean 1.
func CopyWorkers(n int) CopyOption { return func(c *copyConfig) { c.workers = n } }

// OnCopyProgress sets a function CopyFrom calls after each shard part,
// committed or failed. Calls never overlap; a slow function slows the load.
func OnCopyProgress(fn func(CopyProgress)) CopyOption {
	return func(c *copyConfig) { c.progress = fn }
}

// CopyProgress is how far a CopyFrom has come.
type CopyProgress struct {
	Rows, TotalRows   int64    // rows committed so far, rows to load
	Parts, TotalParts int      // parts finished (committed or failed), parts in all
	Failed            int      // parts failed so far
	Last              CopyPart // the part that just finished
}

// CopyState is the outcome of one shard's part of a CopyFrom.
type CopyState string

const (
	// CopyCommitted: every row of the part is in the shard.
	CopyCommitted CopyState = "committed"
	// CopyFailed: the part's transaction was rolled back; none of its
	// rows is in the shard.
	CopyFailed CopyState = "failed"
	// CopyNotRun: the part was never started (the context ended first);
	// none of its rows is in the shard.
	CopyNotRun CopyState = "not run"
	// CopyUnknown: the connection broke while the part's commit (its
	// COPY, or its COMMIT) was under way, so the part is in the shard
	// completely or not at all, and only the shard can tell which: look
	// its IDs up before loading it again.
	CopyUnknown CopyState = "unknown"
)

// CopyPart is one shard's part of a CopyFrom.
type CopyPart struct {
	Shard  int
	Server string // server written to ("" if never started)
	Rows   int    // rows of the part
	State  CopyState
	Err    error // why it failed; nil when committed
	// Index holds the positions in the caller's slice of the part's
	// rows, in the order they were written.
	Index []int
}

// CopyReport says what a CopyFrom wrote where.
type CopyReport struct {
	Table string
	Rows  int64      // rows committed
	Parts []CopyPart // one per shard, by shard number
}

// Failed returns the parts that are not committed.
func (r *CopyReport) Failed() []CopyPart {
	var out []CopyPart
	for _, p := range r.Parts {
		if p.State != CopyCommitted {
			out = append(out, p)
		}
	}
	return out
}

// CopyError reports a CopyFrom in which some shards' parts were not
// written. Every other part is committed; a failed part left nothing in
// its shard (see CopyState). errors.Is sees the parts' errors.
type CopyError struct {
	Report *CopyReport
}

func (e *CopyError) Error() string {
	failed := e.Report.Failed()
	var b strings.Builder
	fmt.Fprintf(&b, "shardkit: COPY into %s: %d of %d shard parts not written (%d rows committed in the others); a failed part wrote no row, so load the rows of the failed parts again:",
		e.Report.Table, len(failed), len(e.Report.Parts), e.Report.Rows)
	for i, p := range failed {
		if i == 5 {
			fmt.Fprintf(&b, " … and %d more", len(failed)-i)
			break
		}
		fmt.Fprintf(&b, " shard %d (%d rows) %s", p.Shard, p.Rows, p.State)
		if p.Err != nil {
			fmt.Fprintf(&b, ": %v", p.Err)
		}
		b.WriteByte(';')
	}
	return strings.TrimSuffix(b.String(), ";")
}

// Unwrap returns the failed parts' errors.
func (e *CopyError) Unwrap() []error {
	var errs []error
	for _, p := range e.Report.Parts {
		if p.Err != nil {
			errs = append(errs, p.Err)
		}
	}
	return errs
}

// modelOf finds the registered model of a slice element type.
func (p *Plugin) modelOf(t reflect.Type) *model {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	for _, m := range p.byTable {
		if m.schema.ModelType == t {
			return m
		}
	}
	return nil
}

// copyLoad is a CopyFrom's rows, prepared and split per shard.
type copyLoad struct {
	m     *model
	rv    reflect.Value
	cols  copyColumns
	parts []*copyJob
	total int64
}

// copyJob is one shard's part while it runs.
type copyJob struct {
	CopyPart
	needIDs []int // rows (caller's positions) whose ID the shard's next_id() gives
}

// prepareCopy does in Go what db.Create does before its INSERT: hooks,
// timestamps and Go defaults, the shard of each row, the check of given
// IDs. IDs are filled later, per part.
func (p *Plugin) prepareCopy(db *gorm.DB, m *model, rv reflect.Value) (*copyLoad, error) {
	ctx := db.Statement.Context
	s := m.schema
	cols, err := copyColumnsOf(m)
	if err != nil {
		return nil, err
	}
	l := &copyLoad{m: m, rv: rv, cols: cols}
	hooks := !db.Statement.SkipHooks && (s.BeforeSave || s.BeforeCreate)
	now := db.NowFunc()
	snap := p.router.Snapshot()
	byShard := map[int][]int{}
	for i := 0; i < rv.Len(); i++ {
		row := rv.Index(i)
		if row.Kind() == reflect.Pointer {
			if row.IsNil() {
				return nil, fmt.Errorf("shardkit: %w: CopyFrom row %d is nil", ErrUnroutableSQL, i)
			}
			row = row.Elem()
		}
		if !row.CanAddr() {
			return nil, fmt.Errorf("shardkit: %w: CopyFrom needs addressable rows to fill their IDs", ErrInvalidModel)
		}
		if hooks {
			if err := copyHooks(db, s.BeforeSave, s.BeforeCreate, row.Addr().Interface()); err != nil {
				return nil, fmt.Errorf("shardkit: CopyFrom row %d: %w", i, err)
			}
		}
		for _, f := range l.cols.fields {
			if _, zero := f.ValueOf(ctx, row); !zero {
				continue
			}
			var err error
			if f.DefaultValueInterface != nil {
				err = f.Set(ctx, row, f.DefaultValueInterface)
			} else if f.AutoCreateTime > 0 || f.AutoUpdateTime > 0 {
				err = f.Set(ctx, row, now)
			}
			if err != nil {
				return nil, fmt.Errorf("shardkit: CopyFrom row %d: set %s: %w", i, f.Name, err)
			}
		}
		shard, err := m.shardOfRow(db, row, snap)
		if err != nil {
			return nil, &ShardError{Shard: -1, Table: m.table, Err: fmt.Errorf("CopyFrom row %d: %w", i, zeroKey(err))}
		}
		if pk := m.pk.ReflectValueOf(ctx, row); !pk.IsZero() {
			id := intOf(pk)
			if s, err := shardOfID(id, snap); err != nil || s != shard {
				return nil, &ShardError{Shard: shard, Table: m.table, Err: fmt.Errorf("%w: CopyFrom row %d: ID %d is in shard %d, the row's %s is in shard %d", ErrIDShardMismatch, i, id, s, m.key.Name, shard)}
			}
		}
		byShard[shard] = append(byShard[shard], i)
	}
	for shard, idx := range byShard {
		l.parts = append(l.parts, &copyJob{CopyPart: CopyPart{Shard: shard, Rows: len(idx), State: CopyNotRun, Index: idx}})
		l.total += int64(len(idx))
	}
	sort.Slice(l.parts, func(i, j int) bool { return l.parts[i].Shard < l.parts[j].Shard })
	return l, nil
}

// copyHooks runs a row's BeforeSave and BeforeCreate hooks, as GORM's
// Create does.
func copyHooks(db *gorm.DB, save, create bool, row any) error {
	if save {
		if h, ok := row.(callbacks.BeforeSaveInterface); ok {
			if err := h.BeforeSave(db); err != nil {
				return err
			}
		}
	}
	if create {
		if h, ok := row.(callbacks.BeforeCreateInterface); ok {
			return h.BeforeCreate(db)
		}
	}
	return nil
}

// runCopy writes the parts: workers per server take parts from a queue
// that alternates between servers, and each part finds its shard's home
// when it starts.
func (p *Plugin) runCopy(ctx context.Context, l *copyLoad, cfg copyConfig) (*CopyReport, error) {
	snap := p.router.Snapshot()
	byServer := map[string][]*copyJob{}
	var servers []string
	for _, j := range l.parts {
		pl, err := snap.Placement(j.Shard)
		if err != nil {
			return nil, err
		}
		if _, ok := byServer[pl.Server]; !ok {
			servers = append(servers, pl.Server)
		}
		byServer[pl.Server] = append(byServer[pl.Server], j)
	}
	sort.Strings(servers)
	queue := make(chan *copyJob, len(l.parts))
	for i := 0; len(queue) < len(l.parts); i++ {
		for _, s := range servers {
			if i < len(byServer[s]) {
				queue <- byServer[s][i]
			}
		}
	}
	close(queue)
	types := &copyTypes{}
	var (
		mu   sync.Mutex
		prog = CopyProgress{TotalRows: l.total, TotalParts: len(l.parts)}
		wg   sync.WaitGroup
	)
	for range min(cfg.workers*len(servers), len(l.parts)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range queue {
				if ctx.Err() != nil {
					j.Err = &ShardError{Shard: j.Shard, Table: l.m.table, Err: ctx.Err()}
					continue
				}
				p.copyPart(ctx, l, j, types)
				mu.Lock()
				prog.Parts++
				if j.State == CopyCommitted {
					prog.Rows += int64(j.Rows)
				} else {
					prog.Failed++
				}
				prog.Last = j.CopyPart
				if cfg.progress != nil {
					cfg.progress(prog)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	r := &CopyReport{Table: l.m.table, Parts: make([]CopyPart, len(l.parts))}
	failed := false
	for i, j := range l.parts {
		r.Parts[i] = j.CopyPart
		if j.State == CopyCommitted {
			r.Rows += int64(j.Rows)
		} else {
			failed = true
		}
	}
	if failed {
		return r, &CopyError{Report: r}
	}
	return r, nil
}

// copyPart writes one shard's part on the shard's home: after a fence,
// and once more on the new home when the old one refuses it because the
// shard moved.
func (p *Plugin) copyPart(ctx context.Context, l *copyLoad, j *copyJob, types *copyTypes) {
	table := l.m.table
	failPart := func(server string, err error) {
		j.State = CopyFailed
		j.Server = server
		switch se, ok := err.(*ShardError); {
		case !ok:
			err = &ShardError{Shard: j.Shard, Server: server, Table: table, Err: err}
		case se.Table == "":
			named := *se // a fence wait's error names no table
			named.Table = table
			err = &named
		}
		j.Err = err
	}
	if err := p.copyIDs(ctx, l, j); err != nil {
		failPart("", err)
		return
	}
	snap := p.router.Snapshot()
	pl, err := snap.Placement(j.Shard)
	if err == nil && pl.State == router.StateFenced {
		snap, pl, err = p.waitFence(ctx, j.Shard)
	}
	if err != nil {
		failPart(pl.Server, err)
		return
	}
	for retried := false; ; retried = true {
		j.Server = pl.Server
		state, err := p.copyOnServer(ctx, l, j, snap, pl.Server, types)
		if err == nil {
			j.State, j.Err = CopyCommitted, nil
			return
		}
		if state == CopyUnknown {
			j.State, j.Err = CopyUnknown, &ShardError{Shard: j.Shard, Server: pl.Server, Table: table, Err: err}
			return
		}
		moved := p.movedFrom(ctx, j.Shard, pl.Server, err)
		if !moved || retried {
			if moved {
				err = fmt.Errorf("%w: %w", ErrShardMoved, err)
			}
			failPart(pl.Server, err)
			return
		}
		old := pl.Server
		if snap, pl, err = p.awaitMove(ctx, j.Shard, old); err != nil {
			failPart(old, fmt.Errorf("%w: %w", ErrShardMoved, err))
			return
		}
	}
}
