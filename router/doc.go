// Package router knows where a row lives: the logical shard of a shard key
// or of an ID (pure arithmetic), and the versioned shard map (shard →
// server and schema) as an immutable Snapshot. A Router holds the snapshot
// in force and reloads it when the catalog announces a new version with
// NOTIFY. The catalog database itself is package catalog's: router never
// reads or writes its tables.
//
//	cat, err := catalog.Open(ctx, catalogDSN)
//	r, err := router.New(ctx, cat)
//	go r.Watch(ctx) // reload on every shard-map change
//
//	shard, err := router.ShardOfKey(userID, r.Snapshot().Shards)
//	p, err := r.Snapshot().Placement(shard) // p.Server, p.Schema ("shard_1341")
//
// Behind a connection pooler, or with many processes, WatchWith(ctx,
// WatchOptions{}) polls the map version through the catalog's pool instead
// of holding a LISTEN connection, and reads only the rows that changed.
//
// Without a database, NewFixed serves a map made by hand.
package router
