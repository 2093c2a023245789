package rebalance

import (
	"context"
	"fmt"
	"time"

	"github.com/shardkit/shardkit/internal/catalogmove"
	"github.com/shardkit/shardkit/router"
)

// setMapState sets the state of a shard placed on server and bumps the map
// version (routers are notified at commit). A shard no longer on server is
// left alone.
func setMapState(ctx context.Context, cat *catalogmove.Store, shard int, server string, st router.ShardState) error {
	return cat.SetShardState(ctx, shard, server, st)
}

// flipMap places the shard on to, active, in a new map version. Running it
// again is harmless.
func flipMap(ctx context.Context, cat *catalogmove.Store, shard int, from, to string) error {
	return cat.FlipShard(ctx, shard, from, to)
}

// mapJournal makes the cutover's map changes, each with the journal in
// the same catalog statement: *catalogmove.Window inside the fenced window
// (prepared statements on a held connection), *catalogmove.Store outside it.
type mapJournal interface {
	FenceMove(ctx context.Context, s catalogmove.FenceStep) error
	FlipMove(ctx context.Context, s catalogmove.FlipStep) (bool, error)
	Placement(ctx context.Context, shard int) (string, router.ShardState, error)
}

var (
	_ mapJournal = (*catalogmove.Store)(nil)
	_ mapJournal = (*catalogmove.Window)(nil)
)

// fenceJournalled sets the shard's state on server (fenced: with a lease
// of lease) and records step s done (and next under way) in one catalog
// statement.
func fenceJournalled(ctx context.Context, cat mapJournal, m *Move, server string, st router.ShardState, lease time.Duration, s, next Step) error {
	return cat.FenceMove(ctx, catalogmove.FenceStep{Shard: m.Shard, Server: server, State: st, Lease: lease,
		MoveID: m.ID, Step: string(s), Next: string(next)})
}

// flipJournalled places the shard, fenced on from, on to, active, and
// records step s done (and next under way) with the move's LSNs and
// sequence value, in one catalog statement. A shard found on to, active,
// was flipped already (by the fence watcher, or an earlier run): that is
// success too.
func flipJournalled(ctx context.Context, cat mapJournal, m *Move, from, to string, s, next Step) error {
	ok, err := cat.FlipMove(ctx, catalogmove.FlipStep{Shard: m.Shard, From: from, To: to, MoveID: m.ID,
		Step: string(s), Next: string(next), FinalLSN: m.FinalLSN, TargetLSN: m.TargetLSN, SeqValue: m.SeqValue})
	if err != nil || ok {
		return err
	}
	server, state, err := cat.Placement(ctx, m.Shard)
	if err != nil {
		return fmt.Errorf("flip shard %d to %s: %w", m.Shard, to, err)
	}
	if server == to && state == router.StateActive {
		return nil
	}
	return fmt.Errorf("flip shard %d to %s: the shard is %s on %s, not fenced on %s: %w", m.Shard, to, state, server, from, errFenceLapsed)
}

// unfenceJournalled sets the shard, fenced on server (with fence_until
// until, when not nil), to state st, and the move back to step s with
// note as its error, in one catalog statement. It reports whether the
// shard was so fenced.
func unfenceJournalled(ctx context.Context, cat *catalogmove.Store, m *Move, server string, st router.ShardState, s Step, until *time.Time, note string) (bool, error) {
	return cat.UnfenceMove(ctx, catalogmove.UnfenceStep{Shard: m.Shard, Server: server, State: st, Until: until,
		MoveID: m.ID, Step: string(s), Note: note})
}
