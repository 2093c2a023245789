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
	// ErrNoServerLink reports a catalog made before version 15, which
	// cannot record whether a server is reached directly or through a
	// pooler. Migrate it (Catalog.Migrate), then set it again.
	ErrNoServerLink = errors.New("the catalog cannot record how a server is reached (made before catalog version 15): migrate it first (Catalog.Migrate)")
)

// Statements on the servers. A server's admin_dsn is stored NULL when it
// is the same as its dsn, so that changing the one DSN of a server that
// has one changes both. sqlServersAll reads admin_dsn (and pooled)
// through the row's JSON so that it also reads a catalog not yet
// migrated to version 7 (application processes upgraded before the
// catalog keep starting). sqlServersApp, what application processes
// read, leaves admin_dsn out and says only whether there is none. Both
// read pooled, the catalog's record of how dsn reaches the server (from
// version 15; NULL when nothing is recorded).
const (
	sqlServersAll = `SELECT name, dsn, coalesce(to_jsonb(s) ->> 'admin_dsn', ''), replicas, state, (to_jsonb(s) ->> 'pooled')::boolean FROM shardkit.servers s ORDER BY name`
	sqlServersApp = `SELECT name, dsn, to_jsonb(s) ->> 'admin_dsn' IS NULL, replicas, state, (to_jsonb(s) ->> 'pooled')::boolean FROM shardkit.servers s ORDER BY name`
	// sqlServersAppView is sqlServersApp through the view the application
	// role may read (catalog version 12): it says whether a server has an
	// admin DSN apart without the column itself, which the role may not
	// read; sqlServersAppViewPooled reads the view of version 15, which
	// adds the record.
	sqlServersAppView       = `SELECT name, dsn, direct, replicas, state, NULL::boolean FROM shardkit.servers_app ORDER BY name`
	sqlServersAppViewPooled = `SELECT name, dsn, NOT admin_apart, replicas, state, pooled FROM shardkit.servers_app ORDER BY name`
	sqlHasAppView           = `SELECT to_regclass('shardkit.servers_app') IS NOT NULL,
	EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('shardkit.servers_app') AND attname = 'pooled' AND NOT attisdropped)`
	sqlHasPooled = `SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'shardkit.servers'::regclass AND attname = 'pooled' AND NOT attisdropped)`
	sqlServerAdd = `INSERT INTO shardkit.servers (name, dsn, admin_dsn, replicas) VALUES ($1, $2, nullif(nullif($3, ''), $2), $4)`
	// sqlServerAddPooled is sqlServerAdd recording pooled ($5).
	sqlServerAddPooled = `INSERT INTO shardkit.servers (name, dsn, admin_dsn, replicas, pooled) VALUES ($1, $2, nullif(nullif($3, ''), $2), $4, $5)`
	sqlServerOne       = `SELECT dsn, coalesce(admin_dsn, '') FROM shardkit.servers WHERE name = $1 FOR UPDATE`
	sqlServerOwner     = `SELECT name FROM shardkit.servers
	WHERE name <> $1 AND (dsn IN ($2, $3) OR admin_dsn IN ($2, $3)) ORDER BY name LIMIT 1`
	sqlServerSetDSN  = `UPDATE shardkit.servers SET dsn = $2, admin_dsn = nullif(nullif($3, ''), $2) WHERE name = $1`
	sqlServerSetLink = `UPDATE shardkit.servers SET pooled = $2 WHERE name = $1`
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
	var view, pooled bool
	if err := q.QueryRow(ctx, sqlHasAppView).Scan(&view, &pooled); err != nil {
		return serverQueries{}, err
	}
	s := serverQueries{servers: sqlServersApp, primaries: sqlServerPrimaries}
	if view {
		s = serverQueries{servers: sqlServersAppView, primaries: sqlServerPrimariesAppView}
	}
	if pooled {
		s.servers = sqlServersAppViewPooled
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
			var oneDSN bool
			var pooled *bool
			err := r.Scan(&s.Name, &s.DSN, &oneDSN, &s.Replicas, &s.State, &pooled)
			s.AdminHidden, s.Link = !oneDSN, linkOf(pooled)
			return s, err
		})
	}
	rows, err := q.Query(ctx, qs.servers)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (router.Server, error) {
		var s router.Server
		var pooled *bool
		err := r.Scan(&s.Name, &s.DSN, &s.AdminDSN, &s.Replicas, &s.State, &pooled)
		s.Link = linkOf(pooled)
		return s, err
	})
}

// linkOf is the link a pooled column records (NULL: none).
func linkOf(pooled *bool) router.Link {
	switch {
	case pooled == nil:
		return router.LinkUnrecorded
	case *pooled:
		return router.LinkPooled
	}
	return router.LinkDirect
}

// pooledOf is the pooled column that records l (NULL: none).
func pooledOf(l router.Link) *bool {
	var b bool
	switch l {
	case router.LinkDirect:
	case router.LinkPooled:
		b = true
	default:
		return nil
	}
	return &b
}

// inferLink is what the DSNs of a server say of how app reaches it: the
// admin DSN must reach the server itself, so an app DSN that is the
// admin DSN, or names the same host, port and database with another
// user or password (a login of the application role), reaches it
// directly; one that names another endpoint counts as a pooler's.
// LinkUnrecorded when either does not parse.
func inferLink(app, admin string) router.Link {
	if admin == "" || admin == app {
		return router.LinkDirect
	}
	a, b := endpoint(app), endpoint(admin)
	switch {
	case a == "" || b == "":
		return router.LinkUnrecorded
	case a == b:
		return router.LinkDirect
	}
	return router.LinkPooled
}

// endpoint is the host, port and database a DSN names, "" when it does
// not parse.
func endpoint(dsn string) string {
	c, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%s\x00%d\x00%s", c.Host, c.Port, c.Database)
}

// migrationSteps are the steps of catalog versions that SQL alone cannot
// take, run in the version's transaction after its file.
var migrationSteps = map[int]func(ctx context.Context, tx pgx.Tx) error{15: recordAppRoleLinks}

// recordAppRoleLinks is version 15's step: a server whose app DSN names
// its admin DSN's host, port and database with another user (a login of
// the application role) was taken to be behind a pooler; it is recorded
// direct, in a new map version, so that routers read it. Every other
// server keeps no record and what it was.
func recordAppRoleLinks(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, `SELECT name, dsn, admin_dsn FROM shardkit.servers WHERE admin_dsn IS NOT NULL AND pooled IS NULL`)
	if err != nil {
		return err
	}
	type row struct{ name, app, admin string }
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.name, &x.app, &x.admin)
		return x, err
	})
	if err != nil {
		return err
	}
	var direct []string
	for _, x := range all {
		if inferLink(x.app, x.admin) == router.LinkDirect {
			direct = append(direct, x.name)
		}
	}
	if len(direct) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, sqlMapBump); err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `UPDATE shardkit.servers SET pooled = false WHERE name = ANY($1)`, direct)
	return err
}

// hasPooled reports whether the catalog has the pooled column (version 15).
func (t *Tx) hasPooled(ctx context.Context) (bool, error) {
	var ok bool
	err := t.tx.QueryRow(ctx, sqlHasPooled).Scan(&ok)
	return ok, err
}

// Servers lists the registered servers (names, DSNs, replicas, states),
// by name.
func (t *Tx) Servers(ctx context.Context) ([]router.Server, error) {
	return readServers(ctx, t.tx, serverQueries{servers: sqlServersAll, primaries: sqlServerPrimaries, admin: true})
}

// AddServer registers a server (name, DSN, admin DSN, replicas), active.
// An AdminDSN that is empty or equal to DSN records one DSN for both.
// s.Link records how DSN reaches the server; LinkUnrecorded records what
// the DSNs say: direct when DSN is the admin DSN or names the same host,
// port and database (another user, such as a login of the application
// role), else pooled. A catalog before version 15 records nothing.
func (t *Tx) AddServer(ctx context.Context, s router.Server) error {
	replicas := s.Replicas
	if replicas == nil {
		replicas = []string{}
	}
	ok, err := t.hasPooled(ctx)
	if err != nil {
		return err
	}
	if !ok {
		_, err = t.tx.Exec(ctx, sqlServerAdd, s.Name, s.DSN, s.AdminDSN, replicas)
		return err
	}
	link := s.Link
	if link == router.LinkUnrecorded {
		link = inferLink(s.DSN, s.AdminDSN)
	}
	_, err = t.tx.Exec(ctx, sqlServerAddPooled, s.Name, s.DSN, s.AdminDSN, replicas, pooledOf(link))
	return err
}

// SetServerLink records how the application DSN of a registered server
// reaches it, directly or through a pooler (router.Server.Direct), in a
// new map version; LinkUnrecorded clears the record (readers then infer
// it from the DSNs). A server the catalog lacks is
// router.ErrUnknownServer; a catalog before version 15 is
// ErrNoServerLink.
func (t *Tx) SetServerLink(ctx context.Context, name string, link router.Link) error {
	if err := t.BumpMapVersion(ctx); err != nil {
		if isUndefinedTable(err) {
			return fmt.Errorf("shardkit: %w", ErrNoCatalog)
		}
		return err
	}
	ok, err := t.hasPooled(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("shardkit: server %q: %w", name, ErrNoServerLink)
	}
	tag, err := t.tx.Exec(ctx, sqlServerSetLink, name, pooledOf(link))
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("shardkit: %w: %q; register it first (migrations.Provision)", router.ErrUnknownServer, name)
	}
	return nil
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
// A change that moves either DSN to another host, port or database
// records anew how the app DSN reaches the server, as AddServer does; one
// of users or passwords only keeps the record (SetServerLink sets it).
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
	if _, err = t.tx.Exec(ctx, sqlServerSetDSN, name, app, admin); err != nil {
		return err
	}
	oldAdmin := curAdmin
	if oldAdmin == "" {
		oldAdmin = curApp
	}
	if endpoint(app) == endpoint(curApp) && endpoint(admin) == endpoint(oldAdmin) {
		return nil
	}
	ok, err := t.hasPooled(ctx)
	if err != nil || !ok {
		return err
	}
	_, err = t.tx.Exec(ctx, sqlServerSetLink, name, pooledOf(inferLink(app, admin)))
	return err
}
