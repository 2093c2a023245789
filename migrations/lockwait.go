package migrations

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrLockWait reports a schema whose locks could not be taken within
// MigrateOptions.MaxLockWait: a transaction kept holding one of its
// tables. The *LockWaitError it comes in names the schema and the
// blocker. Every other schema was migrated and recorded; end the blocker
// (or wait for it) and run migrate again: it does only what is left.
var ErrLockWait = errors.New("gave up waiting for a lock")

// Blocker is a session that held a lock a migration waited for.
type Blocker struct {
	PID         int           `json:"pid"`
	Application string        `json:"application,omitempty"`
	User        string        `json:"user,omitempty"`
	State       string        `json:"state"`    // pg_stat_activity.state, e.g. "idle in transaction"
	XactAge     time.Duration `json:"xact_age"` // how long its transaction has been open
	Query       string        `json:"query"`    // its last statement, shortened
	Lock        string        `json:"lock"`     // what it holds: "AccessShareLock on shard_0007.photos", or "an older transaction"
}

func (b Blocker) String() string {
	s := fmt.Sprintf("pid %d (%s", b.PID, b.State)
	if b.XactAge > 0 {
		s += fmt.Sprintf(", transaction open %s", b.XactAge.Round(time.Second))
	}
	if b.Application != "" {
		s += ", application " + b.Application
	}
	s += ")"
	if b.Lock != "" {
		s += " holding " + b.Lock
	}
	if b.Query != "" {
		s += fmt.Sprintf(", last statement %q", b.Query)
	}
	return s
}

// LockWait describes one lock timeout of a migration: the schema, what
// it was running, and who held the lock.
type LockWait struct {
	Server   string        `json:"server"`
	Shard    int           `json:"shard"`
	Schema   string        `json:"schema"`
	File     string        `json:"file"`     // the per-shard file that waited
	Attempts int           `json:"attempts"` // lock timeouts so far on this schema
	Waited   time.Duration `json:"waited"`   // time spent in those attempts
	Blockers []Blocker     `json:"blockers"` // may be empty: the blocker ended before it could be read
}

func (w LockWait) blockers() string {
	if len(w.Blockers) == 0 {
		return "a transaction that ended before it could be named"
	}
	parts := make([]string, len(w.Blockers))
	for i, b := range w.Blockers {
		parts[i] = b.String()
	}
	return strings.Join(parts, "; ")
}

// LockWaitError is a schema a migration gave up on (ErrLockWait).
type LockWaitError struct {
	LockWait
	Bound time.Duration // MigrateOptions.MaxLockWait
}

func (e *LockWaitError) Error() string {
	pids := make([]string, len(e.Blockers))
	for i, b := range e.Blockers {
		pids[i] = fmt.Sprint(b.PID)
	}
	hint := "end the blocking transaction"
	if len(pids) > 0 {
		hint = fmt.Sprintf("end the blocking transaction (on server %q: SELECT pg_terminate_backend(%s))", e.Server, pids[0])
	}
	return fmt.Sprintf("shardkit: %s on server %q, file %s: %v after %d lock timeouts over %s (bound %s), blocked by %s; "+
		"every other schema was migrated and recorded: %s or wait for it to finish, then run migrate again to do what is left",
		e.Schema, e.Server, e.File, ErrLockWait, e.Attempts, e.Waited.Round(time.Millisecond), e.Bound, e.blockers(), hint)
}

// Unwrap returns ErrLockWait.
func (e *LockWaitError) Unwrap() error { return ErrLockWait }

// sqlSchemaBlockers lists the sessions whose transactions, open since
// before an attempt began, hold a lock on a relation of the schema: every
// such lock conflicts with the ACCESS EXCLUSIVE lock an ALTER TABLE takes
// (and, for the SHARE lock of CREATE INDEX, the writers' locks), so these
// are what pg_blocking_pids named while the attempt waited. Sessions of
// the same query began after the attempt and are only queued behind it.
const sqlSchemaBlockers = `SELECT DISTINCT ON (a.pid) a.pid, coalesce(a.application_name, ''), coalesce(a.usename::text, ''),
       coalesce(a.state, ''), extract(epoch FROM now() - a.xact_start)::float8,
       left(coalesce(a.query, ''), 120), l.mode || ' on ' || n.nspname || '.' || c.relname
FROM pg_catalog.pg_locks l
JOIN pg_catalog.pg_class c ON c.oid = l.relation
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
WHERE l.granted AND n.nspname = $1 AND l.pid <> pg_backend_pid() AND a.xact_start < $2
ORDER BY a.pid, a.xact_start
LIMIT 5`

// sqlOldTransactions lists the transactions of the database open since
// before an attempt began: what CREATE INDEX CONCURRENTLY waits for.
const sqlOldTransactions = `SELECT a.pid, coalesce(a.application_name, ''), coalesce(a.usename::text, ''),
       coalesce(a.state, ''), extract(epoch FROM now() - a.xact_start)::float8,
       left(coalesce(a.query, ''), 120), 'an older transaction'
FROM pg_catalog.pg_stat_activity a
WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.xact_start < $1
  AND a.backend_type = 'client backend'
ORDER BY a.xact_start
LIMIT 5`

// readBlockers names the sessions that held what an attempt begun at
// since waited for on schema: the lock holders on its relations, else
// (for a concurrent build, which waits for old transactions) the oldest
// transactions of the database.
func readBlockers(ctx context.Context, conn *pgx.Conn, schema string, since time.Time) []Blocker {
	scan := func(sql string, args ...any) []Blocker {
		rows, err := conn.Query(ctx, sql, args...)
		if err != nil {
			return nil
		}
		var out []Blocker
		var b Blocker
		var age float64
		_, _ = pgx.ForEachRow(rows, []any{&b.PID, &b.Application, &b.User, &b.State, &age, &b.Query, &b.Lock}, func() error {
			b.XactAge = time.Duration(age * float64(time.Second))
			b.Query = strings.Join(strings.Fields(b.Query), " ")
			out = append(out, b)
			return nil
		})
		return out
	}
	if out := scan(sqlSchemaBlockers, schema, since); len(out) > 0 {
		return out
	}
	return scan(sqlOldTransactions, since)
}

// backoff is the pause before attempt n+1 (n ≥ 1) of a schema whose lock
// timed out: doubling from base up to ceiling, then drawn from its upper
// half, so that workers retrying the same hot table do not arrive together.
func backoff(n int, base, ceiling time.Duration) time.Duration {
	d := base
	for i := 1; i < n && d < ceiling; i++ {
		d *= 2
	}
	d = min(d, ceiling)
	return d/2 + rand.N(d/2+1)
}
