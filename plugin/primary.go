package plugin

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/router"
)

// fencePrimary makes every connection of cfg check, once the session has
// started and before any statement of the caller, that its host is rec,
// the primary the catalog records for the server: the same system
// identifier and timeline. A host that is not is refused with a
// *router.NotPrimaryError, and a DSN naming several hosts goes on to the
// next, as it does for target_session_attrs (whose check runs first).
//
// An old primary restarted after its standby was promoted is on an older
// timeline than the record, so no router whose map has the record uses
// it. A router whose map predates the record expects the old primary; it
// is covered by what its own connections have seen: once any host of the
// server answered on a newer timeline of the same system, this pool
// refuses the recorded one too, since a newer primary exists.
func fencePrimary(cfg *pgconn.Config, server string, rec router.Primary) {
	prev := cfg.ValidateConnect
	var newest atomic.Int64 // the newest timeline of rec's system a host answered on
	cfg.ValidateConnect = func(ctx context.Context, conn *pgconn.PgConn) error {
		if prev != nil {
			if err := prev(ctx, conn); err != nil {
				return err
			}
		}
		got, err := router.ReadPrimary(ctx, conn)
		if err != nil {
			return err
		}
		if got.SystemID == rec.SystemID {
			for {
				n := newest.Load()
				if int64(got.Timeline) <= n || newest.CompareAndSwap(n, int64(got.Timeline)) {
					break
				}
			}
		}
		if rec.Accepts(got) && int64(got.Timeline) >= newest.Load() {
			return nil
		}
		return &router.NotPrimaryError{Server: server, Host: hostOf(conn), Got: got, Recorded: rec}
	}
}

// hostOf is the host:port conn is connected to.
func hostOf(conn *pgconn.PgConn) string {
	if a := conn.Conn().RemoteAddr(); a != nil {
		return a.String()
	}
	return ""
}
