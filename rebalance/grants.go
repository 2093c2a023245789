package rebalance

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardkit/shardkit/internal/shardschema"
)

// The application role's privileges follow the shard's home: a cutover
// revokes them on the copy it leaves, in the barrier's own transaction
// (so that from the final LSN on, that copy refuses a stale router's
// reads as its barrier refuses its writes), and grants them on the copy
// it flips to, before the flip. A release of the fence grants them back
// on the copy that stays the home. The movers, the apply workers of both
// directions and shardctl verify connect as the operator and are not
// affected.

const sqlRoleExists = `SELECT to_regrole($1) IS NOT NULL`

// roleOn reports whether the application role exists on q's cluster: a
// server provisioned before shardkit had roles has none, and then there
// is nothing to revoke or grant.
func roleOn(ctx context.Context, q querier, role string) (bool, error) {
	if role == "" {
		return false, nil
	}
	var ok bool
	if err := q.QueryRow(ctx, sqlRoleExists, role).Scan(&ok); err != nil {
		return false, fmt.Errorf("look up the application role %s: %w", role, err)
	}
	return ok, nil
}

// homeSQL is GrantHomeSQL (grant) or RevokeHomeSQL of schema when the
// role exists on p's cluster, else "".
func homeSQL(ctx context.Context, p querier, role, schema string, grant bool) (string, error) {
	ok, err := roleOn(ctx, p, role)
	if err != nil || !ok {
		return "", err
	}
	if grant {
		return shardschema.GrantHomeSQL(role, []string{schema}), nil
	}
	return shardschema.RevokeHomeSQL(role, []string{schema}), nil
}

// setHome grants (or revokes) the application role's privileges on
// schema on p, if the role exists there and the schema does.
func setHome(ctx context.Context, p *pgxpool.Pool, role, schema string, grant bool) error {
	ok, err := schemaExists(ctx, p, schema)
	if err != nil || !ok {
		return err
	}
	sql, err := homeSQL(ctx, p, role, schema, grant)
	if err != nil || sql == "" {
		return err
	}
	if _, err := p.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol); err != nil {
		what := "grant"
		if !grant {
			what = "revoke"
		}
		return fmt.Errorf("%s the application role %s on %s: %w", what, role, schema, err)
	}
	return nil
}
