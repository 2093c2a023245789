// Package plugin is shardkit's GORM plugin. It fills the 64-bit IDs of new
// rows in Go before the insert, and routes every statement on a sharded
// table to its logical shard's schema (shard_NNNN) on the physical server
// the shard map places it on — or refuses it with a typed error. It never
// sends a statement on a sharded table to the default connection.
//
// # Getting started
//
// Tag each sharded model's shard field, then [Register] the models with a
// router and an ID source, and install the plugin with db.Use:
//
//	type Photo struct {
//		ID     int64 `gorm:"primaryKey;autoIncrement:false"`
//		UserID int64 `shard:"key"` // logical shard = user_id mod 2000
//	}
//
//	rt, err := router.New(ctx, cat) // cat: a *catalog.Catalog
//	go rt.Watch(ctx)                // shard-map changes apply live
//	ids, stop, err := catalog.StartGenerator(ctx, cat, catalog.LeaserConfig{Holder: "photos-api"}, idgen.Config{})
//	defer stop()
//	p := plugin.Register(plugin.Config{Router: rt, IDs: ids}, &Photo{})
//	if err := db.Use(p); err != nil { ... }
//	defer p.Close()
//
//	db.Create(&Photo{UserID: 42})             // ID made in Go, row in shard_0042
//	db.Where("user_id = ?", 42).Find(&photos) // routed by the shard key
//	db.First(&photo, id)                      // shard decoded from the ID's bits
//
// [Register]'s example is the README's quickstart, run on real clusters by
// the package's tests. Only [Config.Router] is required; with a nil
// [Config.IDs], or when no ID slot is free, new rows take their key from
// the column's DEFAULT next_id(), read back with RETURNING.
//
// # Shard tags
//
//   - shard:"key" marks the shard key: an integer maps to key mod shards,
//     a string to [router.HashString](key) mod shards.
//   - shard:"id" marks a field holding another sharded ID (a like's
//     PhotoID): the row lives in that ID's shard, next to the photo, so
//     Preload and Joins between them stay on one schema.
//   - shard:"lookup" marks a column unique across all shards, by which
//     statements are routed too (see Lookup columns below).
//
// # Routing
//
// Each statement gets one routing decision, computed before it runs: its
// shards, the shard-map snapshot, and each shard's server. The shards come
// from a [Shard], [ShardOfID] or [AllShards] clause, the model value's
// primary key, and the WHERE conditions, read conservatively: equality
// and IN on the primary key or the shard field (struct, map and string
// conditions, Or, groups) name shards; AND intersects, OR unites; NOT,
// expressions on the key, BETWEEN and sub-queries name nothing. A
// statement whose conditions leave its shards open is refused with
// [ErrMissingShardKey] unless scoped with [AllShards].
//
// A transaction is pinned to the shard of its first sharded statement, or
// to the one [Shard] names; raw SQL inside it runs with the shard's schema
// on its search_path. A statement for another shard inside it is
// [ErrCrossShard]. [RoutedShard] and [Routed] say where a statement went.
//
// # Reads across shards
//
// Several shards fan out: creates are split per shard and server; reads
// send one UNION ALL statement per server and batch of 100 of its shards,
// to all servers at once, and merge the answers — ORDER BY, LIMIT and
// OFFSET apply to the merged rows, in the order Postgres gives (NaN above
// every number, NULLs last ascending and first descending, text in its
// column's collation: by one server when it is not byte order); counts
// add up; COUNT, SUM, MIN, MAX,
// AVG, BOOL_AND, BOOL_OR, GROUP BY and DISTINCT, of columns or
// expressions, are combined exactly, with Postgres's arithmetic and
// types; where Go cannot combine exactly (HAVING, count(DISTINCT …),
// sums of double precision, min, max and ORDER BY of text in a
// linguistic collation) the shards' partial groups are finished by one
// server of the read in one statement; RETURNING rows are collected
// from every shard. Row, Rows and Scan read the merged rows Find would
// scan, served from memory as *sql.Rows.
// A read scoped with [Partial] returns what the reachable servers hold
// and lists the shards it could not read in a [PartialResult].
//
// A read of several servers is planned, rendered, executed and merged.
// Every statement's SQL text and arguments are built with GORM on the
// caller's goroutine, from a private copy of the clauses GORM's builders
// change (clause.Where.Build reorders a leading Or in place), before any
// statement runs; one goroutine per server then runs the text on its own
// connection and reads the rows into values it owns; the caller scans
// each answer with GORM's own Scan and merges it. Goroutines never read
// or write GORM state. A *gorm.DB is safe to share between goroutines,
// and so is a chain after Session, as GORM documents: each sharded
// statement builds from its own WHERE list.
//
// # Refusals
//
// What the plugin cannot route or merge exactly is refused, never guessed
// (test with errors.Is; most arrive in a [*ShardError] naming the table,
// shard and server), and a refused statement changes nothing:
//
//   - [ErrMissingShardKey]: no shard key, ID or scope.
//   - [ErrUnroutableSQL]: raw SQL naming a sharded table outside a pinned
//     transaction; a merge that would not be exact (string_agg, array_agg
//     and aggregates with no combine step, window functions not
//     partitioned by the shard key, ORDER BY … USING), through Find, Row,
//     Rows or Scan alike; a Table() other than the model's.
//   - [ErrShardKeyChange]: an update that would move rows to another shard.
//   - [ErrIDShardMismatch]: a caller-given ID whose shard bits disagree
//     with the row's key.
//   - [ErrCrossShard]: another shard's statement in a pinned transaction.
//   - [ErrDuplicateLookup], [ErrLookupUnroutable], [ErrLookupInTransaction],
//     [ErrLookupWrite]: lookup columns (below).
//
// # Failures and moves
//
// A statement whose server cannot be reached fails with a [*ServerError]
// ([ErrServerUnavailable]); the server is then taken as down for
// [Config.ServerRetry] and comes back by itself. Writes to a shard fenced
// for a move wait up to [Config.FenceWait] ([ErrShardFenced]) and go on as
// soon as the Router installs the new map (run its Watch); a write the old
// home refuses after a move is retried once on the new home, or fails with
// [ErrShardMoved] inside a transaction.
//
// # Lookup columns
//
// A column tagged shard:"lookup" is unique across all shards, through a
// lookup table per shard schema ([LookupTable] names it, [LookupShard]
// says which shard holds a value's row), and an equality or IN on it routes
// a statement to its rows' shards. A value another row holds is
// [ErrDuplicateLookup].
//
// # Bulk import
//
// [CopyFrom] loads a slice of a sharded model with COPY, one part per
// shard, several at once per server; on failure a [*CopyError] carries a
// [CopyReport] saying which parts are committed.
//
// # Observability
//
// [Routed] and [Plugin.State] expose each statement's routing decision and the
// servers' health; package [github.com/shardkit/shardkit/plugin/telemetry]
// turns them into Prometheus metrics and OpenTelemetry spans.
//
// The manual, with the GORM compatibility table, is docs/plugin.md in the
// repository.
package plugin

// # Files
//
// Every non-test file of the package, by concern, one line each
// (doc_test.go fails when a file is missing here or a name here is not a
// file). The read path's files are named read_<stage>_…, listed under
// their stage, in the order a read runs them: plan, render, execute,
// merge, scan. Only the execute stage runs on other goroutines, and it
// touches database/sql alone: its files import no GORM (a layout test
// keeps them so); every other stage runs on the caller's.
//
// GORM's entry:
//
//	plugin.go                Register, Initialize, the Plugin's state
//	callbacks.go             every callback registered, each entry point, the statement keys
//	config.go                Config and its defaults
//	errors.go                the typed errors
//	clauses.go               the Shard, ShardOfID and AllShards scopes
//	observe.go               Observe, Routed and RoutedShard: a statement's routing decision
//	retry.go                 Retryable: which errors are transient
//	doc.go                   this manual and map
//
// Routing:
//
//	route.go                 the route callback, binding a decision to a shard
//	decide.go                the decision: a statement's shards and their homes
//	analyze.go               a statement's conditions read for the shards they name
//	condread.go              WHERE text read into shard sets (the lexer is internal/sqlcond)
//	shardset.go              the shard sets conditions name
//	subquery.go              sub-queries and joins, kept on one shard
//	raw.go                   raw SQL: the default connection or a pinned transaction's shard
//	assign.go                IDs of new rows
//	models.go                the registered models and their shard fields
//
// Writes:
//
//	exec.go                  writes across shards, moved-shard retries
//
// Read path, entry:
//
//	read.go                  the stages in order (readAcross); each answer merged as it arrives
//	read_moved.go            a read run once more on a fresh map when a server refused its routing
//
// Read path, plan:
//
//	read_plan.go             the plan: the read's shape, its units and batches, how the answers merge
//	read_plan_rows.go        what a read of rows may join and select
//	read_plan_order.go       ORDER BY resolved to the merge's keys; hidden ORDER BY values
//	read_plan_window.go      window functions partitioned by the shard key
//	read_plan_coltype.go     each column's Postgres type, as the merge orders its values
//	read_plan_agg.go         aggregates, GROUP BY, DISTINCT: the partials each shard computes
//	read_plan_agg_parse.go   an aggregate read's select list and ORDER BY parsed
//	read_plan_agg_having.go  HAVING read, for the groups finished in Postgres
//
// Read path, render:
//
//	read_render.go           every statement's text and arguments, from a private copy of the clauses
//	read_render_union.go     one UNION ALL statement per server and batch; recent texts cached
//
// Read path, exec:
//
//	read_exec.go             the stage handed its statements and the plugin's bound and connections; its errors typed
//
// The execute stage itself is plugin/internal/readexec, which imports no
// GORM: the servers at once, one goroutine each (exec.go); a server's
// statements pipelined on one connection, prepared once (pipe.go); a
// statement run as a named prepared one, rows past the page dropped as
// they arrive (named.go).
//
// Read path, merge:
//
//	read_merge_page.go       rows merged in ORDER BY order, kept to the page
//	read_merge_coll.go       rows ordered in Postgres: text in a collation that is not byte order
//	read_merge_agg.go        partials combined per group, with Postgres's arithmetic and types
//	read_merge_agg_final.go  partials finished in Postgres: HAVING, distinct counts, floats, linguistic text
//	read_merge_arrays.go     partial rows sent to Postgres as typed arrays
//
// Read path, scan:
//
//	read_scan_late.go        only the page scanned by GORM, once, from the driver's values
//	read_scan_rows.go        Row, Rows and Scan: the merged rows served through internal/memrows
//
// Lookups:
//
//	lookup.go                LookupTable, LookupShard and the lookup columns
//	lookupread.go            reads routed by a lookup column
//	lookupwrite.go           a lookup value's reservation, written with its row
//	lookupclaim.go           the claim, hold and drop steps of a reservation
//	lookupupdate.go          the lookup columns an UPDATE sets
//
// Connections and transactions:
//
//	pool.go                  each server's primary pool
//	connector.go             the default OpenDB: database/sql over pgx
//	prepared.go              PreparedReads: where reads run as named prepared statements
//	stmtbound.go             one-shard statements bounded by their connection
//	health.go                ServerError, servers taken as down and back, Health, Partial
//	tx.go                    transactions pinned to a shard
//	alone.go                 a one-shard write run without GORM's transaction when nothing else would run in it
//	savepoint.go             SavePoint and RollbackTo across a transaction's parts
//	atomic.go                Atomic: transactions across shards by two-phase commit
//
// Start-up checks:
//
//	checks.go                every model's table and lookup tables, on every server
//	collation.go             text columns' collations, and whether Go can order them
//	warm.go                  the warm-up of pools and statements
//
// Bulk import:
//
//	copy.go                  CopyFrom: one COPY per shard, several at once per server
//	copywire.go              the rows written in COPY's binary format
//
// Every merge orders values with internal/pgorder.
