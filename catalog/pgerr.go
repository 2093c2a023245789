package catalog

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func isUndefinedTable(err error) bool {
	c := pgCode(err)
	return c == "42P01" || c == "3F000" // undefined_table, invalid_schema_name
}
