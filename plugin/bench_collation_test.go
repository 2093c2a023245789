package plugin

import (
	"testing"
	"time"
)

// BenchmarkTextOrder: a read across 64 shards on two servers ordered by a
// text column in an ICU collation, whose merged rows are ordered in
// Postgres (one more round trip), against the same read ordered by the
// ID, merged in Go.
//
//	go test ./plugin -run '^$' -bench BenchmarkTextOrder -benchtime 200x
func BenchmarkTextOrder(b *testing.B) {
	e := newEnv(b, envOpts{shards: 64, before: func(e *env) { icuCaptions(b, e, e.servers...) }})
	var rows []Photo
	for i := range 64 * 20 {
		rows = append(rows, Photo{UserID: int64(i%64 + 1), Caption: string(rune('a'+i%26)) + "x" + string(rune('A'+i%7))})
	}
	if err := e.db.Create(&rows).Error; err != nil {
		b.Fatal(err)
	}
	read := func(order string) error {
		var ps []Photo
		return e.db.Clauses(AllShards()).Order(order).Limit(50).Find(&ps).Error
	}
	for range 5 {
		_, _ = read("caption, id"), read("id")
	}
	var tc, ti time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := read("caption, id"); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := read("id"); err != nil {
			b.Fatal(err)
		}
		tc, ti = tc+t1.Sub(t0), ti+time.Since(t1)
	}
	b.ReportMetric(float64(tc.Microseconds())/float64(b.N), "by-text-µs/op")
	b.ReportMetric(float64(ti.Microseconds())/float64(b.N), "by-id-µs/op")
	b.ReportMetric(float64(tc)/float64(ti), "ratio")
}
