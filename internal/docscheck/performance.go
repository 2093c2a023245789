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
