// Package shardschema is the part of package migrations that only
// shardkit's own packages use: creating one shard's schema on a server and
// dropping it again (the shard mover, its rollback, backup's restore),
// installing shardkit's server-level objects on one connection, and the
// per-shard SQL files as the catalog recorded them. It lives under
// internal/ so that none of it is a promise to users, who provision and
// migrate with migrations.Provision and migrations.Migrate.
//
// Package migrations implements these operations, since they share its
// per-schema machinery, and hands them over when it loads (see
// [Register]). Every package that calls them imports migrations too, for
// its Version, errors or Provision:
//
//	err := shardschema.ApplyShard(ctx, conn, layout, shard, shardSQL,
//		shardschema.ApplyOptions{DeferIndexes: true})
package shardschema

import (
	"context"
	"io/fs"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/idgen"
)

// DB is what these operations need of a connection to a shard server.
// *pgx.Conn, *pgxpool.Pool, *pgxpool.Conn and pgx.Tx satisfy it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// The parts of a per-shard migration version, as shardkit.shard_migrations
// and the catalog record them: the tables file NNNN_name.sql and the
// optional secondary-index file NNNN_name.indexes.sql.
const (
	PartTables  = "tables"
	PartIndexes = "indexes"
)

// ApplyOptions configure ApplyShard.
type ApplyOptions struct {
	// DeferIndexes skips the NNNN_name.indexes.sql parts; ApplyIndexes
	// applies them later (the shard mover builds secondary indexes after
	// its copy). The zero value applies them.
	DeferIndexes bool
	// Then, if set, runs last in ApplyShard's transaction, after the
	// schema's SQL: what must exist from the moment the schema's tables do
	// (the shard mover's write barrier on its target).
	Then func(ctx context.Context, tx pgx.Tx) error
}

// Ops are the implementations package migrations registers.
type Ops struct {
	ApplyShard   func(ctx context.Context, db DB, layout idgen.Layout, shard int, shardSQL fs.FS, opts ApplyOptions) error
	ApplyIndexes func(ctx context.Context, db DB, layout idgen.Layout, shard int, shardSQL fs.FS) error
	DropShard    func(ctx context.Context, db DB, shard int) error
	EnsureServer func(ctx context.Context, db DB, layout idgen.Layout) error
	CatalogSQL   func(ctx context.Context, cat *catalog.Catalog) (fs.FS, error)
}

var ops *Ops

// Register is called once by package migrations when it loads.
func Register(o Ops) { ops = &o }

func registered() *Ops {
	if ops == nil {
		panic("shardschema: package migrations has not registered (import it)")
	}
	return ops
}

// ApplyShard creates the schema of one logical shard on a server, or brings
// it up to date: shardkit's server objects (EnsureServer), the schema, its
// id_seq and next_id(), then every version of shardSQL not yet applied, each
// recorded in the server's shardkit.shard_migrations in the same
// transaction. Running it again does nothing. The shard mover uses it with
// DeferIndexes to create a target schema, then ApplyIndexes after the copy.
func ApplyShard(ctx context.Context, db DB, layout idgen.Layout, shard int, shardSQL fs.FS, opts ApplyOptions) error {
	return registered().ApplyShard(ctx, db, layout, shard, shardSQL, opts)
}

// ApplyIndexes applies the NNNN_name.indexes.sql parts that ApplyShard
// deferred on one shard schema (plain CREATE INDEX, inside a transaction).
func ApplyIndexes(ctx context.Context, db DB, layout idgen.Layout, shard int, shardSQL fs.FS) error {
	return registered().ApplyIndexes(ctx, db, layout, shard, shardSQL)
}

// DropShard drops a shard's schema with everything in it and forgets its
// migration records on this server, in one transaction: after a shard has
// moved away, this removes the old copy so that the shard could later be
// provisioned here again.
func DropShard(ctx context.Context, db DB, shard int) error {
	return registered().DropShard(ctx, db, shard)
}

// EnsureServer installs or updates shardkit's server-level objects (schema
// shardkit: the layout row, the per-schema migration record,
// shardkit.next_id and the transaction decisions of plugin.Atomic) on one
// shard server, and checks that the server was provisioned with layout
// (migrations.ErrLayoutMismatch otherwise). It is cheap when nothing is to
// do. Provision and Migrate run it on every server.
func EnsureServer(ctx context.Context, db DB, layout idgen.Layout) error {
	return registered().EnsureServer(ctx, db, layout)
}

// CatalogSQL returns the application's per-shard SQL files as recorded in
// the catalog by migrations.Provision and Migrate, as a file system for
// ApplyShard: the shard mover creates a target schema from it without
// needing the application's files. It returns nil (no files) when none are
// recorded.
func CatalogSQL(ctx context.Context, cat *catalog.Catalog) (fs.FS, error) {
	return registered().CatalogSQL(ctx, cat)
}
