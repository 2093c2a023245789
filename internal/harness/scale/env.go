package scale

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/harness/pgbouncer"
	"github.com/shardkit/shardkit/internal/harness/pglocal"
	"github.com/shardkit/shardkit/migrations"
)

// dbName is the database of the catalog and of the shards, on each cluster.
const dbName = "scale"

// env is where a run takes place: a catalog cluster and the shard
// servers' clusters, each behind a PgBouncer in transaction mode unless
// the run is direct.
type env struct {
	set      *pglocal.Set
	bouncers []*pgbouncer.Bouncer
	// catalogDSN is the app processes' catalog (the catalog's PgBouncer);
	// catalogAdmin reaches the catalog itself (the mover, the harness's
	// own readings).
	catalogDSN, catalogAdmin string
	catalogBouncer           *pgbouncer.Bouncer // nil when direct
	servers                  []migrations.ServerSpec
}

// startEnv starts the clusters and poolers and provisions the catalog and
// the shards.
func startEnv(ctx context.Context, o Options, log *slog.Logger) (*env, error) {
	conns := 200
	if o.Direct {
		// Every process holds its own connections: a few per server, one
		// per router on the catalog.
		conns = max(conns, o.Procs*(o.Routers+3)+50)
	}
	set, err := pglocal.Start(ctx, pglocal.Options{N: o.Servers + 1, Settings: map[string]string{
		"max_connections": strconv.Itoa(conns),
		// The clusters share the machine with hundreds of processes.
		"shared_buffers": "64MB",
	}})
	if err != nil {
		return nil, err
	}
	e := &env{set: set}
	pooled := func(cl *pglocal.Cluster) (string, *pgbouncer.Bouncer, error) {
		if o.Direct {
			return cl.DSN(dbName), nil, nil
		}
		b, err := pgbouncer.Start(ctx, pgbouncer.Options{Port: cl.Port, Settings: map[string]string{
			"max_client_conn": "15000",
		}})
		if err != nil {
			return "", nil, err
		}
		e.bouncers = append(e.bouncers, b)
		return b.DSN(dbName), b, nil
	}
	for i, cl := range set.Clusters {
		if err := createDB(ctx, cl.DSN("postgres"), dbName); err != nil {
			e.stop()
			return nil, err
		}
		dsn, b, err := pooled(cl)
		if err != nil {
			e.stop()
			return nil, err
		}
		if i == 0 {
			e.catalogDSN, e.catalogAdmin, e.catalogBouncer = dsn, cl.DSN(dbName), b
			continue
		}
		e.servers = append(e.servers, migrations.ServerSpec{Name: fmt.Sprintf("pg%d", i), DSN: dsn, AdminDSN: cl.DSN(dbName)})
	}
	cat, err := catalog.Open(ctx, e.catalogAdmin)
	if err != nil {
		e.stop()
		return nil, err
	}
	defer cat.Close()
	if err := migrations.Provision(ctx, cat, migrations.ProvisionOptions{
		Servers: e.servers, Shards: o.Shards, ShardSQL: shardSQL(),
		Progress: func(p migrations.Progress) {
			if p.Done == p.Total {
				log.Info("provisioned", "schemas", p.Total)
			}
		},
	}); err != nil {
		e.stop()
		return nil, err
	}
	return e, nil
}

// stop stops the poolers and the clusters.
func (e *env) stop() {
	for _, b := range e.bouncers {
		b.Stop()
	}
	e.set.Stop()
}

func createDB(ctx context.Context, dsn, name string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	return err
}
