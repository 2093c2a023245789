// Package shardsql holds the photo example's per-shard SQL migrations,
// versioned NNNN_name.sql files (secondary indexes in NNNN_name.indexes.sql)
// with unqualified table names, for migrations.Provision:
//
//	err := migrations.Provision(ctx, cat, migrations.ProvisionOptions{Servers: servers, ShardSQL: shardsql.FS})
package shardsql

import (
	"embed"
	"io/fs"
)

//go:embed *.sql
var files embed.FS

// FS is the set of per-shard migrations: files named NNNN_name.sql at its root.
var FS fs.FS = files
