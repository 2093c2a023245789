// Package approle holds what every side of shardkit says alike about the
// application's group role: which names are accepted, and the statement
// that creates it where a cluster lacks it.
package approle

import "regexp"

var nameRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Valid reports whether role is a name shardkit accepts for the
// application role: lower case letters, digits and underscores, not
// starting with a digit, at most 63 bytes; an identifier that needs no
// quotes.
func Valid(role string) bool { return nameRE.MatchString(role) }

// EnsureSQL creates the NOLOGIN group role if the cluster has none of
// that name. Roles are the cluster's, shared by its databases, so two
// provisioning runs may race to create it: the loser's duplicate is not an
// error. role must be Valid.
func EnsureSQL(role string) string {
	return `DO $role$
BEGIN
    IF to_regrole('` + role + `') IS NULL THEN
        CREATE ROLE ` + role + ` NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION;
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END $role$`
}
