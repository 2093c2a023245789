// Package catalog owns shardkit's catalog database: the schema "shardkit"
// with the configuration (shard count, ID layout, map version), the
// servers, the shard map, the per-shard SQL record, ID slot leases, the
// move journal and fence leases. It alone reads and writes those tables,
// through typed operations, and it alone holds their migrations
// (catalogsql/*.sql, applied by [Catalog.Migrate]).
//
// # Opening the catalog
//
//	cat, err := catalog.Open(ctx, catalogDSN)
//	defer cat.Close()
//	snap, err := cat.Load(ctx)     // one consistent *router.Snapshot
//	r, err := router.New(ctx, cat) // a router watching the map
//
// A [*Catalog] is a [router.Source]: [Catalog.Load] reads one consistent
// snapshot, [Catalog.ListenMap] announces new versions. A catalog that was
// never provisioned is [ErrNoCatalog]; [Catalog.Migrate] of one migrated
// by a newer shardkit is [ErrCatalogTooNew].
//
// # ID slots
//
// [StartGenerator] leases an ID slot through a [Leaser] and starts an
// idgen.Generator on it, renewing the lease in the background:
//
//	ids, stop, err := catalog.StartGenerator(ctx, cat, catalog.LeaserConfig{}, idgen.Config{})
//	if errors.Is(err, catalog.ErrNoFreeSlot) { /* use the database's DEFAULT next_id() */ }
//	defer stop()
//
// Each lease records a time high-water mark, so a new holder of a slot
// issues only IDs after its previous holder's; [Catalog.SlotLeases] lists
// the leases for operators.
//
// # Who writes what
//
// Provisioning (package migrations) writes through [Catalog.Update] and
// [Tx]; moves (package rebalance) through the journal and shard-map
// operations ([Catalog.CreateMove], [Catalog.FinishStep],
// [Catalog.FenceMove], [Catalog.FlipMove], [Catalog.Window], …); backups
// through [Catalog.ChangeShardState]; a server's two DSNs (application,
// admin) change through [Tx.SetServerDSN]. Nothing else in shardkit names a
// catalog table in SQL: a test in this package checks it.
package catalog
