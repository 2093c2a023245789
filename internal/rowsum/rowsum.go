// Package rowsum is the row checksum that a move's verify and a backup's
// restore check share: a table's row count and the sum of a 64-bit hash of
// each row's text form. The sum does not depend on the rows' physical
// order and costs one sequential scan; the text form depends on a few
// session settings, which Settings fixes, so that two servers (or a dump
// and its restore) configured differently agree on the same rows.
//
//	tx.Exec(ctx, rowsum.Settings) // in the transaction that sums
//	tx.QueryRow(ctx, rowsum.Query(schema, table)).Scan(&rows, &sum)
package rowsum

import "github.com/jackc/pgx/v5"

// Settings are the session settings under which a sum is computed, as SET
// LOCAL statements: run them in the summing transaction first.
const Settings = `SET LOCAL TimeZone = 'UTC'; SET LOCAL DateStyle = 'ISO, YMD'; SET LOCAL IntervalStyle = 'postgres';
SET LOCAL extra_float_digits = 3; SET LOCAL bytea_output = 'hex'`

// columns are the count and the sum, as text (a numeric: the sum of 64-bit
// hashes overflows a bigint), of the rows of a table aliased r.
const columns = `count(*), coalesce(sum(hashtextextended(r::text, 0)), 0)::text`

// Query returns the statement that counts and sums the rows of
// schema.table; both names are quoted.
func Query(schema, table string) string {
	return "SELECT " + columns + " FROM " + pgx.Identifier{schema, table}.Sanitize() + " AS r"
}

// Format returns a PL/pgSQL expression that builds Query for the schema
// and table held in the PL/pgSQL expressions schema and table (quoted by
// format's %I), for a check that runs on the server itself.
func Format(schema, table string) string {
	return "format('SELECT " + columns + " FROM %I.%I AS r', " + schema + ", " + table + ")"
}
