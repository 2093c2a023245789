package catalog

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/catalogmove"
	"github.com/shardkit/shardkit/internal/pgdsn"
	"github.com/shardkit/shardkit/internal/sqlversions"
	"github.com/shardkit/shardkit/router"
)

//go:embed catalogsql/*.sql
var catalogSQL embed.FS

// ErrNoCatalog reports a catalog database that has not been initialised. It is
// router.ErrNoCatalog, so that either name matches with errors.Is. Provision
// it first (shardctl init, migrations.Provision), or check that the DSN names
// the catalog's database.
var ErrNoCatalog = router.ErrNoCatalog

// ErrCatalogTooNew reports a catalog migrated by a newer shardkit. Run a
// shardkit at least as new as the one that migrated it; a catalog is never
// migrated down.
var ErrCatalogTooNew = errors.New("catalog schema is newer than this shardkit")

// Catalog is the shardkit catalog: one Postgres database holding the
// configuration, the servers, the shard map, slot leases and move journals,
// all in the schema "shardkit".
type Catalog struct {
	pool *pgxpool.Pool
	// admin: snapshots carry the servers' admin DSNs (Operator).
	admin bool
	// appQueries: an application's statements that read the servers,
	// once known (see serverQueries).
	appQueries atomic.Pointer[serverQueries]
}

// Operator returns a view of the catalog, on the same pool, whose
// snapshots carry every server's admin DSN (router.Server.AdminDSN): the
// direct, privileged connection that moves, provisioning, migrations,
// backups and the resolver use. The snapshots of Open's catalog, which
// application processes hold and relays serve, carry none. Close the
// catalog once, through either.
func (c *Catalog) Operator() *Catalog { return &Catalog{pool: c.pool, admin: true} }

// Open connects to the catalog database. It does not create or check
// anything; call Migrate to create the catalog, Load to read it.
//
// Unless the DSN sets default_query_exec_mode, the catalog's connections
// run every statement unnamed, with its description cached
// (cache_describe), so that the catalog can sit behind a connection
// pooler in transaction mode: a named prepared statement outlives its
// transaction and meets another client's on a pooled server connection.
// The catalog's statements are small; planning them each time costs
// microseconds, not round trips.
func Open(ctx context.Context, dsn string) (*Catalog, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("shardkit: catalog DSN: %w", pgdsn.Scrub(err))
	}
	if !strings.Contains(dsn, "default_query_exec_mode") {
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("shardkit: catalog DSN: %w", pgdsn.Scrub(err))
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("shardkit: connect to catalog: %w", err)
	}
	return &Catalog{pool: pool}, nil
}

// New wraps an existing pool to the catalog database. The caller keeps
// ownership of the pool.
func New(pool *pgxpool.Pool) *Catalog { return &Catalog{pool: pool} }

// Ping checks that the catalog database answers.
func (c *Catalog) Ping(ctx context.Context) error { return c.pool.Ping(ctx) }

// Close closes the catalog's pool.
func (c *Catalog) Close() { c.pool.Close() }

type migration struct {
	version int
	name    string
	sql     string
}

func catalogMigrations() ([]migration, error) {
	files, err := sqlversions.List(catalogSQL, "catalogsql")
	if err != nil {
		return nil, err
	}
	out := make([]migration, 0, len(files))
	for _, f := range files {
		b, err := fs.ReadFile(catalogSQL, f.Path)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: f.Version, name: f.Name, sql: string(b)})
	}
	return out, nil
}

// Version is the newest catalog schema version this shardkit knows.
func Version() int {
	ms, _ := catalogMigrations()
	if len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}

// sqlBootstrap creates the record of applied catalog versions, which the
// versioned files themselves cannot.
const sqlBootstrap = `CREATE SCHEMA IF NOT EXISTS shardkit;
CREATE TABLE IF NOT EXISTS shardkit.catalog_version (
    version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`

// Migrate creates the catalog schema or brings it up to date: the files
// of catalogsql/, applied in version order, each recorded in
// shardkit.catalog_version. Each version
// is applied in its own transaction under an advisory lock, so concurrent
// callers and interrupted runs are safe. A catalog migrated by a newer
// shardkit (a version this one does not know) is left alone, and the
// error wraps ErrCatalogTooNew.
func (c *Catalog) Migrate(ctx context.Context) error {
	return c.migrateTo(ctx, Version())
}

// migrateTo applies the catalog versions up to upto: tests make the
// catalogs of older shardkits with it.
func (c *Catalog) migrateTo(ctx context.Context, upto int) error {
	ms, err := catalogMigrations()
	if err != nil {
		return err
	}
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("shardkit: catalog: %w", err)
	}
	defer conn.Release()
	for _, m := range ms {
		if m.version > upto {
			break
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('shardkit.catalog'))`); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, sqlBootstrap); err != nil {
				return err
			}
			// The newest version applied, and whether m's is: one read.
			var newest int
			var done bool
			if err := tx.QueryRow(ctx, `SELECT COALESCE(max(version), 0), COALESCE(bool_or(version = $1), false) FROM shardkit.catalog_version`,
				m.version).Scan(&newest, &done); err != nil {
				return err
			}
			if newest > Version() {
				return fmt.Errorf("%w: the catalog is at version %d, this shardkit knows up to %d; "+
					"run a shardkit (and shardctl) at least as new as the one that migrated it", ErrCatalogTooNew, newest, Version())
			}
			if done {
				return nil
			}
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			if step := migrationSteps[m.version]; step != nil {
				if err := step(ctx, tx); err != nil {
					return fmt.Errorf("%s: %w", m.name, err)
				}
			}
			_, err := tx.Exec(ctx, `INSERT INTO shardkit.catalog_version (version, name) VALUES ($1, $2)`, m.version, m.name)
			return err
		})
		if err != nil {
			return fmt.Errorf("shardkit: migrate catalog: %w", err)
		}
	}
	return nil
}

// Config is the catalog's fixed configuration: the shard count and the ID
// layout, and the application's group role.
type Config struct {
	Shards int
	Layout idgen.Layout
	// AppRole is the NOLOGIN group role application processes log in as
	// members of (DefaultAppRole unless provisioning named another). Only
	// the shard schemas' home copies grant it anything.
	AppRole string
}

// Config reads the configuration row. A catalog without one returns ErrNoCatalog.
func (c *Catalog) Config(ctx context.Context) (Config, error) {
	return readConfig(ctx, c.pool)
}

func readConfig(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (Config, error) {
	var cfg Config
	var tb, sb, qb, lb int16
	err := q.QueryRow(ctx, sqlConfigRow).Scan(&cfg.Shards, &cfg.Layout.EpochMs, &tb, &sb, &qb, &lb, &cfg.AppRole)
	if errors.Is(err, pgx.ErrNoRows) || isUndefinedTable(err) {
		return Config{}, fmt.Errorf("shardkit: %w", ErrNoCatalog)
	}
	if err != nil {
		return Config{}, fmt.Errorf("shardkit: read catalog config: %w", err)
	}
	cfg.Layout.TimeBits, cfg.Layout.ShardBits, cfg.Layout.SeqBits, cfg.Layout.SlotBits = uint8(tb), uint8(sb), uint8(qb), uint8(lb)
	if err := cfg.Layout.Validate(); err != nil {
		return Config{}, fmt.Errorf("shardkit: %w: config row: %w", router.ErrBadCatalog, err)
	}
	if cfg.Shards > cfg.Layout.MaxShards() {
		return Config{}, fmt.Errorf("shardkit: %w: %d shards do not fit %d shard bits", router.ErrBadCatalog, cfg.Shards, cfg.Layout.ShardBits)
	}
	return cfg, nil
}

// Load reads the whole shard map as one consistent snapshot (one
// repeatable-read transaction) and validates it. It is part of the
// router.Source interface.
func (c *Catalog) Load(ctx context.Context) (*router.Snapshot, error) {
	var snap *router.Snapshot
	err := pgx.BeginTxFunc(ctx, c.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		cfg, err := readConfig(ctx, tx)
		if err != nil {
			return err
		}
		var version int64
		if err := tx.QueryRow(ctx, `SELECT map_version FROM shardkit.config`).Scan(&version); err != nil {
			return err
		}
		var epoch string
		if err := tx.QueryRow(ctx, sqlCatalogEpoch).Scan(&epoch); err != nil {
			return err
		}
		qs, err := c.serverQueries(ctx, tx)
		if err != nil {
			return err
		}
		servers, err := readServers(ctx, tx, qs)
		if err != nil {
			return err
		}
		if err := withPrimaries(ctx, tx, qs, servers); err != nil {
			return err
		}
		placements, err := readPlacements(ctx, tx, -1)
		if err != nil {
			return err
		}
		snap, err = router.NewSnapshot(version, cfg.Shards, servers, placements)
		if err != nil {
			return fmt.Errorf("shardkit: %w", err)
		}
		snap.Layout = cfg.Layout
		snap.CatalogEpoch = epoch
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrNoCatalog) || errors.Is(err, router.ErrBadCatalog) {
			return nil, err
		}
		if isUndefinedTable(err) {
			return nil, fmt.Errorf("shardkit: %w", ErrNoCatalog)
		}
		return nil, fmt.Errorf("shardkit: load shard map: %w", err)
	}
	return snap, nil
}

// ListenMap opens a connection of its own that LISTENs on
// router.MapChannel; the caller closes it. It is part of the router.Source
// interface.
func (c *Catalog) ListenMap(ctx context.Context) (router.Listener, error) {
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	// A LISTENing connection must not go back to the pool. (Hijack first:
	// `defer conn.Hijack().Close()` would hijack before the LISTEN.)
	lc := conn.Hijack()
	if _, err := lc.Exec(ctx, "LISTEN "+pgx.Identifier{router.MapChannel}.Sanitize()); err != nil {
		_ = lc.Close(context.Background())
		return nil, err
	}
	return lc, nil
}

var _ router.Source = (*Catalog)(nil)

// Moves returns the catalog's move store on its pool: the move journal,
// the cutover's fence, flip and unfence, fence leases and the shard-map
// state changes of moves and restores. It is for shardkit's own packages
// (rebalance, migrations, backup), whose operations keep the journal and
// the map consistent with each other; its type is internal, and none of
// it is a promise to users.
func (c *Catalog) Moves() *catalogmove.Store { return catalogmove.New(c.pool) }
