package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/examples/photos/app"
	"github.com/shardkit/shardkit/internal/approle"
	"github.com/shardkit/shardkit/internal/harness/pgbouncer"
	"github.com/shardkit/shardkit/internal/harness/pglocal"
	"github.com/shardkit/shardkit/internal/pgdsn"
	"github.com/shardkit/shardkit/migrations"
)

// Environment variables of the demo. With none set it starts local
// clusters; with SHARDKIT_CATALOG and SHARDKIT_SERVERS it uses those.
const (
	envCatalog   = app.EnvCatalog        // catalog DSN, the operator's
	envServers   = app.EnvServers        // initial shard servers: name=DSN,… (application DSNs)
	envNewServer = "SHARDKIT_NEW_SERVER" // the server added during the demo: name=DSN
	// envAppCatalog is the catalog DSN the service connects with: a login
	// of the application role. Unset, the service uses $SHARDKIT_CATALOG.
	envAppCatalog = "SHARDKIT_APP_CATALOG"
)

// appLogin is the login role the service runs as on the local clusters: a
// member of the catalog's application role (catalog.DefaultAppRole), with
// nothing of its own.
const appLogin = "photos_app"

// cluster is where the demo runs: a catalog, the initial servers, and a
// way to get the server added during the run.
type cluster struct {
	catalog    string // the operator's DSN: provisioning, moves
	appCatalog string // the service's DSN: a login of the application role
	// servers are registered with their application DSN (DSN) and, apart
	// from it, the operator's (AdminDSN).
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
	appCat := os.Getenv(envAppCatalog)
	if appCat == "" {
		appCat = cat
	}
	c := cluster{catalog: cat, appCatalog: appCat, servers: servers, stop: func() {}}
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
// addServer starts one more (pglocal Set.Add). On every cluster it creates
// appLogin, the service's login; each server is registered with an
// application DSN that logs in as it and the superuser's DSN as its admin
// DSN. With pooled, a PgBouncer in transaction mode stands in front of
// each server: the service's statements go through it (the server's DSN,
// appLogin with a password of this run), while provisioning and moves
// connect to the server itself (its admin DSN).
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
	// The pooler checks the login's password; the clusters trust local
	// connections.
	password := rand.Text()
	spec := func(ctx context.Context, name string, cl *pglocal.Cluster) (migrations.ServerSpec, error) {
		if err := createDB(ctx, cl, "photos"); err != nil {
			return migrations.ServerSpec{}, err
		}
		if err := createLogin(ctx, cl); err != nil {
			return migrations.ServerSpec{}, err
		}
		s := migrations.ServerSpec{Name: name, DSN: asLogin(cl.DSN("photos"), appLogin, ""), AdminDSN: cl.DSN("photos")}
		if pooled {
			b, err := pgbouncer.Start(ctx, pgbouncer.Options{Port: cl.Port, Users: map[string]string{appLogin: password},
				Settings: map[string]string{"max_client_conn": "1000"}})
			if err != nil {
				return migrations.ServerSpec{}, err
			}
			bouncers = append(bouncers, b)
			s.DSN = b.UserDSN(appLogin, password, "photos")
		}
		return s, nil
	}
	if err := createDB(ctx, set.Clusters[0], "catalog"); err != nil {
		c.stop()
		return cluster{}, err
	}
	if err := createLogin(ctx, set.Clusters[0]); err != nil {
		c.stop()
		return cluster{}, err
	}
	c.catalog = set.Clusters[0].DSN("catalog")
	c.appCatalog = asLogin(c.catalog, appLogin, "")
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

// createLogin creates appLogin on a cluster, with the application's group
// role it is a member of: nothing else is granted to it, the group role's
// privileges are what provisioning grants. The clusters trust local
// connections, so it has no password.
func createLogin(ctx context.Context, cl *pglocal.Cluster) error {
	conn, err := pgx.Connect(ctx, cl.DSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	login := `CREATE ROLE ` + appLogin + ` LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION IN ROLE ` + catalog.DefaultAppRole
	for _, sql := range []string{approle.EnsureSQL(catalog.DefaultAppRole), login} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("create the login %s: %w", appLogin, err)
		}
	}
	return nil
}

// asLogin is dsn (a URL) logging in as user, with password unless "".
func asLogin(dsn, user, password string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	if password != "" {
		u.User = url.UserPassword(user, password)
	} else {
		u.User = url.User(user)
	}
	return u.String()
}

// serverNames lists the names of specs.
func serverNames(specs []migrations.ServerSpec) string {
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	return strings.Join(names, ", ")
}

// sayRole says which role the service runs as, read from its own
// connection to the catalog (its GORM handle's default connection), and
// whether that role is refused the servers' admin DSNs and writes to the
// shard map, as an application role is. With strict (the local clusters,
// where the demo made the role) a role that is not refused both is an
// error.
func sayRole(ctx context.Context, a *app.App, operatorDSN string, strict bool, say func(string, ...any)) error {
	db := a.Store.DB().WithContext(ctx)
	var role struct {
		Name  string
		Super bool
	}
	if err := db.Raw(`SELECT current_user AS name, rolsuper AS super FROM pg_roles WHERE rolname = current_user`).Scan(&role).Error; err != nil {
		return fmt.Errorf("read the service's role: %w", err)
	}
	readErr, writeErr := a.Catalog.Refusals(ctx)
	operator := "the operator"
	if conn, err := pgx.Connect(ctx, operatorDSN); err == nil {
		var name string
		if conn.QueryRow(ctx, `SELECT current_user`).Scan(&name) == nil {
			operator = "the operator, role " + name
		}
		_ = conn.Close(ctx)
	}
	if role.Super || !insufficientPrivilege(readErr) || !insufficientPrivilege(writeErr) {
		say("WARNING: the photo service runs as role %s (superuser: %v; reading servers.admin_dsn: %s; writing the shard map: %s): not an application role",
			role.Name, role.Super, outcome(readErr), outcome(writeErr))
		if strict {
			return fmt.Errorf("the service's role %s is not an application role", role.Name)
		}
		return nil
	}
	say("the photo service runs as role %s (not a superuser): shardkit.servers.admin_dsn and writes to shardkit.shard_map are refused it (42501); provisioning, moves and the server readings below run as %s",
		role.Name, operator)
	return nil
}

func insufficientPrivilege(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42501" // insufficient_privilege
}

func outcome(err error) string {
	if err == nil {
		return "allowed"
	}
	if insufficientPrivilege(err) {
		return "refused"
	}
	return err.Error()
}
