package relay

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"

	"github.com/shardkit/shardkit/router"
)

// BenchmarkFanOut measures one map change reaching routers through a
// relay: each op is a new version given to the relay's router and the
// wait until every router (each with its own client, as in a process of
// its own) has installed it. Reported per router: the CPU of a host's
// relay and its routers for one change, all in this process.
func BenchmarkFanOut(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("routers=%d", n), func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			snap := testSnapshot(b, 1, 2000)
			src, err := router.NewFixed(snap)
			if err != nil {
				b.Fatal(err)
			}
			s := NewServer(src, testCatalogID)
			go func() { _ = s.Run(ctx) }()
			l, err := net.Listen("unix", filepath.Join(b.TempDir(), "relay.sock"))
			if err != nil {
				b.Fatal(err)
			}
			go func() { _ = s.Serve(ctx, l) }()
			installed := make(chan int64, n)
			for range n {
				c := Dial(l.Addr().String())
				r, err := router.New(ctx, c)
				if err != nil {
					b.Fatal(err)
				}
				updates, _ := r.Subscribe()
				go func() {
					for u := range updates {
						installed <- u.Version
					}
				}()
				go func() { _ = r.WatchWith(ctx, router.WatchOptions{Listen: true}) }()
			}
			b.ResetTimer()
			cur := snap
			for i := range b.N {
				ps := cur.Placements()
				p := ps[i%len(ps)]
				p.State = map[router.ShardState]router.ShardState{router.StateActive: router.StateMoving, router.StateMoving: router.StateActive}[p.State]
				next, err := cur.Next(cur.Version+1, cur.Servers(), []router.Placement{p})
				if err != nil {
					b.Fatal(err)
				}
				src.Set(next)
				cur = next
				for got := 0; got < n; {
					if <-installed == next.Version {
						got++
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(n), "µs/router")
		})
	}
}
