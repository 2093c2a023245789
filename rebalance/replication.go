package rebalance

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/pgdsn"
)

// Statements on the servers, one constant each. Identifiers are quoted by
// ident or by the server's own format(%I, %L) — CREATE SUBSCRIPTION cannot
// take bind parameters and cannot run inside a DO block.
const (
	sqlPublicationExists = `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`
	sqlSubscription      = `SELECT s.subenabled, coalesce(s.subslotname, '') FROM pg_subscription s
		WHERE s.subname = $1 AND s.subdbid = (SELECT oid FROM pg_database WHERE datname = current_database())`
	// Both directions subscribe to a slot made beforehand, named like the
	// subscription, and copy nothing: the forward slot exported the
	// snapshot the copy read, the reverse one was made before the cutover.
	sqlFormatSubscription = `SELECT format('CREATE SUBSCRIPTION %I CONNECTION %L PUBLICATION %I WITH (copy_data = false, create_slot = false, slot_name = %L, synchronous_commit = on)', $1::text, $2::text, $3::text, $1::text)`
	// sqlFormatRepoint takes the same arguments; the third is unused.
	sqlFormatRepoint = `SELECT format('ALTER SUBSCRIPTION %I CONNECTION %L', $1::text, $2::text, $3::text)`
	// Slots are looked up in the server's own database only: slot names
	// are per cluster, and a mover must never see, wait on, terminate the
	// reader of, or drop a slot of another database on the same cluster.
	sqlSlotExists  = `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE database = current_database() AND slot_name = $1)`
	sqlSlotReached = `SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE database = current_database() AND slot_name = $1`
	sqlCreateSlot  = `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`
	// sqlCreateSlotFailover marks the slot for failover (PostgreSQL 17+:
	// arguments temporary, twophase, failover).
	sqlCreateSlotFailover = `SELECT pg_create_logical_replication_slot($1, 'pgoutput', false, false, true)`
	sqlServerVersion      = `SELECT current_setting('server_version')`
	sqlDropSlot           = `SELECT pg_drop_replication_slot($1)`
	sqlSlotActivePID      = `SELECT active_pid FROM pg_replication_slots WHERE database = current_database() AND slot_name = $1 AND active`
	sqlTerminate          = `SELECT pg_terminate_backend($1)`
	sqlAdvanceSlot        = `SELECT pg_replication_slot_advance($1, $2::pg_lsn)
		FROM pg_replication_slots WHERE database = current_database() AND slot_name = $1 AND confirmed_flush_lsn < $2::pg_lsn`
)

// createPublication publishes every table of schema, unless the
// publication exists already.
func createPublication(ctx context.Context, p *pgxpool.Pool, name, schema string) error {
	var exists bool
	if err := p.QueryRow(ctx, sqlPublicationExists, name).Scan(&exists); err != nil {
		return fmt.Errorf("look up publication %s: %w", name, err)
	}
	if exists {
		return nil
	}
	if _, err := p.Exec(ctx, "CREATE PUBLICATION "+ident(name)+" FOR TABLES IN SCHEMA "+ident(schema)); err != nil {
		return fmt.Errorf("create publication %s: %w", name, err)
	}
	return nil
}

// dropLockWait bounds each try of dropPublication's lock, as BarrierWait
// (by default) bounds the barrier's: a running write holds it back at most
// that long, and the writes queued behind it with it.
const dropLockWait = 40 * time.Millisecond

// dropPublication drops publication name, which publishes the tables of
// schema, while those tables are locked against writes (SHARE: reads go
// on). PostgreSQL reads a table's publications from the catalog for each
// UPDATE and DELETE, and a DROP PUBLICATION of a schema's publication
// locks none of its tables: a write that read the schema's publications
// just before the drop committed and looks the publication up just after
// fails with "cache lookup failed for publication" (XX000)
// (TestDropPublicationUnderWrites: 29 of 7211 writes). With the lock
// held by the drop, every write reads the catalog wholly before it or
// after it. A try whose lock waits more than dropLockWait for running
// writes gives up and tries again, until ctx ends.
func dropPublication(ctx context.Context, p *pgxpool.Pool, name, schema string) error {
	var exists bool
	if err := p.QueryRow(ctx, sqlPublicationExists, name).Scan(&exists); err != nil {
		return fmt.Errorf("look up publication %s: %w", name, err)
	}
	if !exists {
		return nil
	}
	tables, err := listTables(ctx, p, schema)
	if err != nil {
		return fmt.Errorf("drop publication %s: %w", name, err)
	}
	sql := "DROP PUBLICATION IF EXISTS " + ident(name)
	if len(tables) > 0 {
		quoted := make([]string, len(tables))
		for i, t := range tables {
			quoted[i] = ident(schema, t)
		}
		sql = fmt.Sprintf("SET LOCAL lock_timeout = '%dms';\nLOCK TABLE %s IN SHARE MODE;\n%s",
			dropLockWait.Milliseconds(), strings.Join(quoted, ", "), sql)
	}
	for {
		_, err := p.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol)
		var pe *pgconn.PgError
		if err == nil {
			return nil
		}
		if !errors.As(err, &pe) || pe.Code != "55P03" {
			return fmt.Errorf("drop publication %s: %w", name, err)
		}
		if err := sleep(ctx, dropLockWait); err != nil {
			return fmt.Errorf("drop publication %s: running writes kept its tables locked: %w", name, err)
		}
	}
}

func subscriptionExists(ctx context.Context, p *pgxpool.Pool, name string) (bool, error) {
	var enabled bool
	var slot string
	err := p.QueryRow(ctx, sqlSubscription, name).Scan(&enabled, &slot)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up subscription %s: %w", name, err)
	}
	return true, nil
}

// createSubscription subscribes to a publication through the existing
// slot of the same name, without copying: the subscriber applies what the
// slot holds from its consistent point (or its confirmed position) on. A
// subscription that exists already is left alone.
//
// The apply worker commits with synchronous_commit on: it reports a
// position to the source only once that position is flushed on the target,
// and the cutover waits for that report; asynchronous commit would delay it
// by up to wal_writer_delay plus a feedback cycle (measured ~250 ms).
//
// The subscription names the publisher's host at (nil: every host of
// dsn): the host where the mover made the slot.
func createSubscription(ctx context.Context, p *pgxpool.Pool, name, dsn string, at *pgdsn.HostPort, pub string) error {
	if ok, err := subscriptionExists(ctx, p, name); err != nil || ok {
		return err
	}
	return subscriptionDDL(ctx, p, sqlFormatSubscription, name, dsn, at, pub)
}

// repointSubscription points an existing subscription at the publisher's
// host at (nil: every host of dsn), as createSubscription would name it
// now: after a failover of the publisher its slot is on the promoted
// host (a failover slot, PostgreSQL 17+), and the apply worker, restarted
// by the change, streams from there. Nothing happens when the
// subscription does not exist.
func repointSubscription(ctx context.Context, p *pgxpool.Pool, name, dsn string, at *pgdsn.HostPort) error {
	if ok, err := subscriptionExists(ctx, p, name); err != nil || !ok {
		return err
	}
	return subscriptionDDL(ctx, p, sqlFormatRepoint, name, dsn, at, "")
}

// subscriptionDDL runs the statement format builds (sqlFormatSubscription,
// sqlFormatRepoint) from the subscription's name, the publisher's
// connection string and pub, with the statement kept out of the log.
func subscriptionDDL(ctx context.Context, p *pgxpool.Pool, format, name, dsn string, at *pgdsn.HostPort, pub string) error {
	// The target server connects with libpq, which refuses the pgx
	// settings a catalog DSN may carry (statement_cache_capacity, …).
	conninfo, err := conninfo(dsn, at)
	if err != nil {
		return fmt.Errorf("subscription %s: the publisher's DSN: %w", name, err)
	}
	return pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		if err := quietStatements(ctx, tx); err != nil {
			return fmt.Errorf("create subscription %s: %w", name, err)
		}
		var stmt string
		if err := tx.QueryRow(ctx, format, name, conninfo, pub).Scan(&stmt); err != nil {
			return fmt.Errorf("build the statement of subscription %s: %w", name, err)
		}
		// Simple protocol: the text is sent once and never kept as a
		// prepared statement of the session.
		if _, err := tx.Exec(ctx, stmt, pgx.QueryExecModeSimpleProtocol); err != nil {
			if format == sqlFormatRepoint {
				return fmt.Errorf("repoint subscription %s: %w", name, err)
			}
			return fmt.Errorf("create subscription %s: %w", name, err)
		}
		return nil
	})
}

// sqlQuietStatements keeps the statements after it in its transaction out
// of the server's log, whatever the server's settings: none is logged as
// received (log_statement), on error (log_min_error_statement), for its
// duration (log_min_duration_statement) or with its parameters. A
// subscription's connection string carries the source's password, and
// CREATE SUBSCRIPTION takes it only as literal text.
const sqlQuietStatements = `SET LOCAL log_statement = 'none'; SET LOCAL log_min_error_statement = 'panic'; SET LOCAL log_min_duration_statement = -1`

// quietStatements runs sqlQuietStatements in tx. The settings need a
// superuser, or SET privilege on each (GRANT SET ON PARAMETER); without it
// the move stops with ErrStatementLogging rather than log a password.
func quietStatements(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, sqlQuietStatements); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42501" { // insufficient_privilege
			return ofKind(ErrStatementLogging, fmt.Errorf("%w: %w", ErrStatementLogging, err))
		}
		return err
	}
	return nil
}

// dropForward removes the move's forward replication: the subscription on
// the target, its slot and the publication on the source.
func (mc *moveCtx) dropForward(ctx context.Context) error {
	if err := dropSubscription(ctx, mc.tgt, mc.n.fwd, mc.src); err != nil {
		return err
	}
	return dropPublication(ctx, mc.src, mc.n.fwd, mc.schema)
}

// dropSubscription removes a subscription on sub and its slot on pub,
// without relying on the subscription reaching the publisher: disable,
// detach the slot, drop, then drop the slot directly.
func dropSubscription(ctx context.Context, sub *pgxpool.Pool, name string, pub *pgxpool.Pool) error {
	exists, err := subscriptionExists(ctx, sub, name)
	if err != nil {
		return err
	}
	if exists {
		for _, stmt := range []string{
			"ALTER SUBSCRIPTION " + ident(name) + " DISABLE",
			"ALTER SUBSCRIPTION " + ident(name) + " SET (slot_name = NONE)",
			"DROP SUBSCRIPTION IF EXISTS " + ident(name),
		} {
			if _, err := sub.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("drop subscription %s: %w", name, err)
			}
		}
	}
	return dropSlot(ctx, pub, name)
}

// dropSlot drops a replication slot if it exists. A slot still held by a
// walsender of a disabled subscription is released by ending that walsender.
func dropSlot(ctx context.Context, p *pgxpool.Pool, name string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var exists bool
		if err := p.QueryRow(ctx, sqlSlotExists, name).Scan(&exists); err != nil {
			return fmt.Errorf("look up slot %s: %w", name, err)
		}
		if !exists {
			return nil
		}
		var pid int32
		err := p.QueryRow(ctx, sqlSlotActivePID, name).Scan(&pid)
		if err == nil {
			_, _ = p.Exec(ctx, sqlTerminate, pid)
		} else if !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("look up slot %s: %w", name, err)
		}
		_, err = p.Exec(ctx, sqlDropSlot, name)
		var pe *pgconn.PgError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &pe) && pe.Code == "42704": // undefined_object: gone meanwhile
			return nil
		case errors.As(err, &pe) && pe.Code == "55006" && time.Now().Before(deadline): // object_in_use
			if err := sleep(ctx, 50*time.Millisecond); err != nil {
				return err
			}
		default:
			return fmt.Errorf("drop slot %s: %w", name, err)
		}
	}
}

// createSlot creates a logical slot for pgoutput unless it exists.
func createSlot(ctx context.Context, p *pgxpool.Pool, name string) error {
	var exists bool
	if err := p.QueryRow(ctx, sqlSlotExists, name).Scan(&exists); err != nil {
		return fmt.Errorf("look up slot %s: %w", name, err)
	}
	if exists {
		return nil
	}
	var version string
	if err := p.QueryRow(ctx, sqlServerVersion).Scan(&version); err != nil {
		return fmt.Errorf("create slot %s: read the server's version: %w", name, err)
	}
	create := sqlCreateSlot
	if failoverSlots(version) {
		create = sqlCreateSlotFailover
	}
	if _, err := p.Exec(ctx, create, name); err != nil {
		return fmt.Errorf("create slot %s: %w", name, err)
	}
	return nil
}

// failoverSlots reports whether a server of version (server_version, as
// "17.11" or "18.6 (Debian …)") can mark a logical slot for failover, so
// that its standbys keep a copy in step (PostgreSQL 17+). A move's slots
// are marked wherever they can be: on a server without standbys, or one
// whose standbys do not sync slots, the mark changes nothing.
func failoverSlots(version string) bool {
	major, _, _ := strings.Cut(strings.TrimSpace(version), ".")
	major, _, _ = strings.Cut(major, " ")
	n, err := strconv.Atoi(major)
	return err == nil && n >= 17
}

// advanceSlot moves a logical slot's start to lsn, so its consumer never
// receives the changes committed before (no-op if it is there already).
func advanceSlot(ctx context.Context, p *pgxpool.Pool, slot, lsn string) error {
	if lsn == "" {
		return fmt.Errorf("advance slot %s: no target LSN recorded", slot)
	}
	if _, err := p.Exec(ctx, sqlAdvanceSlot, slot, lsn); err != nil {
		return fmt.Errorf("advance slot %s to %s: %w", slot, lsn, err)
	}
	return nil
}

// waitSlotReachedOn polls, on a connection held already, until the slot's
// consumer confirmed lsn, or the timeout passes (errCutoverTimeout). It
// polls every millisecond: PostgreSQL has no event for a slot's progress,
// and this wait sits inside the fenced window.
func waitSlotReachedOn(ctx context.Context, conn *pgxpool.Conn, slot, lsn string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var ok bool
		err := conn.QueryRow(ctx, sqlSlotReached, slot, lsn).Scan(&ok)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("replication slot %s is missing", slot)
		}
		if err != nil {
			return fmt.Errorf("wait for slot %s to confirm %s: %w", slot, lsn, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			// Say where the consumer stood: not connected (its apply
			// worker is down or was never started) or connected and behind.
			var active bool
			var confirmed *string
			if err := conn.QueryRow(ctx, `SELECT active, confirmed_flush_lsn::text FROM pg_replication_slots WHERE database = current_database() AND slot_name = $1`, slot).Scan(&active, &confirmed); err == nil {
				at := "nothing"
				if confirmed != nil {
					at = *confirmed
				}
				return fmt.Errorf("%w (slot %s: consumer connected %v, confirmed %s, needed %s, waited %v)", errCutoverTimeout, slot, active, at, lsn, timeout)
			}
			return errCutoverTimeout
		}
		if err := sleep(ctx, time.Millisecond); err != nil {
			return fmt.Errorf("wait for slot %s to confirm %s: %w", slot, lsn, err)
		}
	}
}

// slotWaitSQLState is the SQLSTATE of slotWaitSQL's timeout.
const slotWaitSQLState = "SK004"

var (
	slotNameRE = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)
	lsnRE      = regexp.MustCompile(`^[0-9A-F]{1,8}/[0-9A-F]{1,8}$`)
)

// slotWaitSQL is waitSlotReachedOn as one statement run on the serving
// side: it polls the slot every millisecond until its consumer confirmed
// lsn, and fails with slotWaitSQLState, saying where the consumer stood,
// after timeout. The slot name (one shardkit made) and the position are
// checked before they are written into the statement as literals.
func slotWaitSQL(slot, lsn string, timeout time.Duration) (string, error) {
	if !slotNameRE.MatchString(slot) || !lsnRE.MatchString(lsn) {
		return "", fmt.Errorf("wait for slot %q to confirm %q: not a replication slot name and WAL position", slot, lsn)
	}
	return fmt.Sprintf(`DO $shardkit$
DECLARE
	deadline timestamptz := clock_timestamp() + make_interval(secs => %d / 1000.0);
	reached boolean;
	connected boolean;
	confirmed text;
BEGIN
	LOOP
		SELECT confirmed_flush_lsn >= %s::pg_lsn, active, confirmed_flush_lsn::text
			INTO reached, connected, confirmed FROM pg_replication_slots WHERE database = current_database() AND slot_name = %s;
		IF NOT FOUND THEN
			RAISE EXCEPTION 'replication slot %s is missing';
		END IF;
		EXIT WHEN reached;
		IF clock_timestamp() > deadline THEN
			RAISE EXCEPTION USING ERRCODE = '%s', MESSAGE = format('slot %s: consumer connected %%s, confirmed %%s, needed %s, waited %s', connected::text, coalesce(confirmed, 'nothing'));
		END IF;
		PERFORM pg_sleep(0.001);
	END LOOP;
END $shardkit$`, timeout.Milliseconds(), quoteLiteral(lsn), quoteLiteral(slot), slot, slotWaitSQLState, slot, lsn, timeout), nil
}

// sqlProbe writes a commit record, flushed at once (the servers may commit
// asynchronously, and a walsender sends only flushed WAL), and returns a
// position just before it: once a slot's consumer confirmed that position,
// it is as current as the serving side was when the probe ran. One
// simple-protocol round trip, one implicit transaction. The position is
// the insert position: with asynchronous commit, changes acknowledged
// before the probe may not be written out yet (see sqlBarrierLSN).
const sqlProbe = `SET LOCAL synchronous_commit = on; SELECT txid_current(); SELECT pg_current_wal_insert_lsn()::text`

// sqlGateProbe is sqlProbe with the write position, for the lag gate: a
// prediction of the fenced window's wait, not a guarantee of anything, and
// the write position keeps it as it was measured (on busy servers with
// asynchronous commit the insert position runs ahead of it by up to
// wal_writer_delay's worth of WAL, which the gate would count as lag).
const sqlGateProbe = `SET LOCAL synchronous_commit = on; SELECT txid_current(); SELECT pg_current_wal_lsn()::text`

// probeLSN runs a probe (sqlProbe or sqlGateProbe).
func probeLSN(ctx context.Context, conn *pgxpool.Conn, probe string) (string, error) {
	results, err := conn.Conn().PgConn().Exec(ctx, probe).ReadAll()
	if err != nil {
		return "", err
	}
	if len(results) != 3 || len(results[2].Rows) != 1 {
		return "", fmt.Errorf("probe: unexpected reply (%d results)", len(results))
	}
	return string(results[2].Rows[0][0]), nil
}

// waitCurrent waits until the slot's consumer is as current as the serving
// side is now (a probe written and confirmed), within timeout, and returns
// how long the confirmation took.
func waitCurrent(ctx context.Context, p *pgxpool.Pool, slot string, timeout time.Duration) (time.Duration, error) {
	conn, err := p.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("probe for slot %s: %w", slot, err)
	}
	defer conn.Release()
	return waitCurrentOn(ctx, conn, slot, sqlProbe, timeout)
}

// waitCurrentOn is waitCurrent on a connection held already, with probe
// (sqlProbe or sqlGateProbe).
func waitCurrentOn(ctx context.Context, conn *pgxpool.Conn, slot, probe string, timeout time.Duration) (time.Duration, error) {
	lsn, err := probeLSN(ctx, conn, probe)
	if err != nil {
		return 0, fmt.Errorf("probe for slot %s: %w", slot, err)
	}
	start := time.Now()
	err = waitSlotReachedOn(ctx, conn, slot, lsn, timeout)
	return time.Since(start), err
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error { return idgen.SystemClock().Sleep(ctx, d) }

// sqlOriginLSN is the replica's own WAL position at the end of the last
// transaction its subscription applied (pg_replication_origin_status of
// the subscription's origin, named pg_<oid>). Once the subscription
// applied the final LSN, every forward change is before it and every
// write of the application after it: reverse replication starts there.
const sqlOriginLSN = `SELECT coalesce(o.local_lsn, '0/0')::text FROM pg_subscription s
	LEFT JOIN pg_replication_origin_status o ON o.external_id = 'pg_' || s.oid
	WHERE s.subname = $1 AND s.subdbid = (SELECT oid FROM pg_database WHERE datname = current_database())`

// originLSN reads sqlOriginLSN for subscription sub.
func originLSN(ctx context.Context, p *pgxpool.Pool, sub string) (string, error) {
	var lsn string
	if err := p.QueryRow(ctx, sqlOriginLSN, sub).Scan(&lsn); err != nil {
		return "", fmt.Errorf("read where subscription %s stands: %w", sub, err)
	}
	return lsn, nil
}
