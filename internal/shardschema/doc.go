// Package shardschema is the per-schema machinery of shardkit's
// migrations: creating or bringing up to date one shard's schema on a
// server, step by step with each step recorded in the server's
// shardkit.shard_migrations, and dropping it again; installing shardkit's
// server-level objects (EnsureServer); reading an application's per-shard
// SQL files (ReadVersions) or the copy the catalog recorded (CatalogSQL).
//
// Package migrations runs it across a catalog's servers (Provision,
// Migrate, with their retries, progress and lock waits), and exports its
// user-facing parts under its own names (migrations.Version,
// migrations.ShardError, migrations.ErrLayoutMismatch, …); the shard mover
// (rebalance) and backup's restore call it directly, on one connection to
// one server. Every import points down: shardschema imports catalog,
// router and idgen, never migrations, and nothing is wired at load time.
// It lives under internal/ so that none of it is a promise to users:
//
//	err := shardschema.ApplyShard(ctx, conn, layout, shard, shardSQL,
//		shardschema.ApplyOptions{DeferIndexes: true})
package shardschema

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// DB is what these operations need of a connection to a shard server.
// *pgx.Conn, *pgxpool.Pool, *pgxpool.Conn and pgx.Tx satisfy it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

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
