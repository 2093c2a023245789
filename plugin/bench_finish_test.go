package plugin

import (
	"fmt"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/shardkit/shardkit/router"
)

// BenchmarkFinishInPostgres: reads of all 2000 shards on two servers
// whose merge Go cannot make exact, finished by one server in one more
// statement (read_merge_coll.go, read_merge_agg_final.go), each paired in every iteration
// with the nearest read Go merges alone, so that the ratio comes from one
// run on one machine:
//
//   - text_order: ORDER BY the caption (ICU collation) LIMIT 50, the
//     candidates ordered in Postgres, against ORDER BY id LIMIT 50;
//
//   - having: GROUP BY likes with HAVING count(*) > 0 (every group
//     passes: the same rows), the partial groups finished in Postgres,
//     against the same GROUP BY without HAVING, combined in Go;
//
//   - count_distinct: count(DISTINCT likes) (each shard's groups by likes,
//     counted in Postgres) against count(*) (added up in Go).
//
//     go test ./plugin -run '^$' -bench BenchmarkFinishInPostgres -benchtime 20x -count 3
func BenchmarkFinishInPostgres(b *testing.B) {
	const shards, perShard = 2000, 5
	e := newEnv(b, envOpts{shards: shards, noIDs: true, before: func(e *env) { icuCaptions(b, e, e.servers...) }})
	layout := e.r.Snapshot().Layout
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli() - layout.EpochMs
	snap := e.r.Snapshot()
	for s := 0; s < shards; s++ {
		pl, _ := snap.Placement(s)
		e.rawExec(b, pl.Server, fmt.Sprintf(`INSERT INTO %s.photos (id, user_id, caption, likes)
SELECT ((%d::bigint + g) << 23) | (%d::bigint << 10) | 1, %d::bigint + 2000 * g, (ARRAY['b', 'A', 'é', 'a', 'C'])[1 + (g + %d) %% 5] || g, g %% 7
FROM generate_series(1, %d) AS g`, router.SchemaName(s), base, s, s, s, perShard))
	}
	for _, name := range e.servers {
		e.rawExec(b, name, "ANALYZE")
	}
	all := e.db.Clauses(AllShards()).Session(&gorm.Session{}) // reusable: each read starts from this statement
	pairs := []struct {
		name         string
		finish, inGo func() error
	}{
		{"text_order", func() error {
			var ps []Photo
			return all.Order("caption, id").Limit(50).Find(&ps).Error
		}, func() error {
			var ps []Photo
			return all.Order("id").Limit(50).Find(&ps).Error
		}},
		{"having", func() error {
			var rows []map[string]any
			return all.Model(&Photo{}).Select("likes, count(*) AS n, sum(user_id) AS s").Group("likes").Having("count(*) > ?", 0).Order("likes").Find(&rows).Error
		}, func() error {
			var rows []map[string]any
			return all.Model(&Photo{}).Select("likes, count(*) AS n, sum(user_id) AS s").Group("likes").Order("likes").Find(&rows).Error
		}},
		{"count_distinct", func() error {
			var n int64
			return all.Model(&Photo{}).Select("count(distinct likes)").Find(&n).Error
		}, func() error {
			var n int64
			return all.Model(&Photo{}).Count(&n).Error
		}},
	}
	for _, pr := range pairs {
		b.Run(pr.name, func(b *testing.B) {
			for range 3 { // warm: connections and prepared statements
				if err := pr.finish(); err != nil {
					b.Fatal(err)
				}
				if err := pr.inGo(); err != nil {
					b.Fatal(err)
				}
			}
			var tf, tg time.Duration
			for b.Loop() {
				t0 := time.Now()
				if err := pr.finish(); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := pr.inGo(); err != nil {
					b.Fatal(err)
				}
				tf, tg = tf+t1.Sub(t0), tg+time.Since(t1)
			}
			b.ReportMetric(float64(tf.Microseconds())/float64(b.N), "in-postgres-µs/op")
			b.ReportMetric(float64(tg.Microseconds())/float64(b.N), "in-go-µs/op")
			b.ReportMetric(float64(tf)/float64(tg), "ratio")
		})
	}
}
