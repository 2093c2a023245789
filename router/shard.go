package router

import (
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"strconv"
)

// Sentinel errors of the router. Test with errors.Is.
var (
	// ErrNegativeKey reports a negative integer shard key; shard keys are
	// user IDs and similar, never negative. Use a non-negative key, or a
	// string key, which is hashed.
	ErrNegativeKey = errors.New("negative shard key")
	// ErrShardOutOfRange reports a logical shard number outside [0,
	// shards). Give a shard below the catalog's shard count (shardctl
	// status prints it).
	ErrShardOutOfRange = errors.New("logical shard out of range")
	// ErrInvalidShardCount reports a shard count that is not in [1,
	// 2^shardBits]. Pick a count in that range; 2000 by default, fixed for
	// the catalog's lifetime.
	ErrInvalidShardCount = errors.New("invalid shard count")
	// ErrInvalidSchemaName reports a schema name that is not shard_NNNN.
	// Shard schemas are named by SchemaName.
	ErrInvalidSchemaName = errors.New("invalid shard schema name")
	// ErrUnknownShard reports a shard that the shard map does not place. A
	// provisioning that did not finish leaves shards unplaced: run
	// shardctl init again to complete it.
	ErrUnknownShard = errors.New("shard not in the shard map")
	// ErrUnknownServer reports a server name that the catalog does not
	// hold. Register it first (shardctl init --server NAME=DSN on the
	// existing catalog), or check the name: shardctl status lists the
	// servers.
	ErrUnknownServer = errors.New("server not in the catalog")
	// ErrBadCatalog reports a catalog row that breaks the catalog's rules;
	// the message names the row. Undo what changed the row (the catalog is
	// written only by shardkit), or restore the catalog.
	ErrBadCatalog = errors.New("malformed catalog")
)

// ShardOfKey returns the logical shard of an integer shard key: key mod shards.
func ShardOfKey(key int64, shards int) (int, error) {
	if shards <= 0 {
		return 0, fmt.Errorf("%w: %d (want at least 1)", ErrInvalidShardCount, shards)
	}
	if key < 0 {
		return 0, fmt.Errorf("%w: %d; shard keys must be zero or positive", ErrNegativeKey, key)
	}
	return int(key % int64(shards)), nil
}

// HashString is the stable hash for string shard keys: 64-bit FNV-1a of the
// key's UTF-8 bytes, with the top bit cleared so the result is a valid
// non-negative key. It never changes between releases: changing it would
// move every string-keyed row.
func HashString(key string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	return int64(h.Sum64() &^ (1 << 63))
}

// ShardOfString returns the logical shard of a string shard key:
// HashString(key) mod shards.
func ShardOfString(key string, shards int) (int, error) {
	return ShardOfKey(HashString(key), shards)
}

// SchemaName returns the Postgres schema of a logical shard: shard_%04d.
// Shards beyond 9999 get more digits (shard_12345).
func SchemaName(shard int) string {
	return fmt.Sprintf("shard_%04d", shard)
}

var schemaRE = regexp.MustCompile(`^shard_([0-9]{4,5})$`)

// ParseSchemaName returns the logical shard of a schema named by SchemaName.
// Names that SchemaName would not produce are refused.
func ParseSchemaName(name string) (int, error) {
	m := schemaRE.FindStringSubmatch(name)
	if m == nil {
		return 0, fmt.Errorf("%w: %q (want shard_NNNN)", ErrInvalidSchemaName, name)
	}
	n, err := strconv.Atoi(m[1])
	if err != nil || SchemaName(n) != name {
		return 0, fmt.Errorf("%w: %q (want shard_NNNN)", ErrInvalidSchemaName, name)
	}
	return n, nil
}
