package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/examples/photos/app"
	"github.com/shardkit/shardkit/internal/harness/pgbouncer"
	"github.com/shardkit/shardkit/internal/harness/pglocal"
	"github.com/shardkit/shardkit/internal/pgdsn"
	"github.com/shardkit/shardkit/migrations"
)

// Environment variables of the demo. With none set it starts local
// clusters; with SHARDKIT_CATALOG and SHARDKIT_SERVERS it uses those.
const (
	envCatalog   = app.EnvCatalog        // catalog DSN
	envServers   = app.EnvServers        // initial shard servers: name=DSN,…
	envNewServer = "SHARDKIT_NEW_SERVER" // the server added during the demo: name=DSN
)

// cluster is where the demo runs: a catalog, the initial servers, and a
// way to get the server added during the run.
type cluster struct {
	catalog string
	servers []migrations.ServerSpec
	// addServer returns the new server; nil when there is none to add (the
	// demo then moves shards between the existing servers).
	addServer func(ctx context.Context) (migrations.ServerSpec, error)
	stop      func()
	local     bool
	// standby gives a local server a synchronous standby (-switchover):
	// a DSN naming both hosts, and the standby's host:port.
	standby func(ctx context.Context, server string) (dsn, to string, err error)
}

// fromEnv returns the servers named in the environment, or ok false when
// none are.
func fromEnv() (cluster, bool, error) {
	cat, srv := os.Getenv(envCatalog), os.Getenv(envServers)
	if cat == "" && srv == "" {
		return cluster{}, false, nil
	}
	if cat == "" || srv == "" {
		return cluster{}, false, fmt.Errorf("demo: set both %s and %s (or neither, for local clusters)", envCatalog, envServers)
	}
	servers, err := app.ParseServers(srv)
	if err == nil {
		servers, err = app.WithAdminDSNs(servers, os.Getenv(app.EnvAdminServers))
	}
	if err != nil {
		return cluster{}, false, err
	}
	c := cluster{catalog: cat, servers: servers, stop: func() {}}
	if ns := os.Getenv(envNewServer); ns != "" {
		added, err := app.ParseServers(ns)
		if err != nil || len(added) != 1 {
			return cluster{}, false, fmt.Errorf("demo: %s=%q: want one name=DSN", envNewServer, pgdsn.Redact(ns))
		}
		c.addServer = func(context.Context) (migrations.ServerSpec, error) { return added[0], nil }
	}
	return c, true, nil
}

// startLocal starts a catalog cluster and n server clusters with pglocal;
// addServer starts one more (pglocal Set.Add). With pooled, a PgBouncer in
// transaction mode stands in front of each server: the service's
// statements go through it (the server's DSN), while provisioning and
// moves connect to the server itself (its admin DSN).
func startLocal(ctx context.Context, n int, pooled bool) (cluster, error) {
	set, err := pglocal.Start(ctx, pglocal.Options{N: n + 1})
	if err != nil {
		return cluster{}, err
	}
	var bouncers []*pgbouncer.Bouncer
	c := cluster{local: true, stop: func() {
		for _, b := range bouncers {
			b.Stop()
		}
		set.Stop()
	}}
	spec := func(ctx context.Context, name string, cl *pglocal.Cluster) (migrations.ServerSpec, error) {
		if err := createDB(ctx, cl, "photos"); err != nil {
			return migrations.ServerSpec{}, err
		}
		s := migrations.ServerSpec{Name: name, DSN: cl.DSN("photos")}
		if pooled {
			b, err := pgbouncer.Start(ctx, pgbouncer.Options{Port: cl.Port, Settings: map[string]string{"max_client_conn": "1000"}})
			if err != nil {
				return migrations.ServerSpec{}, err
			}
			bouncers = append(bouncers, b)
			s.AdminDSN, s.DSN = s.DSN, b.DSN("photos")
		}
		return s, nil
	}
	if err := createDB(ctx, set.Clusters[0], "catalog"); err != nil {
		c.stop()
		return cluster{}, err
	}
	c.catalog = set.Clusters[0].DSN("catalog")
	for i := 1; i <= n; i++ {
		s, err := spec(ctx, fmt.Sprintf("pg%d", i), set.Clusters[i])
		if err != nil {
			c.stop()
			return cluster{}, err
		}
		c.servers = append(c.servers, s)
	}
	c.standby = func(ctx context.Context, server string) (string, string, error) {
		for i, s := range c.servers {
			if s.Name == server {
				return addStandby(ctx, set, set.Clusters[i+1])
			}
		}
		return "", "", fmt.Errorf("demo: no server %s", server)
	}
	c.addServer = func(ctx context.Context) (migrations.ServerSpec, error) {
		cl, err := set.Add(ctx, pglocal.Options{})
		if err != nil {
			return migrations.ServerSpec{}, err
		}
		return spec(ctx, fmt.Sprintf("pg%d", len(set.Clusters)-1), cl)
	}
	return c, nil
}

func createDB(ctx context.Context, cl *pglocal.Cluster, name string) error {
	conn, err := pgx.Connect(ctx, cl.DSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	return err
}

// serverNames lists the names of specs.
func serverNames(specs []migrations.ServerSpec) string {
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	return strings.Join(names, ", ")
}
