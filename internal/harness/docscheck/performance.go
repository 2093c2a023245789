package docscheck

// Figures are the tables make figures maintains. A figure whose result
// file does not exist yet keeps the page's text as it is.
var Figures = []Figure{
	{
		Name:    "ids",
		Command: "go test ./idgen ./router -run '^$' -bench . -benchmem -count 3",
		Columns: []string{"operation", "ns/op", "allocs/op"},
		Rows: []Row{
			{Label: "`Generator.Next`, random shards, 1 goroutine", Bench: "BenchmarkNext", Units: []string{"ns/op", "allocs/op"}},
			{Label: "`Generator.Next`, random shards, all cores", Bench: "BenchmarkNextParallel", Units: []string{"ns/op", "allocs/op"}},
			{Label: "`Generator.Fill` of 100 IDs, per ID", Bench: "BenchmarkFill/100", Units: []string{"ns/id", "allocs/op"}},
			{Label: "reading the clock alone (the floor under Next)", Bench: "BenchmarkClockRead", Units: []string{"ns/op", "allocs/op"}},
			{Label: "`Layout.Decode`", Bench: "BenchmarkDecode", Units: []string{"ns/op", "allocs/op"}},
			{Label: "`Layout.Compose`", Bench: "BenchmarkCompose", Units: []string{"ns/op", "allocs/op"}},
			{Label: "`router.ShardOfKey`", Bench: "BenchmarkShardOfKey", Units: []string{"ns/op", "allocs/op"}},
			{Label: "`router.ShardOfString`", Bench: "BenchmarkShardOfString", Units: []string{"ns/op", "allocs/op"}},
		},
	},
	{
		Name:    "ids-one-shard",
		Command: "go test ./idgen -run '^$' -bench 'OneShard' -count 3",
		Columns: []string{"path", "IDs per ms for one shard"},
		Rows: []Row{
			{Label: "`Next`, one ID per call (own slot)", Bench: "BenchmarkNextOneShard", Units: []string{"ms/ns/op"}},
			{Label: "`Fill` of 1024 IDs, `BulkSlots: 1` (own slot only)", Bench: "BenchmarkFillOneShard/slots=1", Units: []string{"ids/ms"}},
			{Label: "`Fill` of 1024 IDs, default (20 slots)", Bench: "BenchmarkFillOneShard/slots=20", Units: []string{"ids/ms"}},
		},
	},
}

// The tables of the plugin against plain GORM, in the page's order.
func init() {
	Figures = append(Figures,
		Figure{
			Name:    "routing",
			Command: "go test ./plugin -run '^$' -bench BenchmarkRoutingOverhead -benchtime 200000x -count 4",
			Columns: []string{"statement", "routing overhead per statement", "allocations", "plain GORM per statement"},
			Rows: []Row{
				routingRow("select by key", "select_by_key"),
				routingRow("select by ID", "select_by_id"),
				routingRow("update by ID", "update_by_id"),
				routingRow("insert", "insert_one"),
				routingRow("a table the plugin does not shard", "unsharded_table"),
			},
		},
		Figure{
			Name:    "sharded-vs-plain",
			Command: "go test ./plugin -run '^$' -bench BenchmarkOneShardVsPlain -benchtime 1x -count 3",
			Columns: []string{"one shard's statement", "wall time, sharded / plain", "client CPU, sharded / plain", "servers' CPU, sharded / plain", "sharded, per statement", "plain, per statement"},
			Rows: []Row{
				oneShardRow("select by key", "select_by_key"),
				oneShardRow("select by ID", "select_by_id"),
				oneShardRow("insert", "insert"),
				oneShardRow("update by ID", "update_by_id"),
				oneShardRow("*raw SQL on plain GORM's pool, prepared (GORM's share)*", "split/plain_sql_prepared"),
				oneShardRow("*raw SQL on a shard server, unnamed, random shards*", "split/sql_unnamed"),
				oneShardRow("*the same on one shard only*", "split/sql_unnamed_one_shard"),
				oneShardRow("*the same prepared, one shard*", "split/sql_prepared_one_shard"),
				oneShardRow("*the same prepared, random shards of one server*", "split/sql_prepared"),
				oneShardRow("*the plugin's select by ID on one shard only*", "split/plugin_one_shard"),
				oneShardRow("*the plugin's select by ID on random shards of one server*", "split/plugin_server_a"),
				oneShardRow("*update by ID in raw SQL on plain GORM's pool, prepared (GORM's share)*", "split/update_plain_sql_prepared"),
				oneShardRow("*the same on a shard server, unnamed, random shards*", "split/update_sql_unnamed"),
				oneShardRow("*the same prepared, random shards (the plugin's cache of writes)*", "split/update_sql_prepared"),
				oneShardRow("*insert in raw SQL on plain GORM's pool, prepared (GORM's share)*", "split/insert_plain_sql_prepared"),
				oneShardRow("*the same on a shard server, prepared, random shards*", "split/insert_sql_prepared"),
			},
		},
		Figure{
			Name:    "sharded-vs-plain-pooled",
			Command: "go test ./plugin -run '^$' -bench BenchmarkOneShardVsPlainPooled -benchtime 1x -count 3",
			Columns: []string{"one shard's statement, each side behind its PgBouncer", "wall time, sharded / plain", "client CPU, sharded / plain", "servers' CPU, sharded / plain", "sharded, per statement", "plain, per statement"},
			Rows: []Row{
				pooledRow("select by key", "select_by_key"),
				pooledRow("select by ID", "select_by_id"),
				pooledRow("insert", "insert"),
				pooledRow("update by ID", "update_by_id"),
			},
		},
		Figure{
			Name:    "lookups",
			Command: "go test ./plugin -run '^$' -bench BenchmarkLookup -benchtime 2000x -count 3",
			Columns: []string{"operation", "sharded / plain", "sharded", "plain"},
			Rows: []Row{
				lookupRow("sign-up (insert with a lookup column)", "sign_up"),
				lookupRow("read by username", "read_by_username"),
			},
		},
		Figure{
			Name:    "bulk-import",
			Command: "SHARDKIT_BENCH_COPY_ROWS=1000000 go test ./plugin -run '^$' -bench BenchmarkCopyFrom -benchtime 3x -count 2",
			Columns: []string{"1 M rows into 2000 shards", "time / plain `COPY`, median of the rounds", "per row"},
			Rows: []Row{
				{Label: "`plugin.CopyFrom` (4 parts at once)", Bench: "BenchmarkCopyFrom", Cells: []string{"{. copy/plain}×", "{. copy_from-ns/row /1e3} µs"}},
				{Label: "`CreateInBatches(&rows, 1000)` through the plugin", Bench: "BenchmarkCopyFrom", Cells: []string{"{. batches/plain}×", "{. create_in_batches-ns/row /1e3} µs"}},
				{Label: "plain `COPY` into one table", Bench: "BenchmarkCopyFrom", Cells: []string{"1", "{. plain_copy-ns/row /1e3} µs"}},
			},
		},
		Figure{
			Name:     "telemetry",
			Measures: []string{"./plugin"},
			Command:  "go test ./plugin/telemetry -run '^$' -bench BenchmarkTelemetryOverhead -benchtime 100000x -count 4",
			Columns:  []string{"statement", "no-op tracer (no SDK)", "SDK tracer, every span sampled, none exported", "the plugin alone, CPU"},
			Rows: []Row{
				telemetryRow("select by key", "select_by_key"),
				telemetryRow("select by ID", "select_by_id"),
				telemetryRow("update by ID", "update_by_id"),
				telemetryRow("insert one", "insert_one"),
				telemetryRow("read of all 16 shards", "select_all_shards"),
			},
		},
	)
}

// The cost of an atomic transaction across servers (transactions.md).
func init() {
	Figures = append(Figures, Figure{
		Name:    "atomic",
		Command: "go test ./plugin -run '^$' -bench BenchmarkAtomic -benchtime 1000x -count 3",
		Columns: []string{"one photo on a shard of each of two servers", "`plugin.Atomic()`", "two one-shard transactions", "ratio"},
		Rows: []Row{
			{Label: "clusters without fsync", Bench: "BenchmarkAtomic", Cells: []string{"{. ns/atomic /1e6} ms", "{. ns/two-txs /1e6} ms", "{. atomic/two-txs}×"}},
		},
	})
}

// The application role's cost on a one-shard read (moves.md: the old home
// refuses the role's reads through its privileges).
func init() {
	Figures = append(Figures, Figure{
		Name:    "app-role",
		Command: "go test ./rebalance -run '^$' -bench BenchmarkOneShardReadRole -benchtime 5000x -count 5",
		Columns: []string{"a one-shard read by key", "as the application role", "as the superuser", "role / superuser"},
		Rows: []Row{
			{Label: "medians, back to back", Bench: "BenchmarkOneShardReadRole", Cells: []string{"{. app-median-ns /1e3} µs", "{. superuser-median-ns /1e3} µs", "{. ratio}×"}},
		},
	})
}

func routingRow(label, op string) Row {
	return Row{Label: label, Bench: "BenchmarkRoutingOverhead/" + op, Cells: []string{
		"{. overhead-median-ns/op /1e3 +} µs", "{. overhead-allocs/op +}", "{. plain-ns/op /1e3} µs",
	}}
}

func oneShardRow(label, op string) Row {
	return Row{Label: label, Bench: "BenchmarkOneShardVsPlain/" + op, Cells: []string{
		"{. ratio}×", "{. cpu-ratio}×", "{. server-ratio}×", "{. sharded-ns/stmt /1e3} µs", "{. plain-ns/stmt /1e3} µs",
	}}
}

func pooledRow(label, op string) Row {
	r := oneShardRow(label, op)
	r.Bench = "BenchmarkOneShardVsPlainPooled/" + op
	return r
}

func lookupRow(label, op string) Row {
	return Row{Label: label, Bench: "BenchmarkLookup/lookup/" + op, Cells: []string{
		"{. ratio}×", "{. sharded-ns/op /1e6} ms", "{. plain-ns/op /1e6} ms",
	}}
}

func telemetryRow(label, op string) Row {
	return Row{Label: label, Bench: "BenchmarkTelemetryOverhead", Cells: []string{
		"{/noop_tracer/" + op + " overhead-cpu-ns/op /1e3 +} µs, {/noop_tracer/" + op + " overhead-allocs/op +} allocs",
		"{/sdk_tracer/" + op + " overhead-cpu-ns/op /1e3 +} µs, {/sdk_tracer/" + op + " overhead-allocs/op +} allocs",
		"{/noop_tracer/" + op + " base-cpu-ns/op /1e3} µs",
	}}
}

// Reads across shards: one command, two tables.
func init() {
	Figures = append(Figures,
		Figure{
			Name:    "scatter",
			Command: "go test ./plugin -run '^$' -bench BenchmarkScatter -benchtime 20x -count 3",
			Columns: []string{"read", "one `UNION ALL` per 100 shards of a server, prepared (the default)", "the same unnamed (the fallback through a pooler)", "per 250", "per 500", "one statement per shard",
				"through PgBouncer 1.24, prepared (`PreparedReadsAlways`)", "through PgBouncer 1.18, unnamed (the fallback)",
				"default / one table", "fallback / one table", "PgBouncer 1.24 prepared / one table", "PgBouncer 1.18 fallback / one table"},
			Rows: []Row{
				scatterClockRow("`ORDER BY id DESC LIMIT 50`, clock", "order_by_id_desc_limit_50"),
				scatterCPURow("the same, CPU per read (client + servers)", "order_by_id_desc_limit_50"),
				scatterClockRow("`COUNT(*)`, clock", "count"),
				scatterCPURow("the same, CPU per read", "count"),
			},
			Notes: []string{"Each ratio is of the mean times of 20 reads of each side, paired read by read, over the plain read it was paired with, " +
				"whose mean the cell gives after \"of\" (each column has its own); in brackets, the ratio of their medians, " +
				"which the few reads slowed by whatever else the machine runs move less (the plain read, under a millisecond, swings most).",
				"A warm read by the default batching costs {BenchmarkScatter/order_by_id_desc_limit_50/union_100 server-cpu-µs/shard} µs " +
					"(ordered) and {BenchmarkScatter/count/union_100 server-cpu-µs/shard} µs (`COUNT(*)`) of server CPU per shard, Postgres's own per-table work.",
				"The unnamed column runs on new server connections, as a deployment that never prepares has them: a backend that held named plans " +
					"first plans each unnamed statement of 100 tables with several times the CPU, by what a page fault costs the machine ([operations](operations.md#server-settings-for-thousands-of-schemas), glibc's heap trimming)."},
		},
		Figure{
			Name:    "scatter-first-read",
			From:    "scatter",
			Columns: []string{"first read of a freshly opened plugin", "first", "warm", "first / warm", "the same in plain SQL on a fresh connection to one server, first / warm", "the plugin's start-up (`db.Use`, warm-up included)"},
			Rows: []Row{
				firstReadRow("ordered (`LIMIT 50`), direct, the default", "first_read/order_by_id_desc_limit_50", true),
				firstReadRow("`COUNT(*)`, direct, the default", "first_read/count", true),
				firstReadRow("ordered, direct, `WarmUp: WarmUpBlocking`", "first_read_warmup/order_by_id_desc_limit_50", false),
				firstReadRow("`COUNT(*)`, direct, `WarmUp: WarmUpBlocking`", "first_read_warmup/count", false),
				firstReadRow("ordered, through PgBouncer 1.24, prepared", "first_read_pgbouncer_prepared/order_by_id_desc_limit_50", false),
				firstReadRow("`COUNT(*)`, through PgBouncer 1.24, prepared", "first_read_pgbouncer_prepared/count", false),
				firstReadRow("ordered, through PgBouncer 1.18, unnamed", "first_read_pgbouncer_fallback/order_by_id_desc_limit_50", false),
				firstReadRow("`COUNT(*)`, through PgBouncer 1.18, unnamed", "first_read_pgbouncer_fallback/count", false),
			},
			Notes: []string{"Start-up warms nothing unless `Config.WarmUp` asks (a fleet of processes starting at once is the cost it saves: " +
				"[scale](scale.md)), so the first read opens a connection to each server, reads its shard tables' catalog entries for the first time " +
				"and prepares its statements; warm reads reuse all three. The plain-SQL column is the floor under the first: a new server backend " +
				"reads the catalog entries of each table it touches once, whatever the client sends, so on direct connections no client can bring a " +
				"fresh process's first read within a few times a warm one; a warm backend can: `Config.WarmUp` at start-up (its cost moves into the start-up column), " +
				"or a pooler's server connections, which outlive app processes (the pooled rows: a fresh process behind PgBouncers that earlier reads warmed)."},
		},
		scatterLayersFigure,
		Figure{
			Name:    "finish-in-postgres",
			Command: "go test ./plugin -run '^$' -bench 'BenchmarkFinishInPostgres|BenchmarkTextOrder' -benchtime 20x -count 3",
			Columns: []string{"read", "finished in Postgres", "merged in Go", "ratio"},
			Rows: []Row{
				finishRow("2000 shards on two servers: `ORDER BY caption` (ICU) `LIMIT 50`, against `ORDER BY id LIMIT 50`", "BenchmarkFinishInPostgres/text_order"),
				finishRow("… `GROUP BY likes HAVING count(*) > 0` (every group passes), against no `HAVING`", "BenchmarkFinishInPostgres/having"),
				finishRow("… `count(DISTINCT likes)`, against `count(*)`", "BenchmarkFinishInPostgres/count_distinct"),
				{Label: "64 shards on two servers: ordered by text (ICU) `LIMIT 50`, against by ID", Bench: "BenchmarkTextOrder", Cells: []string{
					"{. by-text-µs/op /1e3} ms", "{. by-id-µs/op /1e3} ms", "{. ratio}×"}},
			},
		},
	)
}

func finishRow(label, bench string) Row {
	return Row{Label: label, Bench: bench, Cells: []string{
		"{. in-postgres-µs/op /1e3} ms", "{. in-go-µs/op /1e3} ms", "{. ratio}×",
	}}
}

// scatterLayersFigure is where the client's CPU of the default ordered
// read goes: BenchmarkScatterLayers, which the scatter command runs too.
var scatterLayersFigure = Figure{
	Name:    "scatter-layers",
	From:    "scatter",
	Columns: []string{"the same 20 statements (the ordered read of all 2000 shards)", "/ one table (medians)", "clock", "client CPU", "servers' CPU"},
	Rows: []Row{
		layersRow("the plugin's read (plan, render, run, merge, scan the page)", "plugin"),
		layersRow("the plugin's execute stage alone, every row kept (`readPipelined`: a pipeline per server on the pool's connection)", "execute"),
		layersRow("database/sql and pgx's driver with the plugin's `readAll`", "sql_readall"),
		layersRow("pgconn, one statement after another, every value's bytes copied", "pgconn"),
		layersRow("pgconn, one pipeline per server, a Sync after each statement", "pgconn_pipeline"),
		layersRow("pgconn, one pipeline per server, one Sync (one transaction)", "pgconn_pipeline_one_sync"),
	},
	Notes: []string{"Each row after the first runs the statements the plugin sent for the read, taken from it, one goroutine per server as the plugin runs them; each is " +
		"paired read by read with plain GORM's read of one table of the same rows; the modes run in three interleaved rounds of each run, " +
		"so each cell spans 9 values of 20 reads ([reads across shards](reads-across-shards.md#how-it-runs))."},
}

func layersRow(label, mode string) Row {
	b := "BenchmarkScatterLayers/" + mode + "/round_*"
	return Row{Label: label, Bench: b, Cells: []string{
		"{. ratio}× ({. median-ratio}×)", "{. sharded-µs/op /1e3} ms", "{. sharded-client-cpu-µs/op /1e3} ms", "{. sharded-server-cpu-µs/op /1e3} ms",
	}}
}

var scatterModes = []string{"union_100", "union_100_exec", "union_250", "union_500", "per_shard", "pgbouncer_prepared", "pgbouncer_fallback"}

// scatterRatioModes are the modes whose clock and CPU the table gives as
// ratios to one table: the default, its fallback, and the two poolers'.
var scatterRatioModes = []string{"union_100", "union_100_exec", "pgbouncer_prepared", "pgbouncer_fallback"}

func scatterClockRow(label, read string) Row {
	row := Row{Label: label, Bench: "BenchmarkScatter/" + read}
	for _, m := range scatterModes {
		row.Cells = append(row.Cells, "{/"+m+" sharded-µs/op /1e3} ms")
	}
	// Each mode is paired with a plain read of its own: a ratio names the
	// plain read it divides by.
	for _, m := range scatterRatioModes {
		row.Cells = append(row.Cells, "{/"+m+" ratio}× of {/"+m+" plain-µs/op /1e3} ms (medians {/"+m+" median-ratio}×)")
	}
	return row
}

func scatterCPURow(label, read string) Row {
	row := Row{Label: label, Bench: "BenchmarkScatter/" + read}
	for _, m := range scatterModes {
		row.Cells = append(row.Cells, "{/"+m+" sharded-client-cpu-µs/op /1e3} + {/"+m+" sharded-server-cpu-µs/op /1e3} ms")
	}
	for _, m := range scatterRatioModes {
		row.Cells = append(row.Cells, "{/"+m+" cpu-ratio}× of {/"+m+" plain-cpu-µs/op /1e3} ms")
	}
	return row
}

// firstReadRow is a row of first reads measured by the sub-benchmark
// sub; raw says whether it timed the same in plain SQL as well.
func firstReadRow(label, sub string, raw bool) Row {
	rawCell := "—"
	if raw {
		rawCell = "{. raw-first/warm}×"
	}
	return Row{Label: label, Bench: "BenchmarkScatter/" + sub, Cells: []string{
		"{. first-ms/op} ms", "{. warm-ms/op} ms", "{. first/warm}×", rawCell, "{. startup-ms/op /1e3} s",
	}}
}

// Figures of tests and the demo, written through internal/harness/benchout.
func init() {
	Figures = append(Figures,
		Figure{
			Name:     "move",
			Measures: []string{"./catalog"},
			Command: "SHARDKIT_MOVE_FIGURES=1000000 go test ./rebalance -run TestMoveFigures -count 3 -timeout 90m &&\n" +
				"go test ./rebalance -run '^$' -bench BenchmarkMoveCopy -benchtime 3x",
			Columns: []string{"figure", "measured"},
			Rows: []Row{
				{Label: "fenced window (writes held)", Bench: "BenchmarkMoveFigures", Cells: []string{"{. fenced-ms} ms"}},
				{Label: "failed writes", Bench: "BenchmarkMoveFigures", Cells: []string{"{. failed-writes} of {. writes}"}},
				{Label: "copy and indexes beside the writer / `pg_dump \\| psql` on a quiet shard", Bench: "BenchmarkMoveFigures", Cells: []string{"{. x-pg_dump}×"}},
				{Label: "copy and indexes / `pg_dump \\| psql`, both on a quiet shard (`BenchmarkMoveCopy`)", Bench: "BenchmarkMoveCopy", Cells: []string{"{. x-pg_dump}×"}},
				{Label: "the whole move, beside the writer", Bench: "BenchmarkMoveFigures", Cells: []string{"{. move-s} s"}},
			},
		},
		Figure{
			Name:     "fence-lease",
			Measures: []string{"./plugin", "./catalog"},
			Command:  "go test -count=3 -run 'TestFenceLease$|TestKillMoverThenWatchFences$' ./rebalance/",
			Columns:  []string{"figure", "measured"},
			Rows: []Row{
				{Label: "the seal", Bench: "BenchmarkFenceLease/seal", Cells: []string{"{. seal-ms} ms"}},
				{Label: "first write through the plugin after a kill inside the window", Bench: "BenchmarkKillMoverThenWatchFences/in_window", Cells: []string{"{. writable-ms /1e3} s"}},
				{Label: "the same, killed after the flip", Bench: "BenchmarkKillMoverThenWatchFences/after_flip", Cells: []string{"{. writable-ms} ms"}},
				{Label: "failed writes", Bench: "BenchmarkKillMoverThenWatchFences/writer", Cells: []string{"{. failed-writes} of {. writes}"}},
				{Label: "writes lost or doubled", Cells: []string{"none (the tests fail otherwise)"}},
			},
		},
		Figure{
			Name:     "demo",
			Measures: []string{"./examples/photos/...", "./plugin", "./rebalance", "./catalog", "./router", "./idgen", "./migrations"},
			Command:  "for run in 1 2 3; do make demo >&2 || exit 1; done",
			Columns:  []string{"figure", "measured"},
			Rows: []Row{
				{Label: "requests (req/s)", Bench: "BenchmarkDemo", Cells: []string{"{. requests} ({. req/s})"}},
				{Label: "p99 (feed p99)", Bench: "BenchmarkDemo", Cells: []string{"{. p99-ms} ms ({. feed-p99-ms})"}},
				{Label: "shards moved", Bench: "BenchmarkDemo", Cells: []string{"{. moves}"}},
				{Label: "longest fenced window of a run", Bench: "BenchmarkDemo", Cells: []string{"{. longest-window-ms} ms"}},
				{Label: "shortest fenced window of a run", Bench: "BenchmarkDemo", Cells: []string{"{. shortest-window-ms} ms"}},
				{Label: "longest write wait at cutover", Bench: "BenchmarkDemo", Cells: []string{"{. write-wait-ms} ms"}},
				{Label: "longest write request during the moves", Bench: "BenchmarkDemo", Cells: []string{"{. longest-write-ms} ms"}},
				{Label: "request errors", Bench: "BenchmarkDemo", Cells: []string{"{. errors}"}},
				{Label: "took", Bench: "BenchmarkDemo", Cells: []string{"{. took-s} s"}},
				{Label: "the service's live heap after the load / after the warm-up", Bench: "BenchmarkDemo", Cells: []string{"{. heap-end/warm}× ({. heap-warm-MB} → {. heap-end-MB} MB)"}},
				{Label: "server backends at the end of the load, the largest's private memory", Bench: "BenchmarkDemo", Cells: []string{"{. backends}, {. backend-max-MB} MB"}},
			},
		},
		Figure{
			Name:     "demo-pooled",
			Measures: []string{"./examples/photos/...", "./plugin", "./rebalance", "./catalog", "./router", "./idgen", "./migrations"},
			Command:  "for run in 1 2 3; do make demo-pooled >&2 || exit 1; done",
			Columns:  []string{"figure", "measured"},
			Rows: []Row{
				{Label: "requests (req/s)", Bench: "BenchmarkDemoPooled", Cells: []string{"{. requests} ({. req/s})"}},
				{Label: "p99 (feed p99)", Bench: "BenchmarkDemoPooled", Cells: []string{"{. p99-ms} ms ({. feed-p99-ms})"}},
				{Label: "shards moved", Bench: "BenchmarkDemoPooled", Cells: []string{"{. moves}"}},
				{Label: "longest fenced window of a run", Bench: "BenchmarkDemoPooled", Cells: []string{"{. longest-window-ms} ms"}},
				{Label: "request errors", Bench: "BenchmarkDemoPooled", Cells: []string{"{. errors}"}},
				{Label: "the service's live heap after the load / after the warm-up", Bench: "BenchmarkDemoPooled", Cells: []string{"{. heap-end/warm}× ({. heap-warm-MB} → {. heap-end-MB} MB)"}},
				{Label: "server backends at the end of the load, the largest's private memory", Bench: "BenchmarkDemoPooled", Cells: []string{"{. backends}, {. backend-max-MB} MB"}},
			},
		},
		Figure{
			Name:     "demo-switchover",
			Measures: []string{"./examples/photos/...", "./failover", "./plugin", "./catalog", "./router"},
			Command:  "for run in 1 2 3; do make demo-switchover >&2 || exit 1; done",
			Columns:  []string{"figure", "measured"},
			Rows: []Row{
				{Label: "requests (req/s)", Bench: "BenchmarkDemoSwitchover", Cells: []string{"{. requests} ({. req/s})"}},
				{Label: "request errors", Bench: "BenchmarkDemoSwitchover", Cells: []string{"{. errors}"}},
				{Label: "writes held (the fence to its release)", Bench: "BenchmarkDemoSwitchover", Cells: []string{"{. fenced-ms} ms"}},
				{Label: "longest write request during the switchover", Bench: "BenchmarkDemoSwitchover", Cells: []string{"{. longest-write-ms} ms"}},
				{Label: "longest fence wait in the plugin", Bench: "BenchmarkDemoSwitchover", Cells: []string{"{. fence-wait-ms} ms"}},
			},
		},
		Figure{
			Name:    "pooler-exec-modes",
			Command: "go test ./plugin -run '^$' -bench BenchmarkExecModes -benchtime 2000x",
			Columns: []string{"execution mode", "select by key / plain", "insert / plain"},
			Rows: []Row{
				{Label: "the default: the one-shard statements GORM builds prepared from the plugin's caches, the rest unnamed", Cells: []string{"{BenchmarkExecModes/select_by_key/exec ratio}", "{BenchmarkExecModes/insert/exec ratio}"}},
				{Label: "the default through PgBouncer 1.18, recorded pooled: every statement unnamed", Cells: []string{"{BenchmarkExecModes/select_by_key/exec_pooled ratio}", "{BenchmarkExecModes/insert/exec_pooled ratio}"}},
				{Label: "prepared statements (4096 per connection)", Cells: []string{"{BenchmarkExecModes/select_by_key/prepared ratio}", "{BenchmarkExecModes/insert/prepared ratio}"}},
				{Label: "cache_describe, every description cached", Cells: []string{"{BenchmarkExecModes/select_by_key/cache_describe ratio}", "{BenchmarkExecModes/insert/cache_describe ratio}"}},
				{Label: "cache_describe, descriptions missed", Cells: []string{"{BenchmarkExecModes/select_by_key/cache_describe_misses ratio}", "{BenchmarkExecModes/insert/cache_describe_misses ratio}"}},
			},
		},
		Figure{
			Name:    "pooler-backends",
			Command: "go test ./plugin -run TestPoolerBoundsServerBackends -count 1",
			Columns: []string{"app instances", "server backends, direct", "server backends, through PgBouncer"},
			Rows: []Row{
				{Label: "12 (3 concurrent workers each)", Bench: "BenchmarkPoolerBackends", Cells: []string{"{. direct-backends}", "{. pooled-backends} (its pool size: {. pool-size})"}},
			},
		},
		Figure{
			Name:    "map-propagation",
			Command: "go test ./catalog -run 'TestPollPropagation' -count 1 -args -poll=1s",
			Columns: []string{"100 routers polling every second", "p50", "p99", "max", "catalog backends"},
			Rows: []Row{
				{Label: "catalog direct", Bench: "BenchmarkPollPropagation/direct", Cells: []string{"{. p50-ms} ms", "{. p99-ms} ms", "{. max-ms} ms", "{. catalog-backends}"}},
				{Label: "catalog through PgBouncer", Bench: "BenchmarkPollPropagation/through_PgBouncer", Cells: []string{"{. p50-ms} ms", "{. p99-ms} ms", "{. max-ms} ms", "{. catalog-backends}"}},
			},
		},
	)
}
