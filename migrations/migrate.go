package migrations

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/adminconn"
	"github.com/shardkit/shardkit/internal/pgdsn"
	"github.com/shardkit/shardkit/internal/shardschema"
	"github.com/shardkit/shardkit/router"
)

// MigrateOptions configure Migrate. The zero value migrates every
// server, one schema at a time per server, with a 500 ms lock timeout.
type MigrateOptions struct {
	// DeferIndexes skips the NNNN_name.indexes.sql parts. The zero value
	// applies them. (Migrate has no batch size: it gives every schema a
	// transaction of its own, so that it never holds one schema's locks
	// while waiting for another's.)
	DeferIndexes bool
	// Progress, if not nil, is called after each schema and at each lock
	// timeout, never concurrently.
	Progress func(Progress)
	// AllowMoving migrates even while the shard map shows shards moving
	// or fenced without a journalled move (a state left by hand). A move
	// in the journal that is unfinished (running, reversible or rolling
	// back) is always refused: a change applied to one copy of a shard
	// breaks the replication between its copies.
	AllowMoving bool
	// Servers limits the run to these servers (by catalog name); nil means
	// all. A name not in the catalog is refused (router.ErrUnknownServer).
	// The catalog records the run's files only when no other server lacks
	// them.
	Servers []string
	// LockTimeout bounds each wait for a lock (SET LOCAL lock_timeout):
	// the requests queued behind a waiting ALTER wait at most this long.
	// A schema whose wait times out is rolled back, retried after the
	// others with backoff and jitter. 0 means DefaultLockTimeout (500 ms); a
	// negative value waits without bound (the server's setting).
	LockTimeout time.Duration
	// BuildLockTimeout bounds the waits of CREATE and DROP INDEX
	// CONCURRENTLY in files marked NoTransactionMarker: they wait for the
	// transactions older than the build, holding a lock that no read or
	// write waits for, and a build cut short starts again from nothing.
	// 0 means MaxLockWait; a negative value waits without bound.
	BuildLockTimeout time.Duration
	// MaxLockWait is how long one schema may spend in attempts that time
	// out before Migrate gives it up: the other schemas finish, and Migrate
	// returns a *LockWaitError (ErrLockWait) naming the schema and the
	// blocker. 0 means DefaultMaxLockWait (1 min).
	MaxLockWait time.Duration
	// RetryBase and RetryMax shape the backoff between attempts of one
	// schema: doubling from RetryBase up to RetryMax, with jitter. 0 means
	// 200 ms and 5 s.
	RetryBase, RetryMax time.Duration
	// WorkersPerServer is how many schemas of one server are migrated at
	// once, each on its own connection; 0 means 1. Workers bounds the busy
	// workers over all servers; 0 means no bound beyond that.
	WorkersPerServer, Workers int
	// Pause is how long each worker waits after each schema: a throttle
	// for busy servers and their replicas. 0 means none.
	Pause time.Duration
	// DryRun changes nothing: the Summary lists what would run where
	// (Summary.Planned).
	DryRun bool
}

func (o MigrateOptions) withDefaults() MigrateOptions {
	switch {
	case o.LockTimeout == 0:
		o.LockTimeout = DefaultLockTimeout
	case o.LockTimeout < 0:
		o.LockTimeout = 0
	}
	if o.MaxLockWait <= 0 {
		o.MaxLockWait = DefaultMaxLockWait
	}
	switch {
	case o.BuildLockTimeout == 0:
		o.BuildLockTimeout = o.MaxLockWait
	case o.BuildLockTimeout < 0:
		o.BuildLockTimeout = 0
	}
	if o.RetryBase <= 0 {
		o.RetryBase = defaultRetryBase
	}
	if o.RetryMax <= 0 {
		o.RetryMax = defaultRetryMax
	}
	o.RetryMax = max(o.RetryMax, o.RetryBase)
	if o.WorkersPerServer <= 0 {
		o.WorkersPerServer = 1
	}
	return o
}

// Migrate applies the per-shard versions not yet applied to every shard
// schema on every server; MigrateWithSummary says what it did.
func Migrate(ctx context.Context, cat *catalog.Catalog, shardSQL fs.FS, opts MigrateOptions) error {
	_, err := MigrateWithSummary(ctx, cat, shardSQL, opts)
	return err
}

// MigrateWithSummary applies the per-shard versions not yet applied to
// every shard schema on every server, servers in parallel, and says what
// it did. It applies every version the catalog records plus the new files
// of shardSQL (a nil shardSQL applies what the catalog already holds).
//
// Each schema is migrated in a transaction of its own with a lock timeout
// (MigrateOptions.LockTimeout); a schema whose lock times out is retried
// after the others, and one that waited MaxLockWait is given up with a
// *LockWaitError naming the blocker, the others finished. A file marked
// with NoTransactionMarker runs outside a transaction (CREATE INDEX
// CONCURRENTLY). Each applied step is recorded on its server, per schema
// and with its checksum, in the step's transaction, so a failed or
// interrupted run, run again with the same files, does only what is left.
//
// The catalog records the new files only once every schema applied them: a
// file that fails on a schema returns an error wrapping ErrMigrationFailed
// and a *ShardError naming the shard, server and file, and leaves the
// catalog as it was. An applied file that changed is refused with
// ErrMigrationChanged, also when a failed run applied it to only some
// schemas; a file such a run applied that is missing now, with
// ErrMigrationIncomplete. An unfinished move in the journal is refused
// with a *MovesError (ErrMovesInProgress) naming it; while the run lasts,
// no move can start (catalog.ErrProvisionRunning).
func MigrateWithSummary(ctx context.Context, cat *catalog.Catalog, shardSQL fs.FS, opts MigrateOptions) (Summary, error) {
	opts = opts.withDefaults()
	versions, err := ReadVersions(shardSQL)
	if err != nil {
		return Summary{}, err
	}
	if err := cat.Migrate(ctx); err != nil {
		return Summary{}, err
	}
	snap, err := cat.Operator().Load(ctx)
	if err != nil {
		return Summary{}, err
	}
	only := map[string]bool{}
	for _, name := range opts.Servers {
		if _, ok := snap.Server(name); !ok {
			return Summary{}, unknownServer(snap, name)
		}
		only[name] = true
	}
	if !opts.AllowMoving {
		var busy []string
		for _, p := range snap.Placements() {
			if p.State != router.StateActive && (len(only) == 0 || only[p.Server]) {
				busy = append(busy, fmt.Sprintf("%d (%s)", p.Shard, p.State))
			}
		}
		if len(busy) > 0 {
			return Summary{}, fmt.Errorf("shardkit: %w: shards %s; finish or roll back the moves first",
				ErrMovesInProgress, strings.Join(busy, ", "))
		}
	}
	var sum Summary
	// The catalog records the run's files only once every schema applied
	// them, in a transaction held open over the run (under the provisioning
	// lock, so runs take turns and no move starts): a run that fails
	// records nothing, and the catalog never holds a version that applies
	// nowhere.
	err = cat.Update(ctx, func(ctx context.Context, tx *catalog.Tx) error {
		if err := tx.LockProvision(ctx); err != nil {
			return err
		}
		if err := refuseOpenMoves(ctx, tx); err != nil {
			return err
		}
		plan, err := planRun(ctx, tx, cat, versions, shardSQL != nil)
		if err != nil {
			return err
		}
		mode := shardschema.ModeAll
		if opts.DeferIndexes {
			mode = shardschema.ModeDeferIndexes
		}
		work, err := gatherWork(ctx, snap, only, plan.versions, mode, opts.DryRun)
		defer func() {
			for _, w := range work {
				if w.conn != nil {
					_ = w.conn.Close(context.Background())
				}
			}
		}()
		if err != nil {
			return err
		}
		r := &runner{opts: opts, layout: snap.Layout, versions: plan.versions, mode: mode}
		if opts.DryRun {
			sum.Planned = planned(work)
			for _, w := range work {
				sum.Pending += len(w.shards)
			}
			sum.Servers = len(work)
			return nil
		}
		err = r.run(ctx, work)
		sum = r.sum
		if err == nil {
			err = grantAll(ctx, cat, snap, work)
		}
		if err != nil {
			if len(plan.changes) == 0 {
				return err
			}
			if errors.Is(err, ErrLockWait) {
				return fmt.Errorf("%w; the catalog records this run's files once every schema has them", err)
			}
			if ctx.Err() != nil {
				return fmt.Errorf("%w; every schema migrated is recorded on its server, the catalog records none of this run's files: "+
					"run migrate again with the same files to finish", err)
			}
			return &failedRun{err: err}
		}
		if len(only) > 0 && len(plan.changes) > 0 {
			if lacking, err := othersLacking(ctx, snap, only, plan.versions, mode); err != nil || lacking {
				return err
			}
		}
		for _, c := range plan.changes {
			sum.Recorded = append(sum.Recorded, c.Name)
		}
		return writeChanges(ctx, tx, plan)
	})
	return sum, err
}

// refuseOpenMoves returns a *MovesError for the journal's unfinished moves.
func refuseOpenMoves(ctx context.Context, tx *catalog.Tx) error {
	open, err := tx.Moves().OpenMoves(ctx)
	if err != nil || len(open) == 0 {
		return err
	}
	e := &MovesError{}
	for _, m := range open {
		e.Moves = append(e.Moves, MoveRef{ID: m.ID, Shard: m.Shard, Source: m.Source, Target: m.Target, State: m.State, Step: m.Step})
	}
	return e
}

// gatherWork connects to each server of the run, installs shardkit's
// objects (not in a dry run) and finds the schemas that need work. The
// connections are returned with the work, also on error.
func gatherWork(ctx context.Context, snap *router.Snapshot, only map[string]bool, versions []Version, mode shardschema.Mode, dry bool) ([]serverWork, error) {
	var work []serverWork
	for _, s := range snap.Servers() {
		if s.State != "retired" && (len(only) == 0 || only[s.Name]) {
			work = append(work, serverWork{srv: s})
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	for i := range work {
		w := &work[i]
		g.Go(func() error {
			c, err := connectServer(gctx, w.srv)
			if err != nil {
				return err
			}
			w.conn = c
			if !dry {
				if err := shardschema.EnsureServer(gctx, c, snap.Layout); err != nil {
					return &ServerError{Server: w.srv.Name, Err: err}
				}
			}
			steps, err := shardschema.PendingSteps(gctx, c, snap.Layout, snap.ShardsOn(w.srv.Name), versions, mode)
			if err != nil {
				return withServer(w.srv.Name, err)
			}
			w.steps = steps
			for _, s := range snap.ShardsOn(w.srv.Name) {
				if len(steps[s]) > 0 {
					w.shards = append(w.shards, s)
				}
			}
			return nil
		})
	}
	return work, g.Wait()
}

// othersLacking reports whether a server outside only lacks a step.
func othersLacking(ctx context.Context, snap *router.Snapshot, only map[string]bool, versions []Version, mode shardschema.Mode) (bool, error) {
	rest := map[string]bool{}
	for _, s := range snap.Servers() {
		if s.State != "retired" && !only[s.Name] {
			rest[s.Name] = true
		}
	}
	if len(rest) == 0 {
		return false, nil
	}
	work, err := gatherWork(ctx, snap, rest, versions, mode, true)
	for _, w := range work {
		if w.conn != nil {
			_ = w.conn.Close(context.Background())
		}
	}
	if err != nil {
		return false, err
	}
	for _, w := range work {
		if len(w.shards) > 0 {
			return true, nil
		}
	}
	return false, nil
}

// failedRun is the error of a Migrate whose files failed on a schema: it
// wraps ErrMigrationFailed and the failure (a *ShardError).
type failedRun struct{ err error }

func (e *failedRun) Error() string {
	return fmt.Sprintf("shardkit: %v: %s; the catalog records none of this run's files: "+
		"fix the file if it failed on every shard, else what made it fail on that shard, and run migrate again",
		ErrMigrationFailed, strings.TrimPrefix(e.err.Error(), "shardkit: "))
}

func (e *failedRun) Unwrap() []error { return []error{ErrMigrationFailed, e.err} }

type migrateConfig struct {
	batch        int  // schemas per transaction; 0 means shardschema.DefaultBatchSize
	deferIndexes bool // skip the NNNN_name.indexes.sql parts
	progress     func(Progress)
	only         map[string]bool // servers to work on; empty means all
	versions     []Version       // what to apply, when given; else the catalog's record
	given        bool
}

// migrateAll brings every schema of the current shard map up to the
// versions recorded in the catalog. conns holds connections already open
// (by server name); others are opened from the catalog's DSNs. The
// versions applied are the catalog's record (callers record theirs first).
func migrateAll(ctx context.Context, cat *catalog.Catalog, conns map[string]*pgx.Conn, cfg migrateConfig) error {
	snap, err := cat.Operator().Load(ctx)
	if err != nil {
		return err
	}
	role, err := appRole(ctx, cat)
	if err != nil {
		return err
	}
	versions := cfg.versions
	if !cfg.given {
		catFS, err := shardschema.CatalogSQL(ctx, cat)
		if err != nil {
			return err
		}
		if versions, err = ReadVersions(catFS); err != nil {
			return err
		}
	}
	var servers []router.Server
	for _, s := range snap.Servers() {
		if s.State != "retired" && (len(cfg.only) == 0 || cfg.only[s.Name]) {
			servers = append(servers, s)
		}
	}
	own := map[string]*pgx.Conn{}
	defer closeAll(own)
	work := make([][]int, len(servers))
	mode := shardschema.ModeAll
	if cfg.deferIndexes {
		mode = shardschema.ModeDeferIndexes
	}
	batch := cfg.batch
	if batch <= 0 {
		batch = shardschema.DefaultBatchSize
	}
	// Phase 1: connect, install shardkit's objects, find what is pending.
	g, gctx := errgroup.WithContext(ctx)
	var mu sync.Mutex
	for i, srv := range servers {
		conn := conns[srv.Name]
		g.Go(func() error {
			if conn == nil {
				c, err := connectServer(gctx, srv)
				if err != nil {
					return err
				}
				mu.Lock()
				own[srv.Name] = c
				mu.Unlock()
				conn = c
			}
			if err := shardschema.EnsureServer(gctx, conn, snap.Layout); err != nil {
				return &ServerError{Server: srv.Name, Err: err}
			}
			p, err := shardschema.Pending(gctx, conn, snap.Layout, snap.ShardsOn(srv.Name), versions, mode)
			if err != nil {
				return withServer(srv.Name, err)
			}
			work[i] = p
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	// Phase 2: apply, servers in parallel.
	total := 0
	for _, w := range work {
		total += len(w)
	}
	doneAll := 0
	g, gctx = errgroup.WithContext(ctx)
	for i, srv := range servers {
		conn := conns[srv.Name]
		if conn == nil {
			conn = own[srv.Name]
		}
		shards := work[i]
		g.Go(func() error {
			done := 0
			report := func(n int) {
				if cfg.progress == nil {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				done += n
				doneAll += n
				cfg.progress(Progress{Server: srv.Name, ServerDone: done, ServerTotal: len(shards), Done: doneAll, Total: total})
			}
			if err := shardschema.ApplySchemas(gctx, conn, snap.Layout, shards, versions, mode, batch, nil, report); err != nil {
				return withServer(srv.Name, err)
			}
			return withServer(srv.Name, grantHomes(gctx, conn, role, snap, srv.Name))
		})
	}
	return g.Wait()
}

// withServer wraps err in a *ServerError, or names the server in a *ShardError.
func withServer(server string, err error) error {
	if err == nil {
		return nil
	}
	if se, ok := err.(*ShardError); ok {
		se.Server = server
		return se
	}
	return &ServerError{Server: server, Err: err}
}

// connect opens one connection to a shard server, with a 10 s connect
// timeout unless the DSN sets one.
func connect(ctx context.Context, name, dsn string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, &ServerError{Server: name, Err: fmt.Errorf("bad DSN: %w", pgdsn.Scrub(err))}
	}
	return connectConfig(ctx, name, cfg)
}

// connectServer connects to a server of the shard map through its admin
// DSN, refusing any host that is not the primary the catalog records for
// it (an old primary back after a failover): the error then wraps
// router.ErrNotPrimary.
func connectServer(ctx context.Context, srv router.Server) (*pgx.Conn, error) {
	cfg, err := adminconn.Config(srv, srv.Admin())
	if err != nil {
		return nil, &ServerError{Server: srv.Name, Err: err}
	}
	return connectConfig(ctx, srv.Name, cfg)
}

func connectConfig(ctx context.Context, name string, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, &ServerError{Server: name, Err: classify(err, "CONNECT on the database")}
	}
	return c, nil
}

// connectServers connects to every server in parallel; any failure closes
// the others and reports each unreachable server by name.
func connectServers(ctx context.Context, servers []ServerSpec) (map[string]*pgx.Conn, error) {
	conns := map[string]*pgx.Conn{}
	var errs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Go(func() {
			c, err := connect(ctx, s.Name, s.admin())
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			conns[s.Name] = c
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		closeAll(conns)
		sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
		if len(errs) == 1 {
			return nil, errs[0]
		}
		return nil, errors.Join(errs...)
	}
	return conns, nil
}

func closeAll(conns map[string]*pgx.Conn) {
	for _, c := range conns {
		_ = c.Close(context.Background())
	}
}

func unknownServer(snap *router.Snapshot, name string) error {
	var names []string
	for _, s := range snap.Servers() {
		names = append(names, s.Name)
	}
	return &ServerError{Server: name, Err: fmt.Errorf("%w (it has: %s); register %s with migrations.Provision (ProvisionOptions.Servers)",
		router.ErrUnknownServer, strings.Join(names, ", "), name)}
}
