package migrations

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/shardschema"
	"github.com/shardkit/shardkit/router"
)

// Defaults of MigrateOptions.
const (
	DefaultLockTimeout = 500 * time.Millisecond
	DefaultMaxLockWait = time.Minute
	defaultRetryBase   = 200 * time.Millisecond
	defaultRetryMax    = 5 * time.Second
)

// Summary is what a Migrate run did, or in a dry run would do.
type Summary struct {
	// Schemas is how many shard schemas the run brought up to date;
	// Pending how many needed work when it started.
	Schemas, Pending int
	Servers          int
	Elapsed          time.Duration
	// Retries counts lock timeouts, each followed by a retry of its schema
	// (or, past MaxLockWait, by giving the schema up).
	Retries int
	// LongestLockWait is the most time one schema spent in attempts that
	// timed out waiting for a lock; LongestLockSchema names it.
	LongestLockWait   time.Duration
	LongestLockSchema string
	// SlowestSchema is the longest successful attempt on one schema
	// (lock waits under LockTimeout included).
	SlowestSchema time.Duration
	// Recorded lists the files this run recorded in the catalog; empty when
	// it recorded none (nothing new, a dry run, a failure, or a run limited
	// to some servers while others lack the files).
	Recorded []string
	// Planned is, for a dry run, what would run where: one line per
	// server and file.
	Planned []PlannedStep
}

// PlannedStep is one file that a dry run found pending on a server.
type PlannedStep struct {
	Server  string `json:"server"`
	File    string `json:"file"`
	NoTx    bool   `json:"no_transaction"` // runs outside a transaction, statement by statement
	Schemas int    `json:"schemas"`
	Ranges  string `json:"ranges"` // the shards, e.g. "0-499,1000"
}

// job is one schema to migrate and its lock timeouts so far.
type job struct {
	shard    int
	attempts int
	waited   time.Duration
	ready    time.Time // not before: the backoff after a lock timeout
}

// queue is one server's schemas, shared by its workers.
type queue struct {
	mu    sync.Mutex
	ready []*job
	later []*job
}

// next returns the next schema ready to try, waiting out the backoff of a
// deferred one when nothing else is left, or nil when the queue is empty.
func (q *queue) next(ctx context.Context) (*job, error) {
	for {
		q.mu.Lock()
		if len(q.ready) > 0 {
			j := q.ready[0]
			q.ready = q.ready[1:]
			q.mu.Unlock()
			return j, nil
		}
		if len(q.later) == 0 {
			q.mu.Unlock()
			return nil, nil
		}
		sort.Slice(q.later, func(a, b int) bool { return q.later[a].ready.Before(q.later[b].ready) })
		j := q.later[0]
		if wait := time.Until(j.ready); wait > 0 {
			q.mu.Unlock()
			if err := sleep(ctx, wait); err != nil {
				return nil, err
			}
			continue
		}
		q.later = q.later[1:]
		q.mu.Unlock()
		return j, nil
	}
}

// postpone puts a schema back, to be tried once its backoff has passed.
func (q *queue) postpone(j *job) {
	q.mu.Lock()
	q.later = append(q.later, j)
	q.mu.Unlock()
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error { return idgen.SystemClock().Sleep(ctx, d) }

// runner migrates the schemas of a run: workers per server, a bound on
// all workers, each schema in its own transaction with a lock timeout, a
// schema whose lock times out deferred behind the others and retried.
type runner struct {
	opts     MigrateOptions
	layout   idgen.Layout
	versions []Version
	mode     shardschema.Mode
	slots    chan struct{} // overall bound on busy workers; nil: none

	mu     sync.Mutex
	start  time.Time
	total  int
	done   int
	perSrv map[string]*[2]int // done, total
	sum    Summary
	gaveUp []error
}

// serverWork is one server's pending schemas and its first connection.
type serverWork struct {
	srv    router.Server
	conn   *pgx.Conn
	shards []int
	steps  map[int][]shardschema.PlannedStep // for a dry run
}

// run applies the pending schemas of every server. A schema given up for
// its locks does not stop the others; the run returns those (*LockWaitError,
// joined) once everything else is done. Any other error stops the run.
func (r *runner) run(ctx context.Context, work []serverWork) error {
	r.start = time.Now()
	r.perSrv = map[string]*[2]int{}
	for _, w := range work {
		r.total += len(w.shards)
		r.perSrv[w.srv.Name] = &[2]int{0, len(w.shards)}
	}
	r.sum.Pending, r.sum.Servers = r.total, len(work)
	if n := r.opts.Workers; n > 0 {
		r.slots = make(chan struct{}, n)
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, w := range work {
		if len(w.shards) == 0 {
			continue
		}
		q := &queue{}
		for _, s := range w.shards {
			q.ready = append(q.ready, &job{shard: s})
		}
		for i := range min(r.opts.WorkersPerServer, len(w.shards)) {
			g.Go(func() error {
				conn := w.conn
				if i > 0 {
					c, err := connectServer(gctx, w.srv)
					if err != nil {
						return err
					}
					defer c.Close(context.Background())
					conn = c
				}
				return r.work(gctx, w.srv.Name, conn, q)
			})
		}
	}
	err := g.Wait()
	r.sum.Elapsed = time.Since(r.start)
	if err != nil {
		return err
	}
	return errors.Join(r.gaveUp...)
}

// work is one worker: it takes the server's schemas until none is left.
func (r *runner) work(ctx context.Context, server string, conn *pgx.Conn, q *queue) error {
	for {
		j, err := q.next(ctx)
		if err != nil || j == nil {
			return err
		}
		if r.slots != nil {
			select {
			case r.slots <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		began := time.Now()
		file, err := shardschema.ApplyOne(ctx, conn, r.layout, j.shard, r.versions, r.mode, shardschema.Timeouts{Lock: r.opts.LockTimeout, Build: r.opts.BuildLockTimeout})
		if r.slots != nil {
			<-r.slots
		}
		switch {
		case err == nil:
			r.finished(server, router.SchemaName(j.shard), time.Since(began))
			if err := sleep(ctx, r.opts.Pause); err != nil {
				return err
			}
		case shardschema.IsLockTimeout(err) && ctx.Err() == nil:
			j.attempts++
			j.waited += time.Since(began)
			w := LockWait{Server: server, Shard: j.shard, Schema: router.SchemaName(j.shard), File: file,
				Attempts: j.attempts, Waited: j.waited, Blockers: readBlockers(ctx, conn, router.SchemaName(j.shard), began)}
			if r.timedOut(w) {
				continue
			}
			j.ready = time.Now().Add(backoff(j.attempts, r.opts.RetryBase, r.opts.RetryMax))
			q.postpone(j)
		default:
			return withServer(server, err)
		}
	}
}

// finished counts a migrated schema and reports progress.
func (r *runner) finished(server, schema string, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done++
	r.sum.Schemas++
	r.sum.SlowestSchema = max(r.sum.SlowestSchema, took)
	s := r.perSrv[server]
	s[0]++
	r.report(Progress{Server: server, ServerDone: s[0], ServerTotal: s[1], Schema: schema})
}

// timedOut records a lock timeout, reports it, and reports whether the
// schema is given up (past MaxLockWait).
func (r *runner) timedOut(w LockWait) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sum.Retries++
	if w.Waited > r.sum.LongestLockWait {
		r.sum.LongestLockWait, r.sum.LongestLockSchema = w.Waited, w.Schema
	}
	s := r.perSrv[w.Server]
	r.report(Progress{Server: w.Server, ServerDone: s[0], ServerTotal: s[1], Schema: w.Schema, Wait: &w})
	if w.Waited < r.opts.MaxLockWait {
		return false
	}
	r.gaveUp = append(r.gaveUp, &LockWaitError{LockWait: w, Bound: r.opts.MaxLockWait})
	return true
}

// report calls the Progress callback, under r.mu.
func (r *runner) report(p Progress) {
	if r.opts.Progress == nil {
		return
	}
	p.Done, p.Total = r.done, r.total
	p.Elapsed = time.Since(r.start)
	p.Retries = r.sum.Retries
	if r.done > 0 && r.done < r.total {
		p.ETA = time.Duration(float64(p.Elapsed) / float64(r.done) * float64(r.total-r.done))
	}
	r.opts.Progress(p)
}

// planned lists, for a dry run, each server's pending files with the
// schemas that need them.
func planned(work []serverWork) []PlannedStep {
	var out []PlannedStep
	for _, w := range work {
		type key struct {
			name string
			noTx bool
		}
		shards := map[key][]int{}
		var order []key
		for _, s := range w.shards {
			for _, st := range w.steps[s] {
				k := key{st.File, st.NoTx}
				if _, ok := shards[k]; !ok {
					order = append(order, k)
				}
				shards[k] = append(shards[k], s)
			}
		}
		for _, k := range order {
			out = append(out, PlannedStep{Server: w.srv.Name, File: k.name, NoTx: k.noTx, Schemas: len(shards[k]), Ranges: shardRanges(shards[k])})
		}
	}
	return out
}
