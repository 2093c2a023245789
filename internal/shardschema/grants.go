package shardschema

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// GrantHomeSQL is what the application role holds on shard schemas that
// are their shard's home copy on this server: USAGE on the schemas, the
// data privileges on their tables and the use of their sequences. A
// move's cutover revokes them on the copy that stops being the home
// (RevokeHomeSQL) and grants them on the new one; a copy that is not a
// home grants the role nothing, so that a router with a stale map is
// refused there, reads included. Table privileges are checked at every
// execution, prepared statements and cached plans too.
func GrantHomeSQL(role string, schemas []string) string {
	list := quoteAll(schemas)
	return "GRANT USAGE ON SCHEMA " + list + " TO " + role +
		";\nGRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + list + " TO " + role +
		";\nGRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA " + list + " TO " + role
}

// RevokeHomeSQL takes back what GrantHomeSQL grants.
func RevokeHomeSQL(role string, schemas []string) string {
	list := quoteAll(schemas)
	return "REVOKE ALL ON ALL TABLES IN SCHEMA " + list + " FROM " + role +
		";\nREVOKE ALL ON ALL SEQUENCES IN SCHEMA " + list + " FROM " + role +
		";\nREVOKE ALL ON SCHEMA " + list + " FROM " + role
}

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = pgx.Identifier{n}.Sanitize()
	}
	return strings.Join(q, ", ")
}
