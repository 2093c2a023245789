package plugin

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrentCreateReadUpdate runs goroutines that create, read and
// update rows across shards at once (run with -race).
func TestConcurrentCreateReadUpdate(t *testing.T) {
	e := newEnv(t, envOpts{})
	const workers = 8
	stop := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	var ops atomic.Int64
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for time.Now().Before(stop) {
				user := int64(r.IntN(200) + 1)
				p := Photo{UserID: user, Caption: "race"}
				if err := e.db.Create(&p).Error; err != nil {
					errs <- fmt.Errorf("create: %w", err)
					return
				}
				var got Photo
				if err := e.db.First(&got, p.ID).Error; err != nil || got.UserID != user {
					errs <- fmt.Errorf("read %d: %v (user %d)", p.ID, err, got.UserID)
					return
				}
				caption := fmt.Sprintf("w%d", w)
				if err := e.db.Model(&got).Update("caption", caption).Error; err != nil {
					errs <- fmt.Errorf("update: %w", err)
					return
				}
				var mine []Photo
				if err := e.db.Where("user_id IN ?", []int64{user, user + 1}).Find(&mine).Error; err != nil {
					errs <- fmt.Errorf("find: %w", err)
					return
				}
				batch := []Photo{{UserID: user}, {UserID: user + 3}, {UserID: user + 7}}
				if err := e.db.Create(&batch).Error; err != nil {
					errs <- fmt.Errorf("batch: %w", err)
					return
				}
				ops.Add(5)
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var n int64
	if err := e.db.Model(&Photo{}).Clauses(AllShards()).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d operations, %d photos", ops.Load(), n)
	if n == 0 || ops.Load() == 0 {
		t.Fatal("nothing ran")
	}
	e.defaultUntouched(t)
}
