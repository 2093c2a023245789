// Package catalogmove is the part of the catalog that only shard moves and
// their tools use: the move journal, the cutover's fence, flip and unfence
// (each with its journal entry in the same statement), the fenced window's
// held connection, fence leases, and the shard-map state changes of moves
// and restores. It writes package catalog's tables and is, with catalog,
// their only owner; it lives under internal/ so that none of it is a
// promise to users.
//
// Package catalog owns the pool and imports this package, never the
// reverse: a [*catalog.Catalog] hands its store over through its Moves
// method, and a *catalog.Tx hands over the reads of moves inside its
// transaction through its own Moves, so that nothing is wired at load
// time and rebalance, migrations and backup reach the store with
//
//	s := cat.Moves()               // cat is a *catalog.Catalog
//	m, err := s.CreateMove(ctx, shard, "pg0", "pg1", "online")
package catalogmove

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Store runs the move operations on a catalog's pool.
type Store struct{ pool *pgxpool.Pool }

// New returns the store on the catalog database's pool.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// querier is a pool, a connection or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// InTx is the reads of the move journal in a catalog transaction.
type InTx struct{ q querier }

// InTxOf returns the reads of the move journal in tx, a catalog
// transaction (package catalog's Tx holds it).
func InTxOf(tx pgx.Tx) InTx { return InTx{q: tx} }

func journalErr(err error) error {
	if err != nil {
		return fmt.Errorf("shardkit: journal: %w", err)
	}
	return nil
}
