package idgen_test

import (
	"context"
	"fmt"

	"github.com/shardkit/shardkit/idgen"
)

func ExampleLayout_Decode() {
	l := idgen.DefaultLayout()
	p, err := l.Decode(3236157012032418823)
	if err != nil {
		panic(err)
	}
	fmt.Println(p.Time.Format("2006-01-02T15:04:05.000Z07:00"), "shard", p.Shard, "seq", p.Seq, "slot", p.Slot, "counter", p.Counter)
	// Output: 2023-11-14T22:13:20.000Z shard 1341 seq 7 slot 7 counter 0
}

func ExampleLayout_Compose() {
	l := idgen.DefaultLayout()
	id, err := l.Compose(1700000000000, 1341, l.SeqOf(3, 12))
	if err != nil {
		panic(err)
	}
	shard, _ := l.ShardOf(id)
	fmt.Println(id, shard)
	// Output: 3236157012032419020 1341
}

func ExampleGenerator() {
	ctx := context.Background()
	// A single process may use a fixed slot; services lease one from the
	// catalog with catalog.StartGenerator.
	g, stop, err := idgen.Start(ctx, idgen.DefaultLayout(), idgen.StaticLeaser{Slot: 1}, idgen.Config{})
	if err != nil {
		panic(err)
	}
	defer stop()
	id, err := g.Next(ctx, 1341)
	if err != nil {
		panic(err)
	}
	p, _ := g.Layout().Decode(id)
	fmt.Println(p.Shard, p.Slot)
	// Output: 1341 1
}

// ShardOf reads only the shard bits: what a router needs to send a read by
// ID to its shard.
func ExampleLayout_ShardOf() {
	l := idgen.DefaultLayout()
	shard, err := l.ShardOf(3236157012032419020)
	if err != nil {
		panic(err)
	}
	fmt.Println(shard)
	// Output: 1341
}

// NextN issues a run of IDs for one shard, as a batch insert of one
// user's rows needs.
func ExampleGenerator_NextN() {
	ctx := context.Background()
	g, stop, err := idgen.Start(ctx, idgen.DefaultLayout(), idgen.StaticLeaser{Slot: 1}, idgen.Config{})
	if err != nil {
		panic(err)
	}
	defer stop()
	ids, err := g.NextN(ctx, 42, 100)
	if err != nil {
		panic(err)
	}
	first, _ := g.Layout().Decode(ids[0])
	fmt.Println(len(ids), first.Shard)
	// Output: 100 42
}

// Fill fills a slice with IDs of one shard; for bulk work on one shard a
// generator made by Start leases extra slots as the work runs ahead of the
// clock.
func ExampleGenerator_Fill() {
	ctx := context.Background()
	g, stop, err := idgen.Start(ctx, idgen.DefaultLayout(), idgen.StaticLeaser{Slot: 1}, idgen.Config{})
	if err != nil {
		panic(err)
	}
	defer stop()
	ids := make([]int64, 1000)
	if err := g.Fill(ctx, 7, ids); err != nil {
		panic(err)
	}
	shard, _ := g.Layout().ShardOf(ids[999])
	fmt.Println(shard)
	// Output: 7
}
