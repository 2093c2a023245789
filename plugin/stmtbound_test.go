package plugin

import (
	"runtime/metrics"
	"testing"
	"time"
)

// goroutinesCreated is how many goroutines the process has started.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestOneShardStatementsStartNoGoroutine: a one-shard read under a
// context that cannot end is bounded by its connection, so that neither
// pgx nor database/sql starts a goroutine or a timer to watch it; the
// bound still holds (TestServerFrozen). A write in GORM's default
// transaction still has the one database/sql starts for a transaction.
func TestOneShardStatementsStartNoGoroutine(t *testing.T) {
	for _, c := range []struct {
		name     string
		prepared PreparedReads
	}{{"prepared", PreparedReadsDirect}, {"unnamed", PreparedReadsNever}} {
		t.Run(c.name, func(t *testing.T) {
			e, _, users := oneShardEnv(t, c.prepared, 4)
			var ids []int64
			for _, u := range users {
				p := Photo{UserID: u, Caption: "x"}
				if err := e.db.Create(&p).Error; err != nil {
					t.Fatal(err)
				}
				ids = append(ids, p.ID)
			}
			run := func() {
				for i, u := range users {
					var p Photo
					if err := e.db.Where("user_id = ?", u).Take(&p).Error; err != nil {
						t.Fatal(err)
					}
					if err := e.db.First(&p, ids[i]).Error; err != nil {
						t.Fatal(err)
					}
				}
			}
			run() // connections open, statements prepared
			const rounds = 50
			before, start := goroutinesCreated(), time.Now()
			for range rounds {
				run()
			}
			n := rounds * len(users) * 2
			if got := goroutinesCreated() - before; got > uint64(n/10) {
				t.Fatalf("%d goroutines started during %d one-shard statements (%v), want none per read", got, n, time.Since(start))
			}
		})
	}
}
