package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/router"
)

// ErrPrimaryRefused reports a primary that RecordPrimary does not record: the
// host that answers is an older primary than the recorded one, or another
// cluster. It arrives with a *router.NotPrimaryError saying which. Record a
// host only once it is the promoted primary of the server's own cluster.
var ErrPrimaryRefused = errors.New("the host is not a newer primary of the server")

// Statements on servers' primaries. They read the columns through the
// row's JSON, so that they also read a catalog not yet migrated to
// version 10 (application processes upgraded before the catalog keep
// starting, with nothing recorded).
const (
	sqlServerPrimaries = `SELECT name, coalesce(to_jsonb(s) ->> 'primary_system_id', ''),
	coalesce((to_jsonb(s) ->> 'primary_timeline')::int, 0) FROM shardkit.servers s ORDER BY name`
	// sqlServerPrimariesAppView reads them through the application's view.
	sqlServerPrimariesAppView = `SELECT name, coalesce(primary_system_id, ''), coalesce(primary_timeline, 0)
	FROM shardkit.servers_app ORDER BY name`
	sqlServerPrimaryOne = `SELECT coalesce(primary_system_id, ''), coalesce(primary_timeline, 0)
	FROM shardkit.servers WHERE name = $1 FOR UPDATE`
	sqlServerPrimarySet = `UPDATE shardkit.servers SET primary_system_id = $2, primary_timeline = $3 WHERE name = $1`
)

// withPrimaries reads the recorded primaries (sqlServerPrimaries' rows)
// into servers.
func withPrimaries(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, qs serverQueries, servers []router.Server) error {
	rows, err := q.Query(ctx, qs.primaries)
	if err != nil {
		return err
	}
	by := map[string]router.Primary{}
	var name string
	var p router.Primary
	if _, err := pgx.ForEachRow(rows, []any{&name, &p.SystemID, &p.Timeline}, func() error {
		by[name] = p
		return nil
	}); err != nil {
		return err
	}
	for i := range servers {
		servers[i].Primary = by[servers[i].Name]
	}
	return nil
}

// RecordPrimary records got as server name's primary, in a new map
// version, after a failover promoted a standby (see router.Primary):
// routers then use the promoted host and no other. It records got when
// nothing is recorded yet, when got is the recorded system on a newer
// timeline, and does nothing when got is the recorded primary. It refuses
// an older timeline (an old primary answering) and another system with
// ErrPrimaryRefused, since recording either would hand the server back
// to a host that lost writes. It reports whether it changed the record.
func (t *Tx) RecordPrimary(ctx context.Context, name string, got router.Primary) (bool, error) {
	if !got.Recorded() || got.Timeline <= 0 {
		return false, fmt.Errorf("shardkit: server %q: %w: the host is a standby (%s)", name, ErrPrimaryRefused, got)
	}
	// The map version first, as every map change takes it first.
	if err := t.BumpMapVersion(ctx); err != nil {
		if isUndefinedTable(err) {
			return false, fmt.Errorf("shardkit: %w", ErrNoCatalog)
		}
		return false, err
	}
	var cur router.Primary
	err := t.tx.QueryRow(ctx, sqlServerPrimaryOne, name).Scan(&cur.SystemID, &cur.Timeline)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, fmt.Errorf("shardkit: %w: %q; register it first (migrations.Provision)", router.ErrUnknownServer, name)
	}
	if err != nil {
		return false, err
	}
	switch {
	case cur == got:
		return false, nil
	case cur.Recorded() && (cur.SystemID != got.SystemID || got.Timeline < cur.Timeline):
		return false, fmt.Errorf("%w: %w", ErrPrimaryRefused, &router.NotPrimaryError{Server: name, Got: got, Recorded: cur})
	}
	if _, err := t.tx.Exec(ctx, sqlServerPrimarySet, name, got.SystemID, got.Timeline); err != nil {
		return false, err
	}
	return true, nil
}

// PrimaryOf connects to dsn (every host it names, as libpq does, with its
// target_session_attrs) and reads the identity of the host that answers.
func PrimaryOf(ctx context.Context, dsn string) (router.Primary, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return router.Primary{}, fmt.Errorf("shardkit: connect to the server: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return router.ReadPrimary(ctx, conn.PgConn())
}

// RecordServerPrimary reads the identity of the host that answers on
// server name's admin DSN (with a multi-host DSN and
// target_session_attrs=read-write: the writable one) and records it as
// the server's primary (Tx.RecordPrimary), in a new map version when it
// changed. An HA tool's promotion hook runs it (shardctl server promoted
// NAME) once the promoted standby takes writes; until then routers use no
// host of the server.
func (c *Catalog) RecordServerPrimary(ctx context.Context, name string) (got router.Primary, changed bool, err error) {
	var admin string
	if err := c.Update(ctx, func(ctx context.Context, tx *Tx) error {
		servers, err := tx.Servers(ctx)
		if err != nil {
			return err
		}
		for _, s := range servers {
			if s.Name == name {
				admin = s.Admin()
				return nil
			}
		}
		return fmt.Errorf("shardkit: %w: %q", router.ErrUnknownServer, name)
	}); err != nil {
		return got, false, err
	}
	if got, err = PrimaryOf(ctx, admin); err != nil {
		return got, false, fmt.Errorf("shardkit: server %q: %w", name, err)
	}
	err = c.Update(ctx, func(ctx context.Context, tx *Tx) error {
		changed, err = tx.RecordPrimary(ctx, name, got)
		return err
	})
	return got, changed, err
}
