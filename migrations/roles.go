package migrations

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/approle"
	"github.com/shardkit/shardkit/internal/shardschema"
	"github.com/shardkit/shardkit/router"
)

// grantBatch is how many schemas share one GRANT statement.
const grantBatch = 200

type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// appRole reads the catalog's application role.
func appRole(ctx context.Context, cat *catalog.Catalog) (string, error) {
	cfg, err := cat.Config(ctx)
	if err != nil {
		return "", err
	}
	if !approle.Valid(cfg.AppRole) {
		return "", fmt.Errorf("shardkit: %w: the catalog's application role %q", catalog.ErrBadRole, cfg.AppRole)
	}
	return cfg.AppRole, nil
}

// sqlGrantServer is what the application role holds on a server's own
// schema, whatever shards the server is home to: shardkit.next_id (the
// shards' column defaults call it), and the commit decisions of atomic
// transactions, which the coordinating process inserts and its resolver
// reads and deletes.
const sqlGrantServer = `GRANT USAGE ON SCHEMA shardkit TO %[1]s;
GRANT SELECT, INSERT, DELETE ON shardkit.tx_decisions TO %[1]s`

// grantHomes creates the application role on a server's cluster if it is
// missing, grants it the server's own part (sqlGrantServer) and the shard
// schemas the map places on the server and that take traffic there
// (active or moving: a fenced shard's privileges are the cutover's to set).
func grantHomes(ctx context.Context, db execer, role string, snap *router.Snapshot, server string) error {
	if _, err := db.Exec(ctx, approle.EnsureSQL(role)); err != nil {
		return fmt.Errorf("create the application role %s: %w", role, err)
	}
	if _, err := db.Exec(ctx, fmt.Sprintf(sqlGrantServer, role), pgx.QueryExecModeSimpleProtocol); err != nil {
		return fmt.Errorf("grant the application role %s the server's schema shardkit: %w", role, err)
	}
	var schemas []string
	for _, p := range snap.Placements() {
		if p.Server == server && p.State != router.StateFenced {
			schemas = append(schemas, router.SchemaName(p.Shard))
		}
	}
	for len(schemas) > 0 {
		n := min(len(schemas), grantBatch)
		if _, err := db.Exec(ctx, shardschema.GrantHomeSQL(role, schemas[:n]), pgx.QueryExecModeSimpleProtocol); err != nil {
			return fmt.Errorf("grant the application role %s its shard schemas: %w", role, err)
		}
		schemas = schemas[n:]
	}
	return nil
}

// grantAll is grantHomes on every server of a migration run, so that the
// tables a run adds are granted too.
func grantAll(ctx context.Context, cat *catalog.Catalog, snap *router.Snapshot, work []serverWork) error {
	role, err := appRole(ctx, cat)
	if err != nil {
		return err
	}
	for _, w := range work {
		if err := grantHomes(ctx, w.conn, role, snap, w.srv.Name); err != nil {
			return withServer(w.srv.Name, err)
		}
	}
	return nil
}
