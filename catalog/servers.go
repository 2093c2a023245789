package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/router"
)

// Errors of server changes. Test with errors.Is.
var (
	// ErrBadDSN reports a DSN the driver cannot parse, or a change that
	// gives no DSN at all. Give a postgres:// URL or libpq key=value
	// pairs.
	ErrBadDSN = errors.New("bad server DSN")
	// ErrDSNInUse reports a DSN that another server already has: one
	// database cannot be two servers. Give each server a database of its
	// own; to change a server's DSN, shardctl server set-dsn.
	ErrDSNInUse = errors.New("the DSN is another server's")
)

// Statements on the servers. A server's admin_dsn is stored NULL when it
// is the same as its dsn, so that changing the one DSN of a server that
// has one changes both. sqlServersAll reads admin_dsn through the row's
// JSON so that it also reads a catalog not yet migrated to version 7
// (application processes upgraded before the catalog keep starting).
// sqlServersApp, what application processes read, leaves admin_dsn out
// and says only whether there is one.
const (
	sqlServersAll = `SELECT name, dsn, coalesce(to_jsonb(s) ->> 'admin_dsn', ''), replicas, state FROM shardkit.servers s ORDER BY name`
	sqlServersApp = `SELECT name, dsn, to_jsonb(s) ->> 'admin_dsn' IS NULL, replicas, state FROM shardkit.servers s ORDER BY name`
	// sqlServersAppView is sqlServersApp through the view the application
	// role may read (catalog version 12): it says whether a server has an
	// admin DSN apart without the column itself, which the role may not read.
	sqlServersAppView = `SELECT name, dsn, direct, replicas, state FROM shardkit.servers_app ORDER BY name`
	sqlHasAppView     = `SELECT to_regclass('shardkit.servers_app') IS NOT NULL`
	sqlServerAdd      = `INSERT INTO shardkit.servers (name, dsn, admin_dsn, replicas) VALUES ($1, $2, nullif(nullif($3, ''), $2), $4)`
	sqlServerOne      = `SELECT dsn, coalesce(admin_dsn, '') FROM shardkit.servers WHERE name = $1 FOR UPDATE`
	sqlServerOwner    = `SELECT name FROM shardkit.servers
	WHERE name <> $1 AND (dsn IN ($2, $3) OR admin_dsn IN ($2, $3)) ORDER BY name LIMIT 1`
	sqlServerSetDSN = `UPDATE shardkit.servers SET dsn = $2, admin_dsn = nullif(nullif($3, ''), $2) WHERE name = $1`
)

// serverQueries are the statements that read the servers and their
// recorded primaries, as the catalog's view and role may.
type serverQueries struct {
	servers, primaries string
	admin              bool // servers reads the admin DSNs
}

// serverQueries returns the statements of c: an operator's read the admin
// DSNs; an application's read through the view the application role may
// read (it cannot read admin_dsn), or, on a catalog before version 12,
// around it. The view's presence is asked once per Catalog.
func (c *Catalog) serverQueries(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (serverQueries, error) {
	if c.admin {
		return serverQueries{servers: sqlServersAll, primaries: sqlServerPrimaries, admin: true}, nil
	}
	if s := c.appQueries.Load(); s != nil {
		return *s, nil
	}
	var view bool
	if err := q.QueryRow(ctx, sqlHasAppView).Scan(&view); err != nil {
		return serverQueries{}, err
	}
	s := serverQueries{servers: sqlServersApp, primaries: sqlServerPrimaries}
	if view {
		s = serverQueries{servers: sqlServersAppView, primaries: sqlServerPrimariesAppView}
	}
	c.appQueries.Store(&s)
	return s, nil
}

// readServers reads the servers, with their admin DSNs when qs.admin holds
// (an operator's catalog), else with only whether each has one.
func readServers(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, qs serverQueries) ([]router.Server, error) {
	if !qs.admin {
		rows, err := q.Query(ctx, qs.servers)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, func(r pgx.CollectableRow) (router.Server, error) {
			var s router.Server
			var direct bool
			err := r.Scan(&s.Name, &s.DSN, &direct, &s.Replicas, &s.State)
			s.AdminHidden = !direct
			return s, err
		})
	}
	rows, err := q.Query(ctx, qs.servers)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (router.Server, error) {
		var s router.Server
		err := r.Scan(&s.Name, &s.DSN, &s.AdminDSN, &s.Replicas, &s.State)
		return s, err
	})
}

// Servers lists the registered servers (names, DSNs, replicas, states),
// by name.
func (t *Tx) Servers(ctx context.Context) ([]router.Server, error) {
	return readServers(ctx, t.tx, serverQueries{servers: sqlServersAll, primaries: sqlServerPrimaries, admin: true})
}

// AddServer registers a server (name, DSN, admin DSN, replicas), active.
// An AdminDSN that is empty or equal to DSN records one DSN for both.
func (t *Tx) AddServer(ctx context.Context, s router.Server) error {
	replicas := s.Replicas
	if replicas == nil {
		replicas = []string{}
	}
	_, err := t.tx.Exec(ctx, sqlServerAdd, s.Name, s.DSN, s.AdminDSN, replicas)
	return err
}

// SetServerDSN changes the DSNs of a registered server, to rotate a
// password or put a pooler in front of it, in a new map version: routers
// learn of it as of any map change. app is the DSN of application
// traffic, admin the DSN of administration and replication; "" keeps the
// current one. An admin DSN equal to the app DSN records one DSN for both
// (later app changes then change both). A server the catalog lacks is
// router.ErrUnknownServer; a DSN that does not parse, or neither DSN
// given, is ErrBadDSN; a DSN that another server has is ErrDSNInUse.
//
// Routers reopen nothing themselves: a process that holds connections to
// the server keeps them until its pools are reopened.
func (t *Tx) SetServerDSN(ctx context.Context, name, app, admin string) error {
	if app == "" && admin == "" {
		return fmt.Errorf("shardkit: server %q: %w: give an app DSN, an admin DSN or both", name, ErrBadDSN)
	}
	for _, d := range []struct{ what, dsn string }{{"app", app}, {"admin", admin}} {
		if d.dsn == "" {
			continue
		}
		if _, err := pgconn.ParseConfig(d.dsn); err != nil {
			// The driver's message can quote the DSN, password included.
			return fmt.Errorf("shardkit: server %q: %w: the %s DSN does not parse; give a URL (postgres://…) or key=value pairs", name, ErrBadDSN, d.what)
		}
	}
	// The map version first: every map change takes the configuration
	// row's lock before any other, so none waits on another in reverse.
	if err := t.BumpMapVersion(ctx); err != nil {
		if isUndefinedTable(err) {
			return fmt.Errorf("shardkit: %w", ErrNoCatalog)
		}
		return err
	}
	var curApp, curAdmin string
	err := t.tx.QueryRow(ctx, sqlServerOne, name).Scan(&curApp, &curAdmin)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("shardkit: %w: %q; register it first (migrations.Provision)", router.ErrUnknownServer, name)
	}
	if err != nil {
		return err
	}
	if app == "" {
		app = curApp
	}
	if admin == "" {
		admin = curAdmin
	}
	if admin == "" {
		admin = app
	}
	var other string
	err = t.tx.QueryRow(ctx, sqlServerOwner, name, app, admin).Scan(&other)
	if err == nil {
		return fmt.Errorf("shardkit: server %q: %w %q; one database cannot be two servers", name, ErrDSNInUse, other)
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	_, err = t.tx.Exec(ctx, sqlServerSetDSN, name, app, admin)
	return err
}
