package plugin

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/router"
)

// copyBenchRows is the size of BenchmarkCopyFrom's load: 200 000 rows, or
// SHARDKIT_BENCH_COPY_ROWS (the README's figures use 1 000 000).
func copyBenchRows(b *testing.B) int {
	if v := os.Getenv("SHARDKIT_BENCH_COPY_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 2000 {
			b.Fatalf("SHARDKIT_BENCH_COPY_ROWS=%q: want an integer of at least 2000", v)
		}
		return n
	}
	return 200_000
}

// BenchmarkCopyFrom loads the same rows (2000 users' photos, in user order,
// as an export from an unsharded database lists them) three ways in each
// round (one round per b.N, each round starting with another way), tables
// emptied before each: CopyFrom into 2000 logical shards, the plugin's
// CreateInBatches (1000 rows a batch) into the same shards, and plain
// Postgres COPY (pgx CopyFrom, no plugin, no GORM) into one photos table
// of the same database. It reports each per row and, as the ratios to
// plain COPY, the median of the rounds' ratios.
//
//	SHARDKIT_BENCH_COPY_ROWS=1000000 go test ./plugin -run '^$' -bench BenchmarkCopyFrom -benchtime 3x
func BenchmarkCopyFrom(b *testing.B) {
	n := copyBenchRows(b)
	const users = 2000
	ctx := context.Background()
	e := newEnv(b, envOpts{shards: idgen.DefaultShards, one: true})
	dsn := e.dsn["a"]
	pgtest.Exec(b, dsn, plainPhotosDDL) // public.photos, next to the shard schemas
	conn := pgtest.Connect(b, dsn)

	shardTables := make([]string, e.shards)
	for s := range shardTables {
		shardTables[s] = pgx.Identifier{router.SchemaName(s), "photos"}.Sanitize()
	}
	truncate := "TRUNCATE " + strings.Join(shardTables, ", ") + ", public.photos"
	// No autovacuum on the loaded tables: a background vacuum or analyze
	// of 2000 tables that one round filled would land on the next.
	noVacuum := make([]string, 0, len(shardTables)+1)
	for _, t := range append(shardTables, "public.photos") {
		noVacuum = append(noVacuum, "ALTER TABLE "+t+" SET (autovacuum_enabled = false)")
	}
	if _, err := conn.Exec(ctx, strings.Join(noVacuum, "; ")); err != nil {
		b.Fatal(err)
	}
	empty := func() {
		if _, err := conn.Exec(ctx, truncate); err != nil {
			b.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
			b.Fatal(err)
		}
	}
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rows := func() []Photo {
		rs := make([]Photo, n)
		for i := range rs {
			rs[i] = Photo{UserID: int64(1 + i*users/n), Caption: "photo " + strconv.Itoa(i), Likes: i % 100, CreatedAt: created}
		}
		return rs
	}
	skipTx := e.db.Session(&gorm.Session{SkipDefaultTransaction: true})
	methods := []struct {
		name string
		run  func([]Photo) error
	}{
		{"copy_from", func(rs []Photo) error {
			_, err := CopyFrom(ctx, e.db, rs)
			return err
		}},
		{"create_in_batches", func(rs []Photo) error { return skipTx.CreateInBatches(&rs, 1000).Error }},
		{"plain_copy", func(rs []Photo) error {
			// The same rows with IDs, as a loader that composes its own
			// would send them.
			for i := range rs {
				rs[i].ID = int64(i + 1)
			}
			_, err := conn.CopyFrom(ctx, pgx.Identifier{"photos"}, []string{"id", "user_id", "caption", "likes", "created_at"},
				pgx.CopyFromSlice(len(rs), func(i int) ([]any, error) {
					p := &rs[i]
					return []any{p.ID, p.UserID, p.Caption, p.Likes, p.CreatedAt}, nil
				}))
			return err
		}},
	}
	// Untimed warm-up, as a long-running importer's steady state: a few
	// small loads touching every shard, so that the pools' connections
	// have opened the shards' tables (a connection's first write to a
	// table reads its catalog entries: about a millisecond per table).
	for _, m := range methods {
		for range 3 {
			empty()
			rs := rows()
			warm := make([]Photo, 0, 2*users)
			for i := 0; i < n; i += n / (2 * users) {
				warm = append(warm, rs[i])
			}
			if err := m.run(warm); err != nil {
				b.Fatalf("%s: %v", m.name, err)
			}
		}
	}
	took := make([]time.Duration, len(methods))
	var ratios [][2]float64
	b.ResetTimer()
	for i := range b.N {
		round := make([]time.Duration, len(methods))
		for k := range methods {
			k = (k + i) % len(methods) // each round starts with another method
			b.StopTimer()
			empty()
			rs := rows()
			b.StartTimer()
			t0 := time.Now()
			if err := methods[k].run(rs); err != nil {
				b.Fatalf("%s: %v", methods[k].name, err)
			}
			round[k] = time.Since(t0)
			took[k] += round[k]
		}
		ratios = append(ratios, [2]float64{float64(round[0]) / float64(round[2]), float64(round[1]) / float64(round[2])})
	}
	b.StopTimer()
	per := func(k int) float64 { return float64(took[k].Nanoseconds()) / float64(b.N) / float64(n) }
	ratio := func(k int) float64 { // the median of the rounds'
		v := make([]float64, len(ratios))
		for i, r := range ratios {
			v[i] = r[k]
		}
		return median(v)
	}
	var each []string
	for _, r := range ratios {
		each = append(each, fmt.Sprintf("%.2f", r[0]))
	}
	b.ReportMetric(per(0), "copy_from-ns/row")
	b.ReportMetric(per(1), "create_in_batches-ns/row")
	b.ReportMetric(per(2), "plain_copy-ns/row")
	b.ReportMetric(ratio(0), "copy/plain")
	b.ReportMetric(ratio(1), "batches/plain")
	// Logged, not printed: a line printed while the benchmark runs splits
	// its result line, which make figures reads.
	b.Logf("shardkit CopyFrom, %d rows into 2000 shards on one server (this run, %d rounds; ratio: median of the rounds'):\n"+
		"  CopyFrom           %6.2f s  %5.0f ns/row  %.2fx plain COPY\n"+
		"  CreateInBatches    %6.2f s  %5.0f ns/row  %.2fx plain COPY\n"+
		"  plain COPY         %6.2f s  %5.0f ns/row  (one table, same database)\n"+
		"  each round, CopyFrom / plain COPY: %s\n",
		n, b.N,
		per(0)*float64(n)/1e9, per(0), ratio(0),
		per(1)*float64(n)/1e9, per(1), ratio(1),
		per(2)*float64(n)/1e9, per(2), strings.Join(each, " "))
}
