// Package router knows where a row lives: the logical shard of a shard key
// or of an ID (pure arithmetic), and the versioned shard map (shard →
// server and schema) as an immutable [Snapshot]. A [Router] holds the
// snapshot in force and reloads it when the catalog announces a new
// version with NOTIFY. The catalog database itself is package catalog's:
// router never reads or writes its tables.
//
// # Shard arithmetic
//
// [ShardOfKey] maps an integer key to key mod shards, [ShardOfString] a
// string key to [HashString](key) mod shards (64-bit FNV-1a with the top
// bit cleared: it never changes, since it places rows). [SchemaName] and
// [ParseSchemaName] convert between a shard number and its schema name
// (shard_0000 …). The shard of an ID is in its bits (idgen.Layout.ShardOf).
//
//	shard, err := router.ShardOfKey(userID, r.Snapshot().Shards)
//	p, err := r.Snapshot().Placement(shard) // p.Server, p.Schema ("shard_1341")
//
// # The shard map
//
// A [Snapshot] is one version of the map: the [Server]s and each shard's
// [Placement] and [ShardState]. Every statement uses one snapshot, so a
// map change never splits a statement between two versions. [New] loads
// the snapshot from a [Source] (a *catalog.Catalog is one) and
// [Router.Watch] keeps it current:
//
//	cat, err := catalog.Open(ctx, catalogDSN)
//	r, err := router.New(ctx, cat)
//	go r.Watch(ctx) // reload on every shard-map change
//
// Without a database, [NewFixed] serves a map made by hand with
// [NewSnapshot]: tests, and examples of where statements go.
//
// Behind a connection pooler, or with many processes,
// [Router.WatchWith] with [WatchOptions]{} polls the map version through
// the catalog's pool instead of holding a LISTEN connection, and reads only
// the rows that changed.
//
// # Fences
//
// During a move's cutover the shard's old home refuses writes with
// SQLSTATE [FenceSQLState]; [IsFenceError] recognises that refusal, and
// [IsUndefinedTable] the error of a statement that met a schema a rollback
// dropped: in both cases the map changed, reload it and retry on the new
// home.
package router
