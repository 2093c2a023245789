package router

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNotPrimary reports a host that is not the primary the catalog records
// for its server: an old primary that came back after its standby was
// promoted, a standby promoted but not yet recorded, or another cluster.
// No statement runs there. It arrives inside the error of the connection
// attempt (with a multi-host DSN the next host is tried first), as a
// *NotPrimaryError.
var ErrNotPrimary = errors.New("host is not the server's recorded primary")

// Primary identifies the cluster that is a server's primary: its system
// identifier (pg_control_system(), the same on a primary and every
// standby made from it by a base backup) and its timeline (which a
// standby's promotion increments, so a promoted standby and the old
// primary it replaced differ). The zero value records nothing and checks
// nothing (a server registered before primaries were recorded).
type Primary struct {
	SystemID string `json:"system_id,omitempty"` // pg_control_system().system_identifier, in decimal
	Timeline int    `json:"timeline,omitempty"`  // the timeline of the primary's WAL
}

// Recorded reports whether p names a primary (the zero value does not).
func (p Primary) Recorded() bool { return p.SystemID != "" }

func (p Primary) String() string {
	if !p.Recorded() {
		return "none recorded"
	}
	return fmt.Sprintf("system %s timeline %d", p.SystemID, p.Timeline)
}

// NotPrimaryError is ErrNotPrimary with the server, what the host is and
// what the catalog records.
type NotPrimaryError struct {
	Server   string
	Host     string  // the host:port, when known
	Got      Primary // the host's identity; Timeline 0: it is a standby
	Recorded Primary
}

func (e *NotPrimaryError) Error() string {
	what := "the host"
	if e.Host != "" {
		what = "host " + e.Host
	}
	var why string
	switch {
	case e.Got.SystemID != e.Recorded.SystemID:
		why = fmt.Sprintf("%s is another cluster (system %s, the catalog records %s): register the server's DSN anew if it moved to a new cluster", what, e.Got.SystemID, e.Recorded)
	case e.Got.Timeline == 0:
		why = what + " is a standby"
	case e.Got.Timeline < e.Recorded.Timeline:
		why = fmt.Sprintf("%s is an old primary (timeline %d, the catalog records %d): it is fenced; rebuild it as a standby of the new primary (pg_rewind) or retire it", what, e.Got.Timeline, e.Recorded.Timeline)
	default:
		why = fmt.Sprintf("%s was promoted (timeline %d) and is not yet recorded (the catalog records %d): record it with `shardctl server promoted %s` (an HA tool's promotion hook)", what, e.Got.Timeline, e.Recorded.Timeline, e.Server)
	}
	return fmt.Sprintf("shardkit: server %s: %s", e.Server, why)
}

// Unwrap returns ErrNotPrimary.
func (e *NotPrimaryError) Unwrap() error { return ErrNotPrimary }

// Accepts reports whether got is the primary p records: the same system
// and the same timeline. Only equality is accepted. A newer timeline is
// not taken on trust, since two standbys promoted from one primary
// reach the same new timeline number and an operator's record is what
// tells the one in service apart; an older timeline is an old primary.
// Nothing recorded accepts every host.
func (p Primary) Accepts(got Primary) bool {
	return !p.Recorded() || got == p
}

// sqlPrimary reads a host's identity in one round trip: its system
// identifier and, unless it is a standby (timeline 0), the timeline it
// writes WAL on, from the name of its current WAL file (the first eight
// hex digits): unlike pg_control_checkpoint(), which shows the timeline
// of the last checkpoint, it is the new one from the moment a promotion
// ends.
const sqlPrimary = `SELECT (SELECT system_identifier FROM pg_control_system())::text,
	CASE WHEN pg_is_in_recovery() THEN 0
	ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END`

// ReadPrimary reads the identity of the host conn is connected to.
func ReadPrimary(ctx context.Context, conn *pgconn.PgConn) (Primary, error) {
	res, err := conn.Exec(ctx, sqlPrimary).ReadAll()
	if err != nil {
		return Primary{}, fmt.Errorf("read the host's system identifier and timeline: %w", err)
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 2 {
		return Primary{}, errors.New("read the host's system identifier and timeline: no row")
	}
	row := res[0].Rows[0]
	tl, err := strconv.Atoi(string(row[1]))
	if err != nil {
		return Primary{}, fmt.Errorf("read the host's timeline: %w", err)
	}
	return Primary{SystemID: string(row[0]), Timeline: tl}, nil
}

// Fence makes every connection of cfg check, once the session has started
// and before any statement of the caller, that its host is rec, the
// primary the catalog records for the server: the same system identifier
// and timeline. A host that is not is refused with a *NotPrimaryError, and
// a DSN naming several hosts goes on to the next, as it does for
// target_session_attrs (whose check runs first). Nothing recorded checks
// nothing.
//
// An old primary restarted after its standby was promoted is on an older
// timeline than the record, so no connection made with the record uses
// it. One made with an older record expects the old primary; it is
// covered by what cfg's connections have seen: once any host of the
// server answered on a newer timeline of the same system, cfg refuses the
// recorded one too, since a newer primary exists.
func Fence(cfg *pgconn.Config, server string, rec Primary) {
	if !rec.Recorded() {
		return
	}
	prev := cfg.ValidateConnect
	var newest atomic.Int64 // the newest timeline of rec's system a host answered on
	cfg.ValidateConnect = func(ctx context.Context, conn *pgconn.PgConn) error {
		if prev != nil {
			if err := prev(ctx, conn); err != nil {
				return err
			}
		}
		got, err := ReadPrimary(ctx, conn)
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
		return &NotPrimaryError{Server: server, Host: hostOf(conn), Got: got, Recorded: rec}
	}
}

// hostOf is the address conn is connected to.
func hostOf(conn *pgconn.PgConn) string {
	if c := conn.Conn(); c != nil {
		if a := c.RemoteAddr(); a != nil {
			return a.String()
		}
	}
	return ""
}
