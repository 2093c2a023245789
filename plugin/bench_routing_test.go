package plugin

import (
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/internal/pgtest"
)

// BenchmarkRoutingOverhead measures what the plugin adds to building a
// statement: each operation runs in DryRun (built and routed, not sent)
// through the plugin on a 64-shard map and through plain GORM, the two
// sides in alternating blocks of pairBlock statements, and reports the
// difference per statement by the process's CPU time (which leaves out
// time spent waiting for a core on a busy machine) and by the clock. The
// statements are the same on both sides (the insert gives plain GORM the
// ID the plugin would fill in).
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
	}
	for _, o := range ops {
		b.Run(o.name, func(b *testing.B) {
			var ws, wp, cs, cp time.Duration
			n := 0
			for i := 0; i < b.N; i += pairBlock {
				w0, c0 := time.Now(), processCPU()
				for j := i; j < i+pairBlock; j++ {
					if err := o.fn(sd, j%users); err != nil {
						b.Fatal(err)
					}
				}
				w1, c1 := time.Now(), processCPU()
				for j := i; j < i+pairBlock; j++ {
					if err := o.fn(pd, j%users); err != nil {
						b.Fatal(err)
					}
				}
				ws, wp = ws+w1.Sub(w0), wp+time.Since(w1)
				cs, cp = cs+c1-c0, cp+processCPU()-c1
				n += pairBlock
			}
			f := float64(n)
			b.ReportMetric(float64(cp.Nanoseconds())/f, "plain-cpu-ns/op")
			b.ReportMetric(float64((cs-cp).Nanoseconds())/f, "overhead-cpu-ns/op")
			b.ReportMetric(float64(wp.Nanoseconds())/f, "plain-ns/op")
			b.ReportMetric(float64((ws-wp).Nanoseconds())/f, "overhead-ns/op")
		})
	}
}
