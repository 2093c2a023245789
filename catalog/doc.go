// Package catalog owns shardkit's catalog database: the schema "shardkit"
// with the configuration (shard count, ID layout, map version), the
// servers, the shard map, the per-shard SQL record, ID slot leases, the
// move journal and fence leases. It alone reads and writes those tables,
// through typed operations, and it alone holds their migrations
// (catalogsql/*.sql, applied by Migrate).
//
//	cat, err := catalog.Open(ctx, catalogDSN)
//	defer cat.Close()
//	snap, err := cat.Load(ctx)   // one consistent *router.Snapshot
//	r, err := router.New(ctx, cat) // a router watching the map
//
//	ids, stop, err := catalog.StartGenerator(ctx, cat, catalog.LeaserConfig{}, idgen.Config{})
//	if errors.Is(err, catalog.ErrNoFreeSlot) { /* use the database's DEFAULT next_id() */ }
//	defer stop()
//
// Provisioning (package migrations) writes through Update and Tx; moves
// (package rebalance) through the journal and shard-map operations
// (CreateMove, FinishStep, FenceMove, FlipMove, Window…); backups
// through ChangeShardState; a server's two DSNs (application, admin)
// change through Tx.SetServerDSN. Nothing else in shardkit names a catalog
// table in SQL: a test in this package checks it.
package catalog
