package migrations

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/approle"
	"github.com/shardkit/shardkit/internal/shardschema"
	"github.com/shardkit/shardkit/router"
)

// ServerSpec is a shard server to register in the catalog.
type ServerSpec struct {
	Name string // catalog name: lower case letter, then up to 62 of [a-z0-9_-]
	// DSN is the primary's DSN for application traffic; it may name a
	// connection pooler in transaction mode.
	DSN string
	// AdminDSN is the primary's DSN for administration and replication
	// (Provision creates the shard schemas through it, moves replicate
	// through it): a direct connection. "" means DSN.
	AdminDSN string
	Replicas []string // read replica DSNs; nil means none
	// Link records how DSN reaches the server, directly or through a
	// pooler (router.Server.Direct), when the server is registered. The
	// zero value records what the DSNs say: direct when DSN is AdminDSN
	// or names its host, port and database (another user, such as a
	// login of the application role), else pooled.
	Link router.Link
}

// admin returns the DSN administration uses.
func (s ServerSpec) admin() string {
	if s.AdminDSN != "" {
		return s.AdminDSN
	}
	return s.DSN
}

// Progress reports how far Provision or Migrate has got. Done and Total
// count shard schemas that needed work, over all servers; Server* count
// those of the server that just finished a batch.
type Progress struct {
	Server      string
	ServerDone  int
	ServerTotal int
	Done        int
	Total       int
	// The fields below are Migrate's. Schema is the schema just migrated
	// or, with Wait set, the one whose lock timed out.
	Schema  string
	Elapsed time.Duration // since the run began
	ETA     time.Duration // at the rate so far; 0 until known
	Retries int           // lock timeouts so far
	// Wait, when not nil, reports a lock timeout: the schema is retried
	// later (after the others are tried) unless it waited MaxLockWait.
	Wait *LockWait
}

// ProvisionOptions configure Provision.
type ProvisionOptions struct {
	// Servers to register, in order. The initial shard map gives each a
	// contiguous range of shards, in this order. At least one is needed.
	Servers []ServerSpec
	// Shards is the logical shard count. 0 means the existing catalog's,
	// or idgen.DefaultShards (2000) for a new one.
	Shards int
	// Layout is the ID layout. The zero Layout means the existing
	// catalog's, or idgen.DefaultLayout() for a new one.
	Layout idgen.Layout
	// ShardSQL holds the application's per-shard SQL files (see
	// ReadVersions); nil creates only shardkit's own objects.
	ShardSQL fs.FS
	// BatchSize is how many schemas share one transaction. 0 means 25.
	BatchSize int
	// DeferIndexes skips the NNNN_name.indexes.sql parts. The zero value
	// applies them.
	DeferIndexes bool
	// Progress, if not nil, is called after each batch of schemas, never
	// concurrently.
	Progress func(Progress)
	// AppRole names the application's NOLOGIN group role, created where
	// missing and granted what an application needs (docs/security.md).
	// "" means the existing catalog's, or catalog.DefaultAppRole.
	AppRole string
}

var serverNameRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

// Provision sets up a catalog and its shard servers, or completes an
// interrupted setup: it migrates the catalog, writes the configuration
// (refusing a shard count or layout different from an existing catalog's),
// registers the servers, records the initial shard map (contiguous ranges),
// then creates every shard schema with its tables on its server, servers in
// parallel. Running it again with the same options does nothing; after a
// kill, running it again completes. Servers not yet in an existing catalog
// are registered with no shards (rebalancing moves shards onto them).
func Provision(ctx context.Context, cat *catalog.Catalog, opts ProvisionOptions) error {
	explicit := opts // zero fields: take the catalog's
	if opts.Shards == 0 {
		opts.Shards = idgen.DefaultShards
	}
	if opts.Layout == (idgen.Layout{}) {
		opts.Layout = idgen.DefaultLayout()
	}
	if opts.AppRole != "" && !approle.Valid(opts.AppRole) {
		return fmt.Errorf("shardkit: %w: %q; use lower case letters, digits and underscores, starting with a letter", catalog.ErrBadRole, opts.AppRole)
	}
	if err := validateProvision(opts); err != nil {
		return err
	}
	versions, err := ReadVersions(opts.ShardSQL)
	if err != nil {
		return err
	}
	opts.Servers = registeredAdmins(ctx, cat, opts.Servers)
	// Every server must answer, and take shardkit's objects, before the
	// catalog records anything: a server refused here (unreachable, missing
	// privileges, another layout) is not registered.
	conns, err := connectServers(ctx, opts.Servers)
	if err != nil {
		return err
	}
	defer closeAll(conns)
	if err := cat.Migrate(ctx); err != nil {
		return err
	}
	layout := opts.Layout
	if cfg, err := cat.Config(ctx); err == nil {
		layout = cfg.Layout // a different opts.Layout is refused below, with the catalog's reason
	}
	if err := ensureServers(ctx, conns, layout); err != nil {
		return err
	}
	err = cat.Update(ctx, func(ctx context.Context, tx *catalog.Tx) error {
		if err := tx.LockProvision(ctx); err != nil {
			return err
		}
		shards, err := writeConfig(ctx, tx, explicit.Shards, explicit.Layout, opts.Shards, opts.Layout, opts.AppRole)
		if err != nil {
			return err
		}
		if err := registerServers(ctx, tx, opts.Servers); err != nil {
			return err
		}
		if err := recordVersions(ctx, tx, cat, versions); err != nil {
			return err
		}
		return initMap(ctx, tx, shards, opts.Servers)
	})
	if err != nil {
		if errors.Is(err, ErrShardCountMismatch) || errors.Is(err, ErrLayoutMismatch) ||
			errors.Is(err, ErrDuplicateServer) || errors.Is(err, ErrMigrationChanged) {
			return err
		}
		return fmt.Errorf("shardkit: provision catalog: %w", err)
	}
	role, err := appRole(ctx, cat)
	if err != nil {
		return err
	}
	if err := cat.GrantApp(ctx, role); err != nil {
		return err
	}
	return migrateAll(ctx, cat, conns, migrateConfig{batch: opts.BatchSize, deferIndexes: opts.DeferIndexes, progress: opts.Progress})
}

// registeredAdmins fills in the admin DSN of each server given without
// one that the catalog already holds with the same app DSN, so that a
// provisioning run repeated with the first command line reaches the
// servers as administration must. A catalog that cannot be read yet (a new
// one) changes nothing.
func registeredAdmins(ctx context.Context, cat *catalog.Catalog, servers []ServerSpec) []ServerSpec {
	snap, err := cat.Operator().Load(ctx)
	if err != nil {
		return servers
	}
	out := slices.Clone(servers)
	for i, s := range out {
		if have, ok := snap.Server(s.Name); ok && s.AdminDSN == "" && have.DSN == s.DSN {
			out[i].AdminDSN = have.AdminDSN
		}
	}
	return out
}

func validateProvision(opts ProvisionOptions) error {
	if len(opts.Servers) == 0 {
		return fmt.Errorf("shardkit: %w: pass at least one NAME=DSN", ErrNoServers)
	}
	if err := opts.Layout.Validate(); err != nil {
		return fmt.Errorf("shardkit: %w", err)
	}
	if opts.Shards < 1 || opts.Shards > opts.Layout.MaxShards() {
		return fmt.Errorf("shardkit: %w: %d (the layout's %d shard bits allow 1..%d)",
			router.ErrInvalidShardCount, opts.Shards, opts.Layout.ShardBits, opts.Layout.MaxShards())
	}
	seen := map[string]bool{}
	for _, s := range opts.Servers {
		if !serverNameRE.MatchString(s.Name) {
			return fmt.Errorf("shardkit: %w: %q: start with a lower-case letter, then up to 62 of a-z 0-9 _ -", ErrBadServerName, s.Name)
		}
		if seen[s.Name] {
			return &ServerError{Server: s.Name, Err: fmt.Errorf("%w: the name is given twice; give each server its own name", ErrDuplicateServer)}
		}
		seen[s.Name] = true
	}
	return nil
}

// writeConfig writes the configuration of a new catalog (shards, layout
// with defaults filled in) or checks an existing one against the values the
// caller gave (asked*, zero when not given). It returns the shard count in force.
func writeConfig(ctx context.Context, tx *catalog.Tx, askedShards int, askedLayout idgen.Layout, shards int, layout idgen.Layout, role string) (int, error) {
	have, ok, err := tx.ConfigRow(ctx)
	if err != nil {
		return 0, err
	}
	if !ok {
		return shards, tx.InsertConfig(ctx, catalog.Config{Shards: shards, Layout: layout, AppRole: role})
	}
	if role != "" && role != have.AppRole {
		if err := tx.SetAppRole(ctx, role); err != nil {
			return 0, err
		}
	}
	if askedShards != 0 && have.Shards != askedShards {
		return 0, fmt.Errorf("shardkit: %w: the catalog has %d logical shards, asked for %d; the shard of a key is "+
			"key mod shard count, so changing it would rekey every row: provision with %d shards, or use a new catalog",
			ErrShardCountMismatch, have.Shards, askedShards, have.Shards)
	}
	if askedLayout != (idgen.Layout{}) && have.Layout != askedLayout {
		return 0, fmt.Errorf("shardkit: %w: the catalog has %+v, asked for %+v; IDs already issued encode the "+
			"catalog's layout, so changing it would rekey every row: keep the catalog's layout, or use a new catalog",
			ErrLayoutMismatch, have.Layout, askedLayout)
	}
	return have.Shards, nil
}

func registerServers(ctx context.Context, tx *catalog.Tx, servers []ServerSpec) error {
	registered, err := tx.Servers(ctx)
	if err != nil {
		return err
	}
	// One database cannot be two servers: every DSN of a server, app or
	// admin, names that server alone.
	byName, byDSN := map[string]router.Server{}, map[string]string{}
	for _, s := range registered {
		byName[s.Name], byDSN[s.DSN], byDSN[s.Admin()] = s, s.Name, s.Name
	}
	added := false
	for _, s := range servers {
		if have, ok := byName[s.Name]; ok {
			// An empty AdminDSN is "not given": running provisioning again
			// with the first command line after an admin DSN was set is
			// no conflict.
			if have.DSN != s.DSN || (s.AdminDSN != "" && have.Admin() != s.AdminDSN) {
				return &ServerError{Server: s.Name, Err: fmt.Errorf("%w: the catalog already has a server named %q "+
					"with different DSNs; pick another name, pass the registered DSNs, or change them first "+
					"(catalog.Tx.SetServerDSN)", ErrDuplicateServer, s.Name)}
			}
			continue
		}
		for _, dsn := range []string{s.DSN, s.admin()} {
			if other, ok := byDSN[dsn]; ok {
				return &ServerError{Server: s.Name, Err: fmt.Errorf("%w: its DSN is already registered as server %q; "+
					"use that name", ErrDuplicateServer, other)}
			}
		}
		if err := tx.AddServer(ctx, router.Server{Name: s.Name, DSN: s.DSN, AdminDSN: s.AdminDSN, Replicas: s.Replicas, Link: s.Link}); err != nil {
			return err
		}
		byDSN[s.DSN], byDSN[s.admin()] = s.Name, s.Name
		added = true
	}
	if !added {
		return nil
	}
	// The servers are part of the shard map routers hold: on a catalog
	// already in use, a new version makes them reload and open a pool to
	// the new server before any shard moves onto it.
	mapped, err := tx.MappedShards(ctx)
	if err != nil {
		return err
	}
	if mapped > 0 {
		return tx.BumpMapVersion(ctx)
	}
	return nil
}

// initMap records the first shard map: server i of n gets the contiguous
// range [i*shards/n, (i+1)*shards/n). Contiguous ranges keep the map
// readable (status can say "shard_0000..0499 on a") and let a rebalance
// split a range by moving its tail; with key mod shards, both ranges and
// round-robin spread keys evenly.
func initMap(ctx context.Context, tx *catalog.Tx, shards int, servers []ServerSpec) error {
	n, err := tx.MappedShards(ctx)
	if err != nil || n > 0 {
		return err
	}
	names := make([]string, shards)
	for s := range shards {
		names[s] = servers[s*len(servers)/shards].Name
	}
	return tx.InitMap(ctx, names)
}

// ensureServers runs shardschema.EnsureServer on every connection, in parallel, and
// returns the first error by server name.
func ensureServers(ctx context.Context, conns map[string]*pgx.Conn, layout idgen.Layout) error {
	errs := make(map[string]error, len(conns))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, conn := range conns {
		wg.Go(func() {
			if err := shardschema.EnsureServer(ctx, conn, layout); err != nil {
				mu.Lock()
				errs[name] = &ServerError{Server: name, Err: err}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	names := make([]string, 0, len(errs))
	for name := range errs {
		names = append(names, name)
	}
	sort.Strings(names)
	if len(names) > 0 {
		return errs[names[0]]
	}
	return nil
}
