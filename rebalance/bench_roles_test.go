package rebalance

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql's "pgx" driver

	"github.com/shardkit/shardkit/internal/harness/shardtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest/photos"
	"github.com/shardkit/shardkit/plugin"
	"github.com/shardkit/shardkit/router"
)

// BenchmarkOneShardReadRole is the cost of the application role on the
// one-shard read: the same read by key through the plugin, as the
// application role (privileges checked, the read guarantee of a move)
// and as the superuser (never checked), back to back in each iteration,
// each side first half the time, so that load from elsewhere hits both
// alike.
//
//	go test ./rebalance -run '^$' -bench BenchmarkOneShardReadRole -benchtime 5000x
func BenchmarkOneShardReadRole(b *testing.B) {
	e := newAppEnv(b, 2, 2, 4)
	for s := range 4 {
		seedPhotos(b, e, s, 1000)
	}
	open := func(super bool) func(dsn string) (*sql.DB, error) {
		return func(dsn string) (*sql.DB, error) {
			if super {
				dsn = strings.Replace(dsn, shardtest.AppLogin+"@", "postgres@", 1)
			}
			return sql.Open("pgx", dsn)
		}
	}
	r, err := router.New(context.Background(), e.cat)
	if err != nil {
		b.Fatal(err)
	}
	app := newPluginDB(b, e, r, plugin.Config{OpenDB: open(false)}, &photos.Photo{})
	super := newPluginDB(b, e, r, plugin.Config{OpenDB: open(true)}, &photos.Photo{})
	// Per-iteration times, compared by their medians: a stall of the
	// shared machine lands on one side of one iteration, and moves a
	// median little where it would move a mean a lot.
	ta, ts := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		user := int64(i % 4)
		var p photos.Photo
		first, second, d1, d2 := app, super, &ta, &ts
		if i%2 == 1 { // each side goes first half the time
			first, second, d1, d2 = super, app, &ts, &ta
		}
		t0 := time.Now()
		if err := first.Where("user_id = ?", user).Take(&p).Error; err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := second.Where("user_id = ?", user).Take(&p).Error; err != nil {
			b.Fatal(err)
		}
		*d1, *d2 = append(*d1, t1.Sub(t0)), append(*d2, time.Since(t1))
	}
	ma, ms := median(ta), median(ts)
	b.ReportMetric(float64(ma.Nanoseconds()), "app-median-ns")
	b.ReportMetric(float64(ms.Nanoseconds()), "superuser-median-ns")
	b.ReportMetric(float64(ma)/float64(ms), "ratio")
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	d = slices.Clone(d)
	slices.Sort(d)
	return d[len(d)/2]
}
