package idgen

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func benchGenerator(b *testing.B) *Generator {
	b.Helper()
	l, _ := StaticLeaser{Slot: 1}.Acquire(context.Background())
	g, err := New(DefaultLayout(), l, Config{})
	if err != nil {
		b.Fatal(err)
	}
	return g
}

// randomShards is a precomputed sequence of shards, so the benchmark
// measures Next and not the random number generator.
func randomShards(n int) []int {
	r := rand.New(rand.NewPCG(1, 2))
	s := make([]int, n)
	for i := range s {
		s[i] = r.IntN(DefaultShards)
	}
	return s
}

func BenchmarkNext(b *testing.B) {
	g := benchGenerator(b)
	ctx := context.Background()
	shards := randomShards(1 << 16)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := g.Next(ctx, shards[i&(len(shards)-1)]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkNextParallel(b *testing.B) {
	g := benchGenerator(b)
	ctx := context.Background()
	shards := randomShards(1 << 16)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := rand.IntN(len(shards))
		for pb.Next() {
			if _, err := g.Next(ctx, shards[i&(len(shards)-1)]); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}

// BenchmarkNextOneShard is the worst case: every call on the same shard,
// so the slot's 16 IDs per ms are borrowed ahead and then waited for.
func BenchmarkNextOneShard(b *testing.B) {
	g := benchGenerator(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Next(ctx, 7); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFill is a batch insert's IDs for one user: n IDs on one
// random shard of 2000. Both sizes outrun a slot's quota (16 IDs per ms
// per shard: 32M IDs/s over 2000 shards), so ns/id measures that limit,
// about 31 ns/id, plus the code, not the code alone.
func BenchmarkFill(b *testing.B) {
	for _, n := range []int{16, 100} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			g := benchGenerator(b)
			ctx := context.Background()
			shards := randomShards(1 << 16)
			ids := make([]int64, n)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if err := g.Fill(ctx, shards[i&(len(shards)-1)], ids); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/id")
		})
	}
}

var sink int64

// BenchmarkClockRead is the floor under Next: one monotonic clock read,
// as Next's fast path does. Compare Next with it from the same run.
func BenchmarkClockRead(b *testing.B) {
	for b.Loop() {
		sink += int64(time.Since(monoBase))
	}
}

func BenchmarkDecode(b *testing.B) {
	l := DefaultLayout()
	id := int64(3236157012032418823)
	b.ReportAllocs()
	for b.Loop() {
		p, err := l.Decode(id)
		if err != nil || p.Shard != 1341 {
			b.Fatal(p, err)
		}
	}
}

func BenchmarkCompose(b *testing.B) {
	l := DefaultLayout()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.Compose(1700000000000, 1341, 7); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFillOneShard is bulk work on one shard from one process:
// Fills of 1024 IDs on the same shard by a generator under Start, with an
// in-memory leaser of 63 slots. slots=1 keeps the generator to its own
// slot (Config.BulkSlots 1); slots=20 is the default, which leases 19
// extra slots. The slots are leased and the 100 ms borrow allowance used
// up before the timer starts, so ids/ms is the sustained rate.
func BenchmarkFillOneShard(b *testing.B) {
	for _, slots := range []int{1, DefaultBulkSlots} {
		b.Run(fmt.Sprintf("slots=%d", slots), func(b *testing.B) {
			ctx := context.Background()
			g, stop, err := Start(ctx, DefaultLayout(), newPoolLeaser(63), Config{BulkSlots: slots})
			if err != nil {
				b.Fatal(err)
			}
			defer stop()
			ids := make([]int64, 1024)
			for len(g.Slots()) < slots {
				if err := g.Fill(ctx, 7, ids); err != nil {
					b.Fatal(err)
				}
			}
			for start := time.Now(); time.Since(start) < 2*DefaultMaxBorrow; {
				if err := g.Fill(ctx, 7, ids); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if err := g.Fill(ctx, 7, ids); err != nil {
					b.Fatal(err)
				}
			}
			n := float64(b.N * len(ids))
			b.ReportMetric(n/(float64(b.Elapsed().Nanoseconds())/1e6), "ids/ms")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/id")
		})
	}
}

// BenchmarkNextLeaseBits is Next on random shards of 2000 under leases of
// 6 (a whole slot), 8 and 10 bits: 16, 4 and 1 IDs per ms per shard, so
// at most 32M, 8M and 2M IDs/s over 2000 shards. Past that rate ns/op
// measures the lease's share of the ID space, not the code.
func BenchmarkNextLeaseBits(b *testing.B) {
	for _, bits := range []uint8{6, 8, 10} {
		b.Run(fmt.Sprintf("bits=%d", bits), func(b *testing.B) {
			l := NewLease(1, 0, "bench", 0, farFuture, math.MaxInt64)
			l.Bits = bits
			g, err := New(DefaultLayout(), l, Config{})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			shards := randomShards(1 << 16)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := g.Next(ctx, shards[i&(len(shards)-1)]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "M_ids/s")
		})
	}
}
