// Package adminconn opens the operator's connections to a shard server:
// its admin DSN, fenced by the primary the catalog records for it
// (router.Fence), as the application's pools are. Moves, migrations, the
// resolver and backups use it, so that an old primary that came back
// writable after a failover receives no admin write either: a host that
// is not the recorded primary is refused before any statement, with a
// *router.NotPrimaryError inside the connection's error, and a DSN naming
// several hosts goes on to the next.
package adminconn

import (
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardkit/shardkit/internal/pgdsn"
	"github.com/shardkit/shardkit/router"
)

// Config parses dsn, a DSN of server srv (its admin DSN, or its
// application DSN where it has no admin one), and fences it with srv's
// recorded primary (nothing recorded: no check).
func Config(srv router.Server, dsn string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("server %s: bad DSN: %w", srv.Name, pgdsn.Scrub(err))
	}
	router.Fence(&cfg.Config, srv.Name, srv.Primary)
	return cfg, nil
}

// PoolConfig is Config for a pool.
func PoolConfig(srv router.Server, dsn string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("server %s: bad DSN: %w", srv.Name, pgdsn.Scrub(err))
	}
	router.Fence(&cfg.ConnConfig.Config, srv.Name, srv.Primary)
	return cfg, nil
}
