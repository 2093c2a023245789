package plugin

import (
	"runtime"
	"slices"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
)

// BenchmarkRoutingOverhead measures what the plugin adds to building a
// statement: each operation runs in DryRun (built and routed, not sent)
// through the plugin on a 64-shard map and through plain GORM, the two
// sides in alternating blocks of pairBlock statements, and reports the
// difference per statement by the process's CPU time (which leaves out
// time spent waiting for a core on a busy machine) and by the clock. The
// statements are the same on both sides (the insert gives plain GORM the
// ID the plugin would fill in); the last operation is on a table the
// plugin does not shard. It also reports the difference in heap
// allocations per statement, counted outside the timed blocks.
//
//	go test ./plugin -run '^$' -bench BenchmarkRoutingOverhead -benchtime 200000x -count 5
func BenchmarkRoutingOverhead(b *testing.B) {
	e := newEnv(b, envOpts{shards: 64})
	plainDSN := pgtest.NewDatabase(b, 0)
	pgtest.Exec(b, plainDSN, plainPhotosDDL)
	plain, err := gorm.Open(postgres.Open(plainDSN), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		b.Fatal(err)
	}
	sd := e.db.Session(&gorm.Session{DryRun: true, SkipDefaultTransaction: true})
	pd := plain.Session(&gorm.Session{DryRun: true, SkipDefaultTransaction: true})
	const users = 1000
	ids := make([]int64, users)
	for i := range ids {
		p := Photo{UserID: int64(i + 1), Caption: "x"}
		if err := e.db.Create(&p).Error; err != nil {
			b.Fatal(err)
		}
		ids[i] = p.ID
	}
	ops := []struct {
		name string
		fn   func(db *gorm.DB, i int) error
	}{
		{"select_by_key", func(db *gorm.DB, i int) error { var p Photo; return db.Where("user_id = ?", i+1).Take(&p).Error }},
		{"select_by_id", func(db *gorm.DB, i int) error { var p Photo; return db.First(&p, ids[i]).Error }},
		{"update_by_id", func(db *gorm.DB, i int) error { return db.Model(&Photo{ID: ids[i]}).Update("caption", "u").Error }},
		{"insert_one", func(db *gorm.DB, i int) error {
			return db.Create(&Photo{ID: ids[i], UserID: int64(i + 1), Caption: "one"}).Error
		}},
		// A table the plugin does not shard: it must cost nothing.
		{"unsharded_table", func(db *gorm.DB, i int) error { var s routingSetting; return db.First(&s, i+1).Error }},
	}
	for _, o := range ops {
		b.Run(o.name, func(b *testing.B) {
			var ws, wp, cs, cp time.Duration
			var diffs []time.Duration // per pair of blocks, sharded minus plain
			var allocs [2]uint64      // heap objects, sharded and plain
			run := func(db *gorm.DB, i int) (time.Duration, time.Duration) {
				a0 := heapObjects()
				w0, c0 := time.Now(), processCPU()
				for j := i; j < i+pairBlock; j++ {
					if err := o.fn(db, j%users); err != nil {
						b.Fatal(err)
					}
				}
				w, c := time.Since(w0), processCPU()-c0
				side := 0
				if db == pd {
					side = 1
				}
				allocs[side] += heapObjects() - a0
				return w, c
			}
			n := 0
			for i := 0; i < b.N; i += pairBlock {
				// Which side goes first alternates, so neither always
				// runs on the caches the other left behind.
				var w1, c1, w2, c2 time.Duration
				if (i/pairBlock)%2 == 0 {
					w1, c1 = run(sd, i)
					w2, c2 = run(pd, i)
				} else {
					w2, c2 = run(pd, i)
					w1, c1 = run(sd, i)
				}
				ws, wp, cs, cp = ws+w1, wp+w2, cs+c1, cp+c2
				diffs = append(diffs, w1-w2)
				n += pairBlock
			}
			f := float64(n)
			slices.Sort(diffs)
			b.ReportMetric(float64(cp.Nanoseconds())/f, "plain-cpu-ns/op")
			b.ReportMetric(float64((cs-cp).Nanoseconds())/f, "overhead-cpu-ns/op")
			b.ReportMetric(float64(wp.Nanoseconds())/f, "plain-ns/op")
			b.ReportMetric(float64((ws-wp).Nanoseconds())/f, "overhead-ns/op")
			// The median pair: a block that another process's time slice
			// or a garbage collection landed in does not move it.
			b.ReportMetric(float64(diffs[len(diffs)/2].Nanoseconds())/pairBlock, "overhead-median-ns/op")
			b.ReportMetric((float64(allocs[0])-float64(allocs[1]))/f, "overhead-allocs/op")
		})
	}
}

// routingSetting is a model the plugin is not given: its statements pass
// through.
type routingSetting struct {
	ID    int64
	Value string
}

// heapObjects is how many heap objects the process has allocated so far.
// runtime.ReadMemStats stops the world, but it is exact (runtime/metrics
// counts per-P caches only when they are flushed), and it runs outside the
// timed blocks.
func heapObjects() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}
