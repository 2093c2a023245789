package docscheck

// The figures of provisioning (migrations.TestProvision2000ShardsOn4Servers)
// and of schema changes under load (migrations.TestMigrationFigures).
func init() {
	Figures = append(Figures, Figure{
		Name:    "provision",
		Command: "go test ./migrations -run 'TestProvision2000ShardsOn4Servers$' -count 3",
		Columns: []string{"what", "took"},
		Rows: []Row{
			{Label: "2000 logical shards × 3 tables (with secondary indexes) on 4 local servers", Bench: "BenchmarkProvision", Cells: []string{"{. first-s} s"}},
			{Label: "the same again (nothing to do)", Bench: "BenchmarkProvision", Cells: []string{"{. again-ms} ms"}},
		},
	})
	const b = "BenchmarkMigrateFigures/"
	Figures = append(Figures, Figure{
		Name:    "migrate",
		Command: "SHARDKIT_MIGRATE_FIGURES=1000000 go test ./migrations -run TestMigrationFigures -count 1 -timeout 60m -v",
		Columns: []string{"change, 2000 shards on 2 servers, 8 workers of the photo application", "measured"},
		Rows: []Row{
			{Label: "`ADD COLUMN … NOT NULL DEFAULT 0`: the run", Bench: b + "add_column", Cells: []string{"{. wall-s} s, longest lock wait {. lock-wait-ms} ms, {. retries} lock timeouts"}},
			{Label: "request p99, before → during", Bench: b + "add_column", Cells: []string{"{. p99-before-ms} → {. p99-during-ms} ms"}},
			{Label: "request max, before → during", Bench: b + "add_column", Cells: []string{"{. max-before-ms} → {. max-during-ms} ms"}},
			{Label: "failed requests during the run", Bench: b + "add_column", Cells: []string{"{. errors} of {. requests}"}},
			{Label: "the same interrupted half-way, 15 s at two versions, rerun: failed requests", Bench: b + "interrupted", Cells: []string{"{. errors} of {. requests} (the rerun did {. rerun-schemas} schemas)"}},
			{Label: "a transaction holding one shard's table for 60 s: the run", Bench: b + "blocked_60s", Cells: []string{"{. wall-s} s, {. retries} lock timeouts, longest lock wait {. lock-wait-s} s"}},
			{Label: "… longest request to any other shard", Bench: b + "blocked_60s", Cells: []string{"{. max-other-ms} ms (lock timeout 500 ms)"}},
			{Label: "… requests per second, before → during", Bench: b + "blocked_60s", Cells: []string{"{. req/s-before} → {. req/s-during}; {. errors} failed"}},
			{Label: "`CREATE INDEX CONCURRENTLY`, one shard of 1,000,000 rows: longest insert into that shard", Bench: b + "index", Cells: []string{"{. big-write-max-ms} ms (the run {. wall-s} s)"}},
			{Label: "plain `CREATE INDEX`, the same shard: longest insert into it / into any other shard", Bench: b + "index", Cells: []string{"{. plain-big-write-max-ms} ms / {. plain-max-other-ms} ms (the run {. plain-wall-s} s)"}},
		},
	})
}
