package main

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/shardkit/shardkit/catalog"
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

// moveShards adds the new server (when there is one) and rebalances onto
// it while the load runs: rebalance.Plan by rows, capped at o.moves moves,
// executed o.parallel at a time by Mover.Rebalance. The moves stay
// reversible until finish.
// The moves are the operator's (op): the service's role may neither read
// the admin DSNs nor write the map.
func moveShards(ctx context.Context, o options, c cluster, cfg app.Config, op *catalog.Catalog, a *app.App, runner *loadgen.Runner,
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
		say("registered server %s in %s; rebalancing onto it while the load runs", target, time.Since(t).Round(time.Millisecond))
	} else {
		target = c.servers[len(c.servers)-1].Name
		say("no new server ($%s unset): moving shards from %s onto %s while the load runs", envNewServer, c.servers[0].Name, target)
	}
	started := time.Now()
	// Every step, Verify and Complete are bounded: on a stuck server the
	// demo stops with an error that says what it waited for.
	mover, err := rebalance.New(rebalance.Config{Catalog: op, Logger: log, StepTimeout: 3 * time.Minute})
	if err != nil {
		return nil, err
	}
	run := &moveRun{mover: mover}
	// Plan by rows: the greedy planner moves the biggest shards first,
	// which are the load's busiest ones.
	sizes, err := mover.Sizes(ctx, rebalance.ByRows)
	if err != nil {
		mover.Close()
		return nil, err
	}
	// Read the map from the catalog: registering a server does not bump the
	// map version, so the router's snapshot may not list the new one yet.
	snap, err := op.Load(ctx)
	if err != nil {
		mover.Close()
		return nil, err
	}
	opts := rebalance.PlanOptions{MaxMoves: o.moves}
	if c.addServer == nil {
		opts.Servers = []string{c.servers[0].Name, target} // move from the first server onto the last
	}
	plan, err := rebalance.Plan(snap, sizes, opts)
	if err != nil {
		mover.Close()
		return nil, err
	}
	say("plan (by rows, at most %d moves): %d moves onto %s (which has %d shards), %d at a time",
		o.moves, len(plan), target, len(snap.ShardsOn(target)), max(1, o.parallel))
	runner.MarkWindow(true)
	stopFlips := sayFlips(a.Router, snap, say)
	results, err := mover.Rebalance(ctx, plan, rebalance.Options{Parallel: o.parallel})
	stopFlips()
	runner.MarkWindow(false)
	if err != nil {
		mover.Close()
		return nil, err
	}
	for _, r := range results {
		run.done = append(run.done, r.Move)
	}
	sort.Slice(run.done, func(i, j int) bool { return run.done[i].Shard < run.done[j].Shard })
	say("moved %d shards in %s", len(run.done), time.Since(started).Round(time.Millisecond))
	return run, nil
}

// finish verifies each moved shard (row counts and checksums on both
// sides, the old side kept current by reverse replication) and completes
// the moves: the old schema, subscription, slot and publication go.
// Mover.Verify waits for the replication and compares again on a
// difference; Verify and Complete are bounded by the mover's StepTimeout.
func (r *moveRun) finish(ctx context.Context, say func(string, ...any)) error {
	defer r.mover.Close()
	for i, m := range r.done {
		if _, err := r.mover.Verify(ctx, m.Shard); err != nil {
			return fmt.Errorf("verify shard %d: %w", m.Shard, err)
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

// sayFlips reports each shard that the router's map places on another
// server than before, as the cutovers happen, until stop is called.
func sayFlips(rt *router.Router, from *router.Snapshot, say func(string, ...any)) (stop func()) {
	updates, unsubscribe := rt.Subscribe()
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		prev := from
		for {
			select {
			case <-done:
				return
			case snap := <-updates:
				for _, p := range snap.Placements() {
					if old, err := prev.Placement(p.Shard); err == nil && old.Server != p.Server && p.State == router.StateActive {
						say("%s cut over %s → %s", p.Schema, old.Server, p.Server)
					}
				}
				prev = snap
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		unsubscribe()
	}
}
