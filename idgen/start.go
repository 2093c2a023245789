package idgen

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Start leases a slot from leaser and returns a generator issuing in it,
// with a goroutine that keeps the lease renewed (every TTL/3) and leases a
// new slot if the old one is lost. The returned cleanup calls Close with a
// five-second timeout. With no free slot the error wraps ErrNoFreeSlot:
// the caller then leaves keys to the database's next_id().
func Start(ctx context.Context, layout Layout, leaser Leaser, cfg Config) (*Generator, func(), error) {
	l, err := leaser.Acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	g, err := New(layout, l, cfg)
	if err != nil {
		_ = leaser.Release(ctx, l)
		return nil, nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	g.leaser, g.stop, g.done = leaser, cancel, make(chan struct{})
	go g.keepLeased(rctx)
	if g.bulk.max > 1 {
		g.bulk.want, g.bulk.done = make(chan struct{}, 1), make(chan struct{})
		go g.keepBulk(rctx)
	}
	return g, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := g.Close(ctx); err != nil {
			slog.Warn("shardkit: closing the ID generator", "err", err)
		}
	}, nil
}

// Close stops issuing IDs, records the exact high-water mark in the lease,
// and releases the slot (when Start made the generator). Calls after the
// first return nil.
func (g *Generator) Close(ctx context.Context) error {
	if g.closed.Load() {
		return nil
	}
	if g.stop != nil {
		g.stop()
		<-g.done
		if g.bulk.done != nil {
			<-g.bulk.done
		}
	}
	hwm := g.seal()
	l := g.lease.Load()
	l.SetHighWater(hwm)
	if g.leaser == nil {
		return nil
	}
	g.dropExtras(ctx, nil)
	err := g.leaser.Release(ctx, l)
	l.Revoke()
	if err != nil && !errors.Is(err, ErrLeaseLost) {
		return err
	}
	return nil
}

// keepLeased renews the current lease every TTL/3. A renewal that fails
// (catalog unreachable) is retried every TTL/10, past the lease's deadline
// too: Next refuses with ErrLeaseExpired meanwhile (callers use the
// database's next_id()), and once the catalog answers the same slot is
// renewed and issuing resumes in it. That is safe because a renewal only
// succeeds while the catalog still names this holder: had anyone else
// taken the slot, the renewal reports ErrLeaseLost, and a new slot is
// leased instead.
func (g *Generator) keepLeased(ctx context.Context) {
	defer close(g.done)
	clock := g.sleepClock
	for {
		l := g.lease.Load()
		if l.TTL <= 0 {
			<-ctx.Done()
			return
		}
		if clock.Sleep(ctx, l.TTL/3) != nil {
			return
		}
		if g.renew(ctx, l) != nil {
			return
		}
	}
}

// renew renews l until a renewal succeeds or the slot turns out lost (then
// it leases another). It fails only when ctx ends.
func (g *Generator) renew(ctx context.Context, l *Lease) error {
	for failures := 0; ; failures++ {
		rctx, cancel := context.WithTimeout(ctx, l.TTL)
		err := g.leaser.Renew(rctx, l)
		cancel()
		if err == nil {
			if failures > 0 {
				slog.Info("shardkit: ID slot lease renewed again", "slot", l.Slot, "failed_renewals", failures)
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, ErrLeaseLost) {
			l.Revoke()
			slog.Warn("shardkit: ID slot lease lost; leasing another", "slot", l.Slot, "err", err)
			_, err := g.acquire(ctx)
			return err
		}
		slog.Warn("shardkit: renewing ID slot lease", "slot", l.Slot, "expired", !l.Valid(g.sleepClock.Now()), "err", err)
		if err := g.sleepClock.Sleep(ctx, l.TTL/10); err != nil {
			return err
		}
	}
}

// acquire leases a new slot, retrying until it succeeds or ctx ends, and
// installs it.
func (g *Generator) acquire(ctx context.Context) (*Lease, error) {
	backoff := 100 * time.Millisecond
	for {
		l, err := g.leaser.Acquire(ctx)
		if err == nil {
			if err := adopt(g.layout, l); err != nil {
				_ = g.leaser.Release(ctx, l)
				return nil, fmt.Errorf("shardkit: the leaser returned an unusable lease: %w", err)
			}
			g.lease.Store(l)
			return l, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		slog.Warn("shardkit: leasing an ID slot", "err", err, "retry_in", backoff)
		if err := g.sleepClock.Sleep(ctx, backoff); err != nil {
			return nil, err
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}
