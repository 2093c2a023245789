package plugin

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/shardkit/shardkit/internal/twophase"
)

// Atomic makes a transaction begun from the statement atomic across shards:
// its statements may touch any logical shards, servers and the default
// connection, and it commits all of them or none by two-phase commit.
//
//	db.Clauses(plugin.Atomic()).Transaction(func(tx *gorm.DB) error {
//		if err := tx.Create(&Follow{UserID: a, Other: b}).Error; err != nil {
//			return err
//		}
//		return tx.Create(&Follower{UserID: b, Other: a}).Error
//	})
//
// A transaction that ends up with one participant commits plainly, at no
// extra cost. Raw SQL naming a sharded table is refused inside it (there is
// no single search_path); model statements are routed as outside one.
// Every server needs max_prepared_transactions > 0, and a resolver
// (package resolver) must run to finish transactions whose process died
// while committing. See docs/transactions.md.
func Atomic() clause.Expression { return atomicClause{} }

type atomicClause struct{}

type atomicKey struct{}

// ModifyStatement puts the opt-in in the statement's context, where the
// transaction begun from the statement (GORM's Transaction, or its own
// around a Create, Update or Delete) finds it.
func (atomicClause) ModifyStatement(stmt *gorm.Statement) {
	ctx := stmt.Context
	if ctx == nil {
		ctx = context.Background()
	}
	stmt.Context = context.WithValue(ctx, atomicKey{}, true)
}

// Build is part of clause.Expression; Atomic adds no SQL.
func (atomicClause) Build(clause.Builder) {}

func atomicOf(ctx context.Context) bool {
	v, _ := ctx.Value(atomicKey{}).(bool)
	return v
}

// spans reports whether the transaction may span shards: GORM's own
// around one statement, or an atomic one.
func (t *shardTx) spans() bool { return t.statement || t.atomic }

// AtomicStats counts atomic transactions since Register.
type AtomicStats struct {
	// Committed counts atomic transactions committed by two-phase commit
	// (those with one participant commit plainly and are not counted).
	Committed int64
	// Aborted counts those rolled back at commit (a participant failed to
	// prepare, or the decision could not be recorded).
	Aborted int64
	// InDoubt counts commits that returned ErrCommitInDoubt.
	InDoubt int64
	// Unfinished counts committed transactions with a prepared part left
	// for the resolver (a COMMIT PREPARED failed after the decision).
	Unfinished int64
}

type atomicCounters struct {
	committed, aborted, inDoubt, unfinished atomic.Int64
}

// AtomicStats returns the counts of atomic transactions. It reads memory only.
func (p *Plugin) AtomicStats() AtomicStats {
	c := &p.atomics
	return AtomicStats{Committed: c.committed.Load(), Aborted: c.aborted.Load(), InDoubt: c.inDoubt.Load(), Unfinished: c.unfinished.Load()}
}

// Statements of the two-phase commit. The decision's identifier is
// completed with the coordinator's own transaction ID in SQL, so that the
// row and the ID are one statement and one round trip.
const (
	sqlDecide     = `INSERT INTO shardkit.tx_decisions (gid) VALUES ($1 || pg_current_xact_id()::text || $2) RETURNING gid`
	sqlXactStatus = `SELECT coalesce(pg_xact_status($1::text::xid8), '')`
)

// afterStep is called after each step of a two-phase commit with the
// step's name; tests use it to stop a process at a chosen step.
var afterStep = func(step string, gid string) {}

// participant is one part of an atomic transaction other than the
// coordinator's: a server's part or the default connection's.
type participant struct {
	server string        // "" for the default connection
	tx     gorm.ConnPool // the part's transaction
	end    func() error  // ends the database/sql transaction
	pool   gorm.ConnPool // the same database outside the transaction
	gid    twophase.GID
}

func (pt *participant) name() string {
	if pt.server == "" {
		return "the default connection"
	}
	return "server " + pt.server
}

// commitAtomic commits a transaction with more than one participant by
// two-phase commit. The first server's part coordinates: it records the
// decision in its own transaction, every other part prepares under a GID
// naming that transaction, then the coordinator commits (the decision
// is durable from here on) and the prepared parts commit. Anything that
// fails before the coordinator's commit rolls everything back; anything
// after it is left to the resolver. The caller holds t.mu.
func (t *shardTx) commitAtomic() error {
	ctx := t.ctx
	coord := t.txs[0]
	parts, err := t.participants()
	if err != nil {
		t.abort(coord, nil)
		return err
	}
	prefix, err := twophase.DecisionPrefix(coord.server)
	if err != nil {
		t.abort(coord, parts)
		return &ShardError{Shard: -1, Server: coord.server, Err: err}
	}
	nonce, err := twophase.NewNonce()
	if err != nil {
		t.abort(coord, parts)
		return err
	}
	var id string
	if err := coord.Tx.QueryRowContext(ctx, sqlDecide, prefix, ":"+nonce).Scan(&id); err != nil {
		t.abort(coord, parts)
		return &ShardError{Shard: -1, Server: coord.server, Err: fmt.Errorf("%w: record the commit decision: %w", ErrAtomicCommit, hintDecisions(err))}
	}
	d, err := twophase.ParseDecision(id)
	if err != nil {
		t.abort(coord, parts)
		return &ShardError{Shard: -1, Server: coord.server, Err: err}
	}
	for i, pt := range parts {
		pt.gid = d.Part(i + 1)
		_, err := pt.tx.ExecContext(ctx, "PREPARE TRANSACTION "+pt.gid.Literal())
		// The session has no transaction left whatever PREPARE did:
		// a failed PREPARE TRANSACTION rolls back.
		_ = pt.end()
		if err != nil {
			// A PREPARE cut off by a cancelled context may have
			// happened: roll its GID back too.
			t.abort(coord, parts[:i+1])
			return &ShardError{Shard: -1, Server: pt.server, Err: fmt.Errorf("%w: prepare on %s: %w", ErrAtomicCommit, pt.name(), hintPrepare(err))}
		}
		afterStep(fmt.Sprintf("prepared:%d", i+1), pt.gid.String())
	}
	afterStep("prepared", d.String())
	if err := coord.Tx.Commit(); err != nil {
		switch t.status(coord.server, d) {
		case "committed":
		case "aborted":
			t.abort(nil, parts)
			return &ShardError{Shard: -1, Server: coord.server, Err: fmt.Errorf("%w: commit the decision: %w", ErrAtomicCommit, err)}
		default:
			t.p.atomics.inDoubt.Add(1)
			return &InDoubtError{GID: d.String(), Coordinator: coord.server, Err: err}
		}
	}
	afterStep("decided", d.String())
	t.p.atomics.committed.Add(1)
	t.finish(parts, d)
	return nil
}

// participants lists the parts that prepare: every server's but the
// coordinator's, then the default connection's.
func (t *shardTx) participants() ([]*participant, error) {
	snap := t.p.router.Snapshot()
	var out []*participant
	for _, v := range t.txs[1:] {
		db, err := t.p.pools.get(snap, v.server)
		if err != nil {
			return nil, err
		}
		out = append(out, &participant{server: v.server, tx: v.Tx, end: v.Tx.Rollback, pool: db})
	}
	if t.def != nil {
		tx, pool := t.def, t.base
		if ps, ok := tx.(*gorm.PreparedStmtTX); ok {
			tx = ps.Tx // PREPARE TRANSACTION is not a statement to keep prepared
		}
		if ps, ok := pool.(*gorm.PreparedStmtDB); ok {
			pool = ps.ConnPool
		}
		c, ok := t.def.(gorm.TxCommitter)
		if !ok {
			return nil, fmt.Errorf("%w: the default connection's transaction cannot be ended", ErrAtomicCommit)
		}
		out = append(out, &participant{tx: tx, end: c.Rollback, pool: pool})
	}
	return out, nil
}

// afterDecision bounds the work done after the decision with a context
// of its own: a caller's deadline there would only leave more to the
// resolver.
const afterDecision = 30 * time.Second

// finish commits the prepared parts of a decided transaction. A part that
// fails stays prepared for the resolver, which commits it by the
// decision; the transaction is committed either way.
func (t *shardTx) finish(parts []*participant, d twophase.Decision) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), afterDecision)
	defer cancel()
	for i, pt := range parts {
		if _, err := pt.pool.ExecContext(ctx, "COMMIT PREPARED "+pt.gid.Literal()); err != nil {
			t.p.atomics.unfinished.Add(1)
			t.p.warn(ctx, "shardkit: atomic transaction %s is committed; its part on %s stays prepared for the resolver: %v", d, pt.name(), err)
			continue
		}
		afterStep(fmt.Sprintf("committed:%d", i+1), pt.gid.String())
	}
}

// abort rolls back the coordinator's transaction (when given) and every
// part: prepared parts by ROLLBACK PREPARED, which fails harmlessly for a
// part that never prepared. What it cannot reach, the resolver rolls back:
// without the coordinator's commit there is no decision (presumed abort).
func (t *shardTx) abort(coord *txView, parts []*participant) {
	t.p.atomics.aborted.Add(1)
	if coord != nil {
		_ = coord.Tx.Rollback()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), afterDecision)
	defer cancel()
	for _, pt := range parts {
		if pt.gid.Part == 0 {
			_ = pt.end()
			continue
		}
		_, _ = pt.pool.ExecContext(ctx, "ROLLBACK PREPARED "+pt.gid.Literal())
	}
	for _, v := range t.txs[1:] {
		_ = v.Tx.Rollback() // parts not reached: ErrTxDone for the rest
	}
	if c, ok := t.def.(gorm.TxCommitter); ok {
		_ = c.Rollback()
	}
}

// status asks the coordinator's server, on a connection of its own,
// whether the coordinator's transaction committed after its COMMIT
// failed (a connection cut during COMMIT leaves that unknown): "committed",
// "aborted", or "" when it cannot tell.
func (t *shardTx) status(server string, d twophase.Decision) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), afterDecision)
	defer cancel()
	db, err := t.p.pools.get(t.p.router.Snapshot(), server)
	if err != nil {
		return ""
	}
	var s string
	if err := db.QueryRowContext(ctx, sqlXactStatus, fmt.Sprint(d.XID)).Scan(&s); err != nil {
		return ""
	}
	return s
}

// hintDecisions names the migration a server without the decisions table
// lacks.
func hintDecisions(err error) error {
	if isPgCode(err, "42P01") {
		return fmt.Errorf("%w (the server lacks shardkit.tx_decisions: install it with migrations.Migrate)", err)
	}
	return err
}

// hintPrepare names the setting a server that refuses PREPARE TRANSACTION
// lacks.
func hintPrepare(err error) error {
	if isPgCode(err, "55000") {
		return fmt.Errorf("%w: %w", ErrNoPreparedTransactions, err)
	}
	return err
}

// InDoubtError reports an atomic transaction whose coordinator's commit
// failed without telling whether it happened: every other part is
// prepared, and the resolver commits or rolls back all of them by the
// coordinator's record. It wraps ErrCommitInDoubt.
type InDoubtError struct {
	GID         string // the decision's identifier (shardkit:v1:…)
	Coordinator string // the server whose transaction decides
	Err         error  // why the commit failed
}

func (e *InDoubtError) Error() string {
	return fmt.Sprintf("shardkit: %s: transaction %s, coordinator %s: %v", ErrCommitInDoubt, e.GID, e.Coordinator, e.Err)
}

// Unwrap returns ErrCommitInDoubt and the cause.
func (e *InDoubtError) Unwrap() []error { return []error{ErrCommitInDoubt, e.Err} }

// isPgCode reports a PostgreSQL error of the given SQLSTATE.
func isPgCode(err error, code string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == code
}

// warn logs through the gorm.DB's logger the plugin was installed on.
func (p *Plugin) warn(ctx context.Context, format string, args ...any) {
	if p.log != nil {
		p.log.Warn(ctx, format, args...)
	}
}
