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
	"github.com/shardkit/shardkit/router"
)

// MigrateOptions configure Migrate.
type MigrateOptions struct {
	// Apply configures the per-schema work.
	Apply ApplyOptions
	// Progress, if not nil, is called after each batch of schemas, never
	// concurrently.
	Progress func(Progress)
	// AllowMoving migrates even while shards are moving or fenced. The
	// zero value refuses (ErrMovesInProgress): a table created on a moving
	// shard's source would be missing on its target.
	AllowMoving bool
	// Servers limits the run to these servers (by catalog name); nil means
	// all. A name not in the catalog is refused (router.ErrUnknownServer).
	Servers []string
}

// Migrate applies the per-shard versions not yet applied to every shard
// schema on every server, one worker per server, all servers in parallel.
// It applies every version the catalog records plus the new files of
// shardSQL (a nil shardSQL applies what the catalog already holds), and
// records the new files in the catalog only once every schema applied
// them. A file that fails on a schema returns an error wrapping
// ErrMigrationFailed and a *ShardError naming the shard, server and file,
// and leaves the catalog as it was. Each batch of schemas is one
// transaction and each applied step is recorded on its server (with its
// checksum), so a failed or interrupted Migrate, run again with the same
// files, finishes the job. An applied file that changed is refused with
// ErrMigrationChanged, also when a failed run applied it to only some
// schemas; a file such a run applied that is missing now, with
// ErrMigrationIncomplete.
func Migrate(ctx context.Context, cat *catalog.Catalog, shardSQL fs.FS, opts MigrateOptions) error {
	versions, err := ReadVersions(shardSQL)
	if err != nil {
		return err
	}
	if err := cat.Migrate(ctx); err != nil {
		return err
	}
	snap, err := cat.Load(ctx)
	if err != nil {
		return err
	}
	only := map[string]bool{}
	for _, name := range opts.Servers {
		if _, ok := snap.Server(name); !ok {
			return unknownServer(snap, name)
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
			return fmt.Errorf("shardkit: %w: shards %s; finish or roll back the moves first",
				ErrMovesInProgress, strings.Join(busy, ", "))
		}
	}
	// The catalog records the run's files only once every schema applied
	// them, in a transaction held open over the run (under the provisioning
	// lock, so runs take turns): a run that fails records nothing, and the
	// catalog never holds a version that applies nowhere.
	return cat.Update(ctx, func(ctx context.Context, tx *catalog.Tx) error {
		if err := tx.LockProvision(ctx); err != nil {
			return err
		}
		plan, err := planRun(ctx, tx, cat, versions, shardSQL != nil)
		if err != nil {
			return err
		}
		cfg := migrateConfig{apply: opts.Apply, progress: opts.Progress, only: only, versions: plan.versions, given: true}
		if err := migrateAll(ctx, cat, nil, cfg); err != nil {
			if len(plan.changes) == 0 {
				return err
			}
			if ctx.Err() != nil {
				return fmt.Errorf("%w; the catalog records none of this run's files: run migrate again with the same files to finish", err)
			}
			return &failedRun{err: err}
		}
		return writeChanges(ctx, tx, plan)
	})
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
	apply    ApplyOptions
	progress func(Progress)
	only     map[string]bool // servers to work on; empty means all
	versions []Version       // what to apply, when given; else the catalog's record
	given    bool
}

// migrateAll brings every schema of the current shard map up to the
// versions recorded in the catalog. conns holds connections already open
// (by server name); others are opened from the catalog's DSNs. The
// versions applied are the catalog's record (callers record theirs first).
func migrateAll(ctx context.Context, cat *catalog.Catalog, conns map[string]*pgx.Conn, cfg migrateConfig) error {
	snap, err := cat.Load(ctx)
	if err != nil {
		return err
	}
	versions := cfg.versions
	if !cfg.given {
		catFS, err := CatalogSQL(ctx, cat)
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
	mode := modeAll
	if cfg.apply.DeferIndexes {
		mode = modeDeferIndexes
	}
	// Phase 1: connect, install shardkit's objects, find what is pending.
	g, gctx := errgroup.WithContext(ctx)
	var mu sync.Mutex
	for i, srv := range servers {
		conn := conns[srv.Name]
		g.Go(func() error {
			if conn == nil {
				c, err := connect(gctx, srv.Name, srv.Admin())
				if err != nil {
					return err
				}
				mu.Lock()
				own[srv.Name] = c
				mu.Unlock()
				conn = c
			}
			if err := EnsureServer(gctx, conn, snap.Layout); err != nil {
				return &ServerError{Server: srv.Name, Err: err}
			}
			p, err := pending(gctx, conn, snap.Layout, snap.ShardsOn(srv.Name), versions, mode)
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
			err := applySchemas(gctx, conn, snap.Layout, shards, versions, mode, cfg.apply.batch(), nil, report)
			return withServer(srv.Name, err)
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
		return nil, &ServerError{Server: name, Err: fmt.Errorf("bad DSN: %w", err)}
	}
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

// ConnectServer opens a connection to a server registered in the catalog.
// A name the catalog does not hold is a *ServerError wrapping
// router.ErrUnknownServer; an unreachable server wraps ErrServerUnreachable.
func ConnectServer(ctx context.Context, cat *catalog.Catalog, name string) (*pgx.Conn, error) {
	snap, err := cat.Load(ctx)
	if err != nil {
		return nil, err
	}
	srv, ok := snap.Server(name)
	if !ok {
		return nil, unknownServer(snap, name)
	}
	return connect(ctx, srv.Name, srv.Admin())
}

func unknownServer(snap *router.Snapshot, name string) error {
	var names []string
	for _, s := range snap.Servers() {
		names = append(names, s.Name)
	}
	return &ServerError{Server: name, Err: fmt.Errorf("%w (it has: %s); register %s with migrations.Provision (ProvisionOptions.Servers)",
		router.ErrUnknownServer, strings.Join(names, ", "), name)}
}
