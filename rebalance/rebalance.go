package rebalance

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Options configure Mover.Rebalance, the run of a plan (MoveOptions
// configure one move, PlanOptions the plan).
type Options struct {
	// Parallel is how many moves run at once. 0 means 1.
	Parallel int
	// Complete finishes each move after it cut over (drops reverse
	// replication and the old copy). The zero value leaves moves reversible.
	Complete bool
	// Offline moves without logical replication (see MoveOptions).
	Offline bool
}

// MoveResult is the outcome of one planned move.
type MoveResult struct {
	Planned PlannedMove
	Move    Move
	Err     error
}

// Rebalance executes a plan, opts.Parallel moves at a time, largest first.
// A failed move does not stop the others; the error joins every failure.
func (mv *Mover) Rebalance(ctx context.Context, plan []PlannedMove, opts Options) ([]MoveResult, error) {
	par := max(opts.Parallel, 1)
	plan = append([]PlannedMove(nil), plan...)
	sortPlan(plan)
	results := make([]MoveResult, len(plan))
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i, p := range plan {
		results[i].Planned = p
		if ctx.Err() != nil {
			results[i].Err = ctx.Err()
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			m, err := mv.Move(ctx, p.Shard, p.To, MoveOptions{Offline: opts.Offline})
			if err == nil && opts.Complete && m.State == StateReversible {
				m, err = mv.Complete(ctx, p.Shard)
			}
			results[i].Move, results[i].Err = m, err
		}()
	}
	wg.Wait()
	var errs []error
	for _, r := range results {
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("shard %d %s→%s: %w", r.Planned.Shard, r.Planned.From, r.Planned.To, r.Err))
		}
	}
	return results, errors.Join(errs...)
}
