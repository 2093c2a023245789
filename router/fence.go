package router

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// FenceSQLState is the SQLSTATE a shard server raises when a write reaches
// a schema whose shard has moved away (or is cutting over): the source-side
// barrier of DESIGN invariant 4. Routers read it as "the shard map
// changed": reload, then retry on the new home or fail with a retriable error.
const FenceSQLState = "SK001"

// IsFenceError reports whether err is the source-side write barrier.
func IsFenceError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == FenceSQLState
}

// IsUndefinedTable reports Postgres's "relation does not exist" (42P01).
// Where the map placed a shard, it means the copy there was dropped after
// the shard left (a rollback drops its copy right after flipping back):
// reload the map and, if it now places the shard elsewhere, retry there.
func IsUndefinedTable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42P01"
}
