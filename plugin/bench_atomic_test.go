package plugin

import (
	"testing"
	"time"

	"gorm.io/gorm"
)

// BenchmarkAtomic measures a two-shard atomic transaction (one photo on a
// shard of server a, one on a shard of server b: decision row, PREPARE,
// COMMIT, COMMIT PREPARED) against the same two writes as two one-shard
// transactions. Both run back to back in each iteration, so that load
// from elsewhere on a shared machine hits both alike; the metrics are the
// mean of each and their ratio. Commit costs mean something only on
// durable clusters:
//
//	SHARDKIT_PG_DURABLE=1 go test ./plugin -run '^$' -bench BenchmarkAtomic -benchtime 2000x
func BenchmarkAtomic(b *testing.B) {
	e := newEnv(b, envOpts{})
	ua, ub := e.userOn(b, "a", 1), e.userOn(b, "b", 1)
	atomicTx := func() error {
		return e.db.Clauses(Atomic()).Transaction(func(tx *gorm.DB) error {
			if err := tx.Create(&Photo{UserID: ua}).Error; err != nil {
				return err
			}
			return tx.Create(&Photo{UserID: ub}).Error
		})
	}
	twoTxs := func() error {
		for _, u := range []int64{ua, ub} {
			err := e.db.Clauses(Shard(u)).Transaction(func(tx *gorm.DB) error { return tx.Create(&Photo{UserID: u}).Error })
			if err != nil {
				return err
			}
		}
		return nil
	}
	for range warmRounds {
		if err := atomicTx(); err != nil {
			b.Fatal(err)
		}
		if err := twoTxs(); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	var ta, tt time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := atomicTx(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := twoTxs(); err != nil {
			b.Fatal(err)
		}
		ta, tt = ta+t1.Sub(t0), tt+time.Since(t1)
	}
	b.ReportMetric(float64(ta.Nanoseconds())/float64(b.N), "ns/atomic")
	b.ReportMetric(float64(tt.Nanoseconds())/float64(b.N), "ns/two-txs")
	b.ReportMetric(float64(ta)/float64(tt), "atomic/two-txs")
}
