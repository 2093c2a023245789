package shardschema

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/router"
)

// Statements of one schema's migration.
const (
	sqlLockTimeoutLocal   = `SELECT set_config('lock_timeout', $1, true)`
	sqlLockTimeoutSession = `SELECT set_config('lock_timeout', $1, false)`
	sqlSessionSettings    = `SELECT set_config('lock_timeout', $1, false), set_config('search_path', $2, false)`
	sqlSessionReset       = `RESET lock_timeout; RESET search_path`
	sqlShardLock          = `SELECT pg_advisory_lock($1, $2)`
	sqlShardUnlock        = `SELECT pg_advisory_unlock($1, $2)`
	sqlIndexValid         = `SELECT i.indisvalid FROM pg_catalog.pg_index i
JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2`
)

// timeoutSetting renders a lock_timeout; 0 is the server's default.
func timeoutSetting(d time.Duration) string {
	return fmt.Sprintf("%dms", d.Milliseconds())
}

// Timeouts bound one schema's lock waits; 0 leaves the server's setting.
type Timeouts struct {
	// Lock bounds every wait but those of concurrent index builds.
	Lock time.Duration
	// Build bounds the waits of CREATE and DROP INDEX CONCURRENTLY: they
	// wait for older transactions holding SHARE UPDATE EXCLUSIVE, which
	// no read or write waits for, so they may wait longer than the
	// requests behind an ALTER could; a build cut short is rebuilt from
	// nothing.
	Build time.Duration
}

// ApplyOne brings one shard's schema up to versions on conn: the steps that
// run in a transaction together in one (the schema's own: a schema never
// holds its locks while another's are awaited), each step marked to run
// outside one on the session (runNoTx). to bounds the lock waits; a wait
// past it is returned as the driver's error (55P03, isLockTimeout) with
// nothing of the current step recorded. It returns the
// name of the file under way when it stopped.
func ApplyOne(ctx context.Context, conn *pgx.Conn, layout idgen.Layout, shard int, versions []Version, mode Mode,
	to Timeouts) (string, error) {
	for {
		var running string
		var next *step
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if to.Lock > 0 {
				if _, err := tx.Exec(ctx, sqlLockTimeoutLocal, timeoutSetting(to.Lock)); err != nil {
					return err
				}
			}
			if _, err := tx.Exec(ctx, sqlShardLockBatch, migrateLockKey, []int32{int32(shard)}); err != nil {
				return Classify(err, "")
			}
			applied, err := readApplied(ctx, tx, []int{shard})
			if err != nil {
				return err
			}
			steps, err := plan(layout, shard, applied[shard], versions, mode)
			if err != nil {
				return err
			}
			var rec records
			more, err := execSteps(ctx, tx, shard, steps, &rec, &running, false)
			if err != nil {
				return err
			}
			if more {
				next = &steps[len(rec.schema)]
			}
			return rec.write(ctx, tx)
		})
		if err != nil {
			return running, err
		}
		if next == nil {
			return "", nil
		}
		if err := runNoTx(ctx, conn, shard, *next, to); err != nil {
			return next.name, err
		}
	}
}

// runNoTx runs a step marked NoTransactionMarker on one schema, statement
// by statement on the session, under the schema's session advisory lock,
// and records it. A CREATE INDEX CONCURRENTLY whose index is already valid
// is skipped; one whose index an interrupted build left invalid drops it
// first.
func runNoTx(ctx context.Context, conn *pgx.Conn, shard int, st step, to Timeouts) (err error) {
	schema := router.SchemaName(shard)
	var dflt string
	if err := conn.QueryRow(ctx, `SELECT current_setting('lock_timeout')`).Scan(&dflt); err != nil {
		return err
	}
	setting := func(d time.Duration) string {
		if d <= 0 {
			return dflt
		}
		return timeoutSetting(d)
	}
	if _, err := conn.Exec(ctx, sqlSessionSettings, setting(to.Lock), pgx.Identifier{schema}.Sanitize()); err != nil {
		return err
	}
	defer func() {
		// On a broken connection these fail too; the caller drops it.
		_, _ = conn.Exec(context.Background(), sqlSessionReset)
	}()
	if _, err := conn.Exec(ctx, sqlShardLock, migrateLockKey, int32(shard)); err != nil {
		return Classify(err, "")
	}
	defer func() { _, _ = conn.Exec(context.Background(), sqlShardUnlock, migrateLockKey, int32(shard)) }()
	applied, err := readApplied(ctx, conn, []int{shard})
	if err != nil {
		return err
	}
	if applied[shard][st.stepKey] {
		return nil // a concurrent run did it
	}
	for _, stmt := range splitStatements(st.sql) {
		name, build := concurrentIndex(stmt)
		if build {
			if _, err := conn.Exec(ctx, sqlLockTimeoutSession, setting(to.Build)); err != nil {
				return err
			}
		}
		if build && name != "" {
			var valid bool
			err := conn.QueryRow(ctx, sqlIndexValid, schema, name).Scan(&valid)
			switch {
			case err == nil && valid:
				continue
			case err == nil:
				drop := "DROP INDEX CONCURRENTLY IF EXISTS " + pgx.Identifier{schema, name}.Sanitize()
				if _, err := conn.Exec(ctx, drop); err != nil {
					return wrapStep(shard, st, err)
				}
			case !errors.Is(err, pgx.ErrNoRows):
				return err
			}
		}
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return wrapStep(shard, st, err)
		}
		if build {
			if _, err := conn.Exec(ctx, sqlLockTimeoutSession, setting(to.Lock)); err != nil {
				return err
			}
		}
	}
	var rec records
	rec.add(schema, st)
	return rec.write(ctx, conn)
}

func wrapStep(shard int, st step, err error) error {
	if IsLockTimeout(err) {
		return err
	}
	return &ShardError{Shard: shard, File: st.name, Err: Classify(err, "")}
}

// withSession runs fn on one session of db: the connection itself, or one
// acquired from a pool.
func withSession(ctx context.Context, db DB, fn func(*pgx.Conn) error) error {
	switch d := db.(type) {
	case *pgx.Conn:
		return fn(d)
	case *pgxpool.Conn:
		return fn(d.Conn())
	case *pgxpool.Pool:
		c, err := d.Acquire(ctx)
		if err != nil {
			return err
		}
		defer c.Release()
		return fn(c.Conn())
	default:
		return fmt.Errorf("shardkit: %w: a file marked %q needs a session; pass a *pgx.Conn, *pgxpool.Conn or *pgxpool.Pool, not a %T",
			ErrBadMigrationFile, NoTransactionMarker, db)
	}
}
