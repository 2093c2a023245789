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
// [Tx]; a server's two DSNs (application, admin) change through
// [Tx.SetServerDSN]; tests and repairs by hand place a shard with
// [Catalog.PlaceShard]. Moves (package rebalance) and restores (package
// backup) write the move journal, fence leases and the map's states through
// internal/catalogmove, which shares these tables with this package and is
// no part of its API. Nothing else in shardkit names a catalog table in
// SQL: a test in this package checks it.
package catalog
