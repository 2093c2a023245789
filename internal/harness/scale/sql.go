package scale

import (
	"embed"
	"io/fs"
)

//go:embed shardsql/*.sql
var shardFiles embed.FS

// shardSQL is the per-shard SQL of the harness's table.
func shardSQL() fs.FS {
	sub, err := fs.Sub(shardFiles, "shardsql")
	if err != nil {
		panic(err) // the embedded directory exists
	}
	return sub
}

// Item is one write of an app process, on its user's shard.
type Item struct {
	ID     int64
	UserID int64 `shard:"key"`
	Proc   int
	Body   string
}
