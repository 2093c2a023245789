// Package scale is the scale harness behind make scale: N app processes
// (real OS processes, each the harness's own binary re-executed: routers
// that poll the shard map, the GORM plugin, an ID generator when a slot is
// free, a slow write-and-read loop), a catalog and shard servers on local
// clusters behind PgBouncers (or reached directly: make scale-direct), and
// a shard move in the middle of the load.
// It reports per size one table: IDs and duplicates, each process's ID
// path, request errors and servers taken as down, the time from each map
// flip until every router serves it, catalog connections and CPU, the
// shard servers' CPU at start-up, process and backend memory.
//
//	res, err := scale.Run(ctx, scale.Options{Procs: 100, Routers: 4})
//	fmt.Print(res.Table())
//
// A binary that calls Run must call AppMain first thing in main (or
// TestMain): the app processes are that binary, run with an environment
// variable that AppMain recognises.
package scale
