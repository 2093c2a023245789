package plugin

import (
	"context"
	"fmt"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/internal/pgtest"
	"github.com/shardkit/shardkit/router"
)

// BenchmarkScatter: reads of all 2000 shards on four servers (four
// databases on the two test clusters), each paired in every iteration
// with the same query on one unsharded table holding the same rows, so
// that the ratio is read from one run on one machine. perShard is the
// same read sent as one statement per shard.
//
//	go test ./plugin -run '^$' -bench BenchmarkScatter -benchtime 40x
func BenchmarkScatter(b *testing.B) {
	const shards, perShard = 2000, 20
	e := newEnv(b, envOpts{shards: shards, four: true, noIDs: true})
	ctx := context.Background()
	layout := e.r.Snapshot().Layout
	// Seed: perShard rows in each shard (users shard+2000k), IDs composed
	// as the plugin would; the plain table gets the same rows.
	const rowsSQL = `SELECT ((%d::bigint + g) << 23) | (%d::bigint << 10) | 1, %d::bigint + 2000 * g, 'c' || g, g %% 7
FROM generate_series(1, %d) AS g`
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli() - layout.EpochMs
	snap := e.r.Snapshot()
	for s := 0; s < shards; s++ {
		pl, _ := snap.Placement(s)
		e.rawExec(b, pl.Server, fmt.Sprintf("INSERT INTO %s.photos (id, user_id, caption, likes) "+rowsSQL, router.SchemaName(s), base, s, s, perShard))
	}
	for _, name := range e.servers {
		e.rawExec(b, name, "ANALYZE")
	}
	plainDSN := pgtest.NewDatabase(b, 0)
	pgtest.Exec(b, plainDSN, `CREATE TABLE photos (id bigint PRIMARY KEY, user_id bigint NOT NULL, caption text NOT NULL DEFAULT '',
		likes integer NOT NULL DEFAULT 0, created_at timestamptz NOT NULL DEFAULT now());
		CREATE INDEX photos_user_id ON photos (user_id, id DESC)`)
	pgtest.Exec(b, plainDSN, fmt.Sprintf(`INSERT INTO photos (id, user_id, caption, likes)
		SELECT ((%d::bigint + g) << 23) | (s::bigint << 10) | 1, s + 2000 * g, 'c' || g, g %% 7
		FROM generate_series(0, %d) AS s, generate_series(1, %d) AS g; ANALYZE photos`, base, shards-1, perShard))
	plain, err := gorm.Open(postgres.Open(plainDSN), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		b.Fatal(err)
	}
	reads := []struct {
		name string
		fn   func(db *gorm.DB) error
	}{
		{"order_by_id_desc_limit_50", func(db *gorm.DB) error {
			var ps []Photo
			if err := db.Order("id desc").Limit(50).Find(&ps).Error; err != nil {
				return err
			}
			if len(ps) != 50 {
				return fmt.Errorf("%d rows", len(ps))
			}
			return nil
		}},
		{"count", func(db *gorm.DB) error {
			var n int64
			if err := db.Model(&Photo{}).Count(&n).Error; err != nil {
				return err
			}
			if n != shards*perShard {
				return fmt.Errorf("count %d", n)
			}
			return nil
		}},
	}
	all := e.db.Clauses(AllShards()).Session(&gorm.Session{}) // reusable: each read starts from this statement
	// The first read of a fresh plugin (new pools: connections and
	// prepared statements made on the way) against a warm one.
	for _, r := range reads {
		fresh, err := gorm.Open(postgres.Open(e.def), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
		if err != nil {
			b.Fatal(err)
		}
		pl := Register(Config{Router: e.r}, &Photo{}, &Like{}, &Album{})
		t0 := time.Now()
		if err := fresh.Use(pl); err != nil {
			b.Fatal(err)
		}
		startup := time.Since(t0)
		t0 = time.Now()
		if err := r.fn(fresh.Clauses(AllShards())); err != nil {
			b.Fatal(err)
		}
		first := time.Since(t0)
		t0 = time.Now()
		for range 5 {
			if err := r.fn(fresh.Clauses(AllShards())); err != nil {
				b.Fatal(err)
			}
		}
		warm := time.Since(t0) / 5
		_ = pl.Close()
		b.Logf("%s: first read of a fresh plugin %v, warm %v (%.1fx); its start-up (Use, warm-up included) took %v",
			r.name, first, warm, float64(first)/float64(warm), startup)
	}
	for _, r := range reads {
		for _, mode := range []struct {
			name  string
			batch int
		}{{"union_25", 25}, {"union_100", 100}, {"union_500", 500}, {"per_shard", 1}} {
			unionShards = mode.batch
			for range 3 {
				_ = r.fn(all)
				_ = r.fn(plain)
			}
			b.Run(r.name+"/"+mode.name, func(b *testing.B) {
				var ts, tp time.Duration
				for i := 0; i < b.N; i++ {
					t0 := time.Now()
					if err := r.fn(all); err != nil {
						b.Fatal(err)
					}
					t1 := time.Now()
					if err := r.fn(plain); err != nil {
						b.Fatal(err)
					}
					ts, tp = ts+t1.Sub(t0), tp+time.Since(t1)
				}
				b.ReportMetric(float64(ts.Microseconds())/float64(b.N), "sharded-µs/op")
				b.ReportMetric(float64(tp.Microseconds())/float64(b.N), "plain-µs/op")
				b.ReportMetric(float64(ts)/float64(tp), "ratio")
			})
		}
	}
	unionShards = unionBatch
	_ = ctx
}
