package plugin

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strings"
)

// Nested transactions (GORM's SavePoint and RollbackTo) must cover every
// part of a shardTx: the savepoint is taken on each part already begun and
// replayed at the start of each part begun later, so that rolling back to
// it undoes that part's work too.

// savepointSQL recognises SAVEPOINT, ROLLBACK TO [SAVEPOINT] and RELEASE
// [SAVEPOINT] statements and returns the verb and the savepoint name.
func savepointSQL(query string) (verb, name string, ok bool) {
	f := strings.Fields(query)
	if len(f) < 2 {
		return "", "", false
	}
	switch strings.ToUpper(f[0]) {
	case "SAVEPOINT":
		if len(f) == 2 {
			return "SAVEPOINT", f[1], true
		}
	case "RELEASE":
		if len(f) == 3 && strings.EqualFold(f[1], "SAVEPOINT") {
			return "RELEASE", f[2], true
		}
		if len(f) == 2 {
			return "RELEASE", f[1], true
		}
	case "ROLLBACK":
		if len(f) == 4 && strings.EqualFold(f[1], "TO") && strings.EqualFold(f[2], "SAVEPOINT") {
			return "ROLLBACK", f[3], true
		}
		if len(f) == 3 && strings.EqualFold(f[1], "TO") {
			return "ROLLBACK", f[2], true
		}
	}
	return "", "", false
}

// savepoint runs a savepoint statement on every begun part and keeps the
// list of live savepoints for parts begun later.
func (t *shardTx) savepoint(ctx context.Context, query, verb, name string) (sql.Result, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return nil, sql.ErrTxDone
	}
	for _, v := range t.txs {
		if _, err := v.Tx.ExecContext(ctx, query); err != nil {
			return nil, &ShardError{Shard: t.shard, Server: v.server, Err: err}
		}
	}
	if t.def != nil {
		if _, err := t.def.ExecContext(ctx, query); err != nil {
			return nil, err
		}
	}
	switch verb {
	case "SAVEPOINT":
		t.savepoints = append(t.savepoints, name)
	case "RELEASE", "ROLLBACK":
		for i := len(t.savepoints) - 1; i >= 0; i-- {
			if t.savepoints[i] == name {
				if verb == "RELEASE" {
					t.savepoints = t.savepoints[:i]
				} else {
					t.savepoints = t.savepoints[:i+1]
				}
				break
			}
		}
	}
	return driver.RowsAffected(0), nil
}

// replaySavepoints takes the live savepoints on a part just begun.
func (t *shardTx) replaySavepoints(exec func(ctx context.Context, query string, args ...any) (sql.Result, error)) error {
	for _, name := range t.savepoints {
		if _, err := exec(t.ctx, "SAVEPOINT "+name); err != nil {
			return err
		}
	}
	return nil
}
