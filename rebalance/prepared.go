package rebalance

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Prepared transactions (two-phase commit, plugin.Atomic) and moves. A
// prepared transaction that wrote a shard's tables on its serving server
// commits there later, whenever its coordinator's decision is carried out:
// after a cutover, that commit would land on the old home. A prepared
// transaction keeps its row-exclusive locks, so the barrier (which takes
// locks on every table of the schema) cannot be installed while one is
// prepared, and the cutover would fail at its lock timeout inside the
// fenced window. The cutover therefore waits, before the fence, until no
// prepared transaction holds a write lock on the shard's tables, for at
// most preparedWait, and refuses with ErrPreparedTransactions after that.
// A transaction that writes the shard and prepares between that wait and
// the barrier is still caught by the barrier's lock wait.

// errNoPreparedTransactions reports a target that cannot take part in
// atomic transactions while the source can.
var errNoPreparedTransactions = ofKind(ErrPreflight, errors.New("the target does not allow prepared transactions (max_prepared_transactions = 0) while the source does: atomic transactions on the shard would fail after the move; raise it on the target (it needs a restart)"))

// checkPrepared is the preflight check of max_prepared_transactions and
// of prepared transactions on the shard.
const checkPrepared = "prepared transactions"

// preparedWait bounds the cutover's wait for prepared transactions.
var preparedWait = 10 * time.Second

// sqlPreparedOnSchema lists the prepared transactions holding locks
// stronger than a read's on a relation of schema $1 in this database. A
// prepared transaction's locks have no pid; they share the virtual
// transaction of the lock on its own transaction ID.
const sqlPreparedOnSchema = `SELECT DISTINCT p.gid FROM pg_prepared_xacts p
JOIN pg_locks x ON x.locktype = 'transactionid' AND x.transactionid = p.transaction AND x.pid IS NULL
JOIN pg_locks l ON l.virtualtransaction = x.virtualtransaction AND l.pid IS NULL AND l.locktype = 'relation'
JOIN pg_class c ON c.oid = l.relation
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE p.database = current_database() AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.mode <> 'AccessShareLock' AND n.nspname = $1
ORDER BY 1`

const sqlMaxPrepared = `SELECT current_setting('max_prepared_transactions')`

func preparedOnSchema(ctx context.Context, q querier, schema string) ([]string, error) {
	rows, err := q.Query(ctx, sqlPreparedOnSchema, schema)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// waitPrepared waits until no prepared transaction writes schema on the
// serving server, polling, for at most preparedWait.
func waitPrepared(ctx context.Context, from *pgxpool.Pool, server, schema string) error {
	deadline := time.Now().Add(preparedWait)
	for {
		gids, err := preparedOnSchema(ctx, from, schema)
		if err != nil {
			return fmt.Errorf("shardkit: server %s: list prepared transactions: %w", server, err)
		}
		if len(gids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("shardkit: server %s, schema %s: %w (%s)", server, schema, ErrPreparedTransactions, strings.Join(gids, ", "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond): // the resolver or the committing process finishes them
		}
	}
}

// checkPrepared is the preflight's look at prepared transactions: the
// target must allow them when the source does, and those on the shard now
// are reported (the cutover waits for them).
func (r *Report) checkPrepared(ctx context.Context, src, tgt querier) error {
	var maxSrc, maxTgt string
	if err := src.QueryRow(ctx, sqlMaxPrepared).Scan(&maxSrc); err != nil {
		return err
	}
	if err := tgt.QueryRow(ctx, sqlMaxPrepared).Scan(&maxTgt); err != nil {
		return err
	}
	ns, _ := strconv.Atoi(maxSrc)
	nt, _ := strconv.Atoi(maxTgt)
	if ns > 0 && nt == 0 {
		r.fail(checkPrepared, r.Target, "max_prepared_transactions", "is 0, the source's is "+maxSrc, errNoPreparedTransactions)
		return nil
	}
	gids, err := preparedOnSchema(ctx, src, r.Schema)
	if err != nil {
		return err
	}
	detail := fmt.Sprintf("max_prepared_transactions %s on the source, %s on the target", maxSrc, maxTgt)
	if nt == 0 {
		detail += " (atomic transactions cannot write this shard)"
	}
	if len(gids) > 0 {
		detail += fmt.Sprintf("; %d prepared on the shard now, the cutover waits for them", len(gids))
	}
	r.pass(checkPrepared, r.Target, detail)
	return nil
}
