// Package plugin is shardkit's GORM plugin: it fills the 64-bit IDs of new
// rows in Go before the insert and routes every statement on a sharded
// table to its logical shard's schema (shard_NNNN) on the physical server
// the shard map places it on, or refuses it with a typed error.
//
//	r, _ := router.New(ctx, catalog)          // the shard map; go r.Watch(ctx)
//	ids, stop, _ := idgen.Start(ctx, r.Snapshot().Layout, leaser, idgen.Config{})
//	defer stop()
//	db, _ := gorm.Open(postgres.Open(defaultDSN), &gorm.Config{})
//	type Photo struct {
//		ID     int64
//		UserID int64 `shard:"key"` // shard = user_id mod 2000
//	}
//	_ = db.Use(plugin.Register(plugin.Config{Router: r, IDs: ids}, &Photo{}))
//	db.Create(&Photo{UserID: 42})                  // ID filled, row in shard_0042
//	db.Where("user_id = ?", 42).Find(&photos)      // shard of the key
//	db.First(&photo, id)                           // shard from the ID's bits
//	db.Clauses(plugin.Shard(42)).Transaction(fn)   // pinned to one shard
//
// A field tagged shard:"id" holds another sharded ID (a like's PhotoID):
// the row lives in that ID's shard, next to the photo, so Preload and
// Joins between them stay on one schema.
//
// Routing reads the shard from, in order: a Shard/ShardOfID/AllShards
// clause, the model value's primary key, and equality or IN conditions on
// the primary key or the shard field (struct, map and "col = ?" / "col IN
// ?" string conditions, AND-ed). Several shards fan out: creates are split
// per shard, reads run per shard and merge (ORDER BY model columns and
// LIMIT/OFFSET applied to the merged rows), counts add up. A read's
// servers are queried at once, each server's shards one after another.
//
// Refused, never sent to the default connection: a statement with no shard
// key, ID or scope (ErrMissingShardKey); raw SQL naming a sharded table
// outside a shard-pinned transaction, and results that cannot be merged
// across shards — Rows/Row/Scan, GROUP BY, DISTINCT, aggregates other
// than a plain count, ORDER BY a non-column (ErrUnroutableSQL); a
// statement for another shard inside a pinned transaction (ErrCrossShard);
// a caller-given ID whose shard bits disagree with the row's key
// (ErrIDShardMismatch).
// Writes to a fenced shard wait up to Config.FenceWait (ErrShardFenced)
// and go on as soon as the Router installs the unfenced map (run its Watch);
// a write the old home refuses after a move is retried once on the new
// home, or fails with ErrShardMoved inside a transaction.
package plugin
