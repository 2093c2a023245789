// Package catalogmove is the part of the catalog that only shard moves and
// their tools use: the move journal, the cutover's fence, flip and unfence
// (each with its journal entry in the same statement), the fenced window's
// held connection, fence leases, and the shard-map state changes of moves
// and restores. It writes package catalog's tables and is, with catalog,
// their only owner; it lives under internal/ so that none of it is a
// promise to users.
//
// A [*catalog.Catalog] keeps its pool unexported. Package catalog hands it
// over when it loads (see [Register]), so that rebalance, migrations and
// backup reach the store with
//
//	s := catalogmove.Of(cat)       // cat is a *catalog.Catalog
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

var (
	poolOf func(cat any) *pgxpool.Pool
	txOf   func(tx any) pgx.Tx
)

// Register is called once by package catalog when it loads: pool returns
// the pool of a *catalog.Catalog, tx the transaction of a *catalog.Tx.
// Neither is exported by catalog, so that its users see only its own API.
func Register(pool func(cat any) *pgxpool.Pool, tx func(tx any) pgx.Tx) {
	poolOf, txOf = pool, tx
}

// Of returns the store of cat, a *catalog.Catalog.
func Of(cat any) *Store {
	if poolOf == nil {
		panic("catalogmove: package catalog has not registered")
	}
	return New(poolOf(cat))
}

// querier is a pool, a connection or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// txOfCatalog returns the transaction of tx, a *catalog.Tx.
func txOfCatalog(tx any) querier {
	if txOf == nil {
		panic("catalogmove: package catalog has not registered")
	}
	return txOf(tx)
}

func journalErr(err error) error {
	if err != nil {
		return fmt.Errorf("shardkit: journal: %w", err)
	}
	return nil
}
