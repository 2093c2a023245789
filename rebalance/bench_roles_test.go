package rebalance

import (
	"context"
	"database/sql"
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
	var ta, ts time.Duration
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
		*d1, *d2 = *d1+t1.Sub(t0), *d2+time.Since(t1)
	}
	n := float64(b.N)
	b.ReportMetric(float64(ta.Nanoseconds())/n, "app-ns/op")
	b.ReportMetric(float64(ts.Nanoseconds())/n, "superuser-ns/op")
	b.ReportMetric(float64(ta)/float64(ts), "ratio")
}
