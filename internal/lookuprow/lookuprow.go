// Package lookuprow is how a lookup row (a row of a shard:"lookup"
// column's <table>_<column>_lookup table) is judged an orphan and
// dropped: one rule, with its statements, for the plugin's writes and for
// shardctl lookup --repair.
package lookuprow

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The statements on a lookup table, whose schema-qualified, quoted name
// takes the %s. $1 is the value, typed as the column is (text or bigint).
const (
	LockRow = "SELECT owner_id FROM %s WHERE value = $1 FOR UPDATE"
	Drop    = "DELETE FROM %s WHERE value = $1 AND owner_id = $2"
)

// OwnerHolds returns the statement that reports whether the owner row
// whose ID is $1 holds the value $2 in column: table is the owner's
// table, schema-qualified and quoted; idColumn and column are bare.
func OwnerHolds(table, idColumn, column string) string {
	return "SELECT EXISTS (SELECT 1 FROM " + table + " WHERE " + pgx.Identifier{idColumn}.Sanitize() +
		" = $1 AND " + pgx.Identifier{column}.Sanitize() + " = $2)"
}

// Tx is the transaction, on the lookup row's server, a drop runs in.
type Tx interface {
	// LockOwner runs q (LockRow) for value: the owner its row names,
	// locked; ok is false when there is no row.
	LockOwner(ctx context.Context, q string, value any) (owner int64, ok bool, err error)
	// Exec runs q with args.
	Exec(ctx context.Context, q string, args ...any) error
}

// DropIfOrphan deletes value's row of table (quoted) in tx if, locked, it
// still names owner and holds reports that the owner row does not hold
// the value. A row that is gone, names another owner, or whose owner holds
// the value is kept (dropped false). The caller commits tx.
func DropIfOrphan(ctx context.Context, tx Tx, table string, value any, owner int64, holds func(context.Context) (bool, error)) (dropped bool, err error) {
	got, ok, err := tx.LockOwner(ctx, fmt.Sprintf(LockRow, table), value)
	if err != nil || !ok || got != owner {
		return false, err
	}
	if h, err := holds(ctx); err != nil || h {
		return false, err
	}
	if err := tx.Exec(ctx, fmt.Sprintf(Drop, table), value, owner); err != nil {
		return false, err
	}
	return true, nil
}
