package rebalance

import (
	"fmt"
	"regexp"

	"github.com/jackc/pgx/v5"
)

var safeName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

// objectName builds a replication object name (publication, subscription,
// slot) from a kind, the shard, the move id and the move's tag, and
// validates it. Slot names allow only [a-z0-9_], so the same name serves
// all three. Slot names are per cluster while move ids are per catalog:
// the random tag keeps two catalogs' moves apart on a shared cluster. A
// move journalled before tags existed ("") keeps its untagged names.
func objectName(kind string, shard int, moveID int64, tag string) (string, error) {
	n := fmt.Sprintf("shardkit_%s_%d_%d", kind, shard, moveID)
	if tag != "" {
		n += "_" + tag
	}
	if !safeName.MatchString(n) {
		return "", fmt.Errorf("shardkit: %w: %q", errUnsafeName, n)
	}
	return n, nil
}

// names are the replication objects of one move.
type names struct {
	fwd string // publication on source, subscription on target, slot on source
	rev string // publication on target, subscription on source, slot on target
}

func moveNames(m Move) (names, error) {
	fwd, err := objectName("fwd", m.Shard, m.ID, m.Tag)
	if err != nil {
		return names{}, err
	}
	rev, err := objectName("rev", m.Shard, m.ID, m.Tag)
	if err != nil {
		return names{}, err
	}
	return names{fwd: fwd, rev: rev}, nil
}

// ident quotes one identifier.
func ident(parts ...string) string { return pgx.Identifier(parts).Sanitize() }
