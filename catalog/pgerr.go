package catalog

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/internal/catalogmove"
)

// isUndefinedTable reports an error of a catalog never provisioned.
func isUndefinedTable(err error) bool { return catalogmove.UndefinedTable(err) }

// isUndefinedColumn reports an error of a catalog older than the column
// a statement reads (undefined_column).
func isUndefinedColumn(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42703"
}
