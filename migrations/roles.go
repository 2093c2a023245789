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

// grantHomes creates the application role on a server's cluster if it is
// missing and grants it the shard schemas the map places on the server
// and that take traffic there (active or moving: a fenced shard's
// privileges are the cutover's to set).
func grantHomes(ctx context.Context, db execer, role string, snap *router.Snapshot, server string) error {
	if _, err := db.Exec(ctx, approle.EnsureSQL(role)); err != nil {
		return fmt.Errorf("create the application role %s: %w", role, err)
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
