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
	// gives no DSN at all.
	ErrBadDSN = errors.New("bad server DSN")
	// ErrDSNInUse reports a DSN that another server already has: one
	// database cannot be two servers.
	ErrDSNInUse = errors.New("the DSN is another server's")
)

// Statements on the servers. A server's admin_dsn is stored NULL when it
// is the same as its dsn, so that changing the one DSN of a server that
// has one changes both. sqlServersAll reads admin_dsn through the row's
// JSON so that it also reads a catalog not yet migrated to version 7
// (application processes upgraded before the catalog keep starting).
const (
	sqlServersAll = `SELECT name, dsn, coalesce(to_jsonb(s) ->> 'admin_dsn', ''), replicas, state FROM shardkit.servers s ORDER BY name`
	// sqlServersApp is sqlServersAll for a role that may not read the
	// admin DSNs (the application role, docs/security.md): its snapshot
	// has none.
	sqlServersApp = `SELECT name, dsn, '', replicas, state FROM shardkit.servers ORDER BY name`
	// sqlAdminReadable asks whether the role may read the admin DSNs; a
	// catalog before version 7 has none to refuse, and sqlServersAll reads
	// around the missing column.
	sqlAdminReadable = `SELECT coalesce((SELECT has_column_privilege(a.attrelid, a.attnum, 'SELECT') FROM pg_attribute a
	WHERE a.attrelid = to_regclass('shardkit.servers') AND a.attname = 'admin_dsn' AND NOT a.attisdropped), true)`
	sqlServerAdd   = `INSERT INTO shardkit.servers (name, dsn, admin_dsn, replicas) VALUES ($1, $2, nullif(nullif($3, ''), $2), $4)`
	sqlServerOne   = `SELECT dsn, coalesce(admin_dsn, '') FROM shardkit.servers WHERE name = $1 FOR UPDATE`
	sqlServerOwner = `SELECT name FROM shardkit.servers
	WHERE name <> $1 AND (dsn IN ($2, $3) OR admin_dsn IN ($2, $3)) ORDER BY name LIMIT 1`
	sqlServerSetDSN = `UPDATE shardkit.servers SET dsn = $2, admin_dsn = nullif(nullif($3, ''), $2) WHERE name = $1`
)

// serversQuery returns the statement that reads the servers as the
// catalog's role may: sqlServersAll, or sqlServersApp for a role refused
// the admin DSNs. It asks q once per Catalog.
func (c *Catalog) serversQuery(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (string, error) {
	if s := c.serversSQL.Load(); s != nil {
		return *s, nil
	}
	var ok bool
	if err := q.QueryRow(ctx, sqlAdminReadable).Scan(&ok); err != nil {
		return "", err
	}
	s := sqlServersApp
	if ok {
		s = sqlServersAll
	}
	c.serversSQL.Store(&s)
	return s, nil
}

func readServers(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, sql string) ([]router.Server, error) {
	rows, err := q.Query(ctx, sql)
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
	return readServers(ctx, t.tx, sqlServersAll)
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
