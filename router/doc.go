// Package router knows where a row lives: the logical shard of a shard key
// or of an ID, and the versioned shard map (shard → server and schema)
// kept in the catalog database, reloaded when the catalog announces a new
// version with NOTIFY. It also leases ID slots to idgen generators from
// the catalog (Leaser, StartGenerator).
//
//	cat, err := router.OpenCatalog(ctx, catalogDSN)
//	r, err := router.New(ctx, cat)
//	go r.Watch(ctx) // reload on every shard-map change
//
//	shard, err := router.ShardOfKey(userID, r.Snapshot().Shards)
//	p, err := r.Snapshot().Placement(shard) // p.Server, p.Schema ("shard_1341")
//
//	ids, stop, err := router.StartGenerator(ctx, cat, router.LeaserConfig{}, idgen.Config{})
//	if errors.Is(err, router.ErrNoFreeSlot) { /* use the database's DEFAULT next_id() */ }
//	defer stop()
//	id, err := ids.Next(ctx, shard)
package router
