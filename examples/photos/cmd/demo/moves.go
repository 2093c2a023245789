package main

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/shardkit/shardkit/examples/photos/app"
	"github.com/shardkit/shardkit/examples/photos/loadgen"
	"github.com/shardkit/shardkit/rebalance"
	"github.com/shardkit/shardkit/router"
)

// moveRun is the shard moves of the demo.
type moveRun struct {
	mover *rebalance.Mover
	done  []rebalance.Move
}

// moveShards adds the new server (when there is one) and moves o.moves
// logical shards onto it, o.parallel at a time, while the load runs. The
// shards are ones the load's users live on, taken in turn from each
// server, so every move has live writes.
func moveShards(ctx context.Context, o options, c cluster, cfg app.Config, a *app.App, runner *loadgen.Runner,
	say func(string, ...any), log *slog.Logger) (*moveRun, error) {
	target := ""
	if c.addServer != nil {
		t := time.Now()
		added, err := c.addServer(ctx)
		if err != nil {
			return nil, fmt.Errorf("add a server: %w", err)
		}
		say("started server %s in %s; registering it in the catalog", added.Name, time.Since(t).Round(time.Millisecond))
		t = time.Now()
		if err := provisionAdded(ctx, cfg, added, log); err != nil {
			return nil, err
		}
		target = added.Name
		say("added server %s (empty) in %s; moving %d shards onto it, %d at a time, while the load runs",
			target, time.Since(t).Round(time.Millisecond), o.moves, max(1, o.parallel))
	} else {
		target = c.servers[len(c.servers)-1].Name
		say("no new server ($%s unset): moving %d shards onto %s while the load runs", envNewServer, o.moves, target)
	}
	snap, err := a.Router.Reload(ctx)
	if err != nil {
		return nil, err
	}
	shards := pickShards(snap, runner.Users(), target, o.moves)
	mover, err := rebalance.New(rebalance.Config{Catalog: a.Router.Catalog(), Logger: log})
	if err != nil {
		return nil, err
	}
	run := &moveRun{mover: mover}
	runner.MarkWindow(true)
	defer runner.MarkWindow(false)
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
		sem   = make(chan struct{}, max(1, o.parallel))
	)
	for _, sh := range shards {
		wg.Add(1)
		go func(sh int) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			t := time.Now()
			m, err := mover.Move(ctx, sh, target, rebalance.MoveOptions{})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if first == nil {
					first = fmt.Errorf("move shard %d: %w", sh, err)
				}
				return
			}
			run.done = append(run.done, m)
			say("moved %s %s → %s in %s (writes fenced %.1f ms)", router.SchemaName(sh), m.Source, m.Target,
				time.Since(t).Round(time.Millisecond), float64(m.FencedFor)/float64(time.Millisecond))
		}(sh)
	}
	wg.Wait()
	sort.Slice(run.done, func(i, j int) bool { return run.done[i].Shard < run.done[j].Shard })
	if first != nil {
		mover.Close()
		return nil, first
	}
	return run, nil
}

// finish verifies each moved shard (row counts and checksums on both
// sides, the old side kept current by reverse replication) and completes
// the moves: the old schema, subscription, slot and publication go.
func (r *moveRun) finish(ctx context.Context, say func(string, ...any)) error {
	defer r.mover.Close()
	for i, m := range r.done {
		if err := waitVerify(ctx, r.mover, m.Shard); err != nil {
			return err
		}
		done, err := r.mover.Complete(ctx, m.Shard)
		if err != nil {
			return fmt.Errorf("complete the move of shard %d: %w", m.Shard, err)
		}
		r.done[i].State = done.State
	}
	say("verified and completed %d moves (old schemas, slots and publications removed)", len(r.done))
	return nil
}

// waitVerify retries a verification for a few seconds: reverse
// replication may still be applying the last writes.
func waitVerify(ctx context.Context, mv *rebalance.Mover, shard int) error {
	var err error
	for i := 0; i < 20; i++ {
		if _, err = mv.Verify(ctx, shard); err == nil {
			return nil
		}
		if serr := sleep(ctx, 250*time.Millisecond); serr != nil {
			return serr
		}
	}
	return fmt.Errorf("verify shard %d: %w", shard, err)
}

// pickShards chooses n shards to move to target: shards the load's users
// live on, in turn from each other server.
func pickShards(snap *router.Snapshot, users []string, target string, n int) []int {
	seen := map[int]bool{}
	byServer := map[string][]int{}
	for _, u := range users {
		id, err := strconv.ParseInt(u, 10, 64)
		if err != nil {
			continue
		}
		sh, err := snap.Layout.ShardOf(id)
		if err != nil || seen[sh] {
			continue
		}
		seen[sh] = true
		p, err := snap.Placement(sh)
		if err != nil || p.Server == target {
			continue
		}
		byServer[p.Server] = append(byServer[p.Server], sh)
	}
	var servers []string
	for s := range byServer {
		servers = append(servers, s)
	}
	sort.Strings(servers)
	var out []int
	for len(out) < n {
		took := false
		for _, s := range servers {
			if len(byServer[s]) > 0 && len(out) < n {
				out = append(out, byServer[s][0])
				byServer[s] = byServer[s][1:]
				took = true
			}
		}
		if !took {
			break
		}
	}
	return out
}
