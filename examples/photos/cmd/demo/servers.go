package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/examples/photos/app"
	"github.com/shardkit/shardkit/internal/pglocal"
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
}

// withDSNParam sets a connection parameter in the DSN of every server,
// the one added during the run included.
func (c cluster) withDSNParam(key, value string) cluster {
	set := func(s migrations.ServerSpec) migrations.ServerSpec {
		if u, err := url.Parse(s.DSN); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
			q := u.Query()
			q.Set(key, value)
			u.RawQuery = q.Encode()
			s.DSN = u.String()
		} else {
			s.DSN += " " + key + "=" + value
		}
		return s
	}
	servers := make([]migrations.ServerSpec, len(c.servers))
	for i, s := range c.servers {
		servers[i] = set(s)
	}
	c.servers = servers
	if add := c.addServer; add != nil {
		c.addServer = func(ctx context.Context) (migrations.ServerSpec, error) {
			s, err := add(ctx)
			return set(s), err
		}
	}
	return c
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
	if err != nil {
		return cluster{}, false, err
	}
	c := cluster{catalog: cat, servers: servers, stop: func() {}}
	if ns := os.Getenv(envNewServer); ns != "" {
		added, err := app.ParseServers(ns)
		if err != nil || len(added) != 1 {
			return cluster{}, false, fmt.Errorf("demo: %s=%q: want one name=DSN", envNewServer, ns)
		}
		c.addServer = func(context.Context) (migrations.ServerSpec, error) { return added[0], nil }
	}
	return c, true, nil
}

// startLocal starts a catalog cluster and n server clusters with pglocal;
// addServer starts one more (pglocal Set.Add).
func startLocal(ctx context.Context, n int) (cluster, error) {
	set, err := pglocal.Start(ctx, pglocal.Options{N: n + 1})
	if err != nil {
		return cluster{}, err
	}
	c := cluster{local: true, stop: set.Stop}
	if err := createDB(ctx, set.Clusters[0], "catalog"); err != nil {
		set.Stop()
		return cluster{}, err
	}
	c.catalog = set.Clusters[0].DSN("catalog")
	for i := 1; i <= n; i++ {
		if err := createDB(ctx, set.Clusters[i], "photos"); err != nil {
			set.Stop()
			return cluster{}, err
		}
		c.servers = append(c.servers, migrations.ServerSpec{Name: fmt.Sprintf("pg%d", i), DSN: set.Clusters[i].DSN("photos")})
	}
	c.addServer = func(ctx context.Context) (migrations.ServerSpec, error) {
		cl, err := set.Add(ctx, pglocal.Options{})
		if err != nil {
			return migrations.ServerSpec{}, err
		}
		if err := createDB(ctx, cl, "photos"); err != nil {
			return migrations.ServerSpec{}, err
		}
		return migrations.ServerSpec{Name: fmt.Sprintf("pg%d", len(set.Clusters)-1), DSN: cl.DSN("photos")}, nil
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
