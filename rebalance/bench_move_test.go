package rebalance

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"
)

// BenchmarkMoveCopy compares what a move does in place of pg_dump | psql
// (its copy from the slot's snapshot and its key and index build) with
// `pg_dump -n shard_0000 | psql` of the same schema into a fresh database
// on the same target cluster, both on a quiet shard, paired in every
// iteration (which of the two goes first alternates). Each iteration moves
// the shard to the other server and completes the move, so the next one
// moves it back. SHARDKIT_BENCH_MOVE_ROWS sets the shard's photo rows
// (default 1,000,000). Reported: the move's copy + indexes as a multiple of
// pg_dump | psql ("x-pg_dump"), and the seconds of each part per
// iteration.
//
//	go test ./rebalance -run '^$' -bench BenchmarkMoveCopy -benchtime 3x -v
func BenchmarkMoveCopy(b *testing.B) {
	rows := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("SHARDKIT_BENCH_MOVE_ROWS")); err == nil && v > 0 {
		rows = v
	}
	ctx := context.Background()
	e := newEnv(b, 2, 2, 4) // shard 0 on s0 (cluster 0), s1 on cluster 1
	layout := e.placementLayout(b)
	seedBulkPhotos(b, e, layout, rows)
	var steps stepClock
	// The steps go to no log: a line written while the benchmark runs
	// splits its result line, which make figures reads.
	mv := e.mover(b, Config{hook: steps.hook, Logger: slog.New(slog.DiscardHandler)})
	var dump, copied, indexes time.Duration
	b.ResetTimer()
	for i := range b.N {
		from := e.placement(b, 0).Server
		fromIdx, toIdx, to := 0, 1, "s1"
		if from == "s1" {
			fromIdx, toIdx, to = 1, 0, "s0"
		}
		dumpOnce := func() {
			took, n := dumpRestore(b, e, layout, fromIdx, toIdx)
			if n < int64(rows) {
				b.Fatalf("pg_dump | psql restored %d photos of %d", n, rows)
			}
			dump += took
		}
		if i%2 == 0 {
			dumpOnce()
		}
		if _, err := mv.Move(ctx, 0, to, MoveOptions{}); err != nil {
			b.Fatal(err)
		}
		copied += steps.took(stepCopiedSnapshot)
		indexes += steps.took(stepIndexes)
		if i%2 == 1 {
			dumpOnce()
		}
		b.StopTimer()
		if _, err := mv.Complete(ctx, 0); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric((copied+indexes).Seconds()/dump.Seconds(), "x-pg_dump")
	b.ReportMetric(copied.Seconds()/n, "copy-s")
	b.ReportMetric(indexes.Seconds()/n, "indexes-s")
	b.ReportMetric(dump.Seconds()/n, "pg_dump-s")
	b.ReportMetric(0, "ns/op")
}
