package rebalance

import (
	"context"
	"fmt"
	"sync"
)

// phaseGate keeps a Mover's fenced windows apart from each other and
// from its moves' copies and index builds: a cutover waits until no copy
// or index build of another move runs, and none starts while a cutover
// waits or runs. A window that meets another move's parallel COPY and
// index builds on the same target waits behind them for CPU and I/O in
// every statement it runs there, and writes stay fenced all that time.
type phaseGate struct {
	mu      sync.Mutex
	heavy   int           // copies and index builds under way
	window  bool          // a cutover holds the gate
	waiting int           // cutovers waiting for it
	changed chan struct{} // closed and replaced on every change
}

func newPhaseGate() *phaseGate { return &phaseGate{changed: make(chan struct{})} }

// notify wakes the waiters; g.mu is held.
func (g *phaseGate) notify() {
	close(g.changed)
	g.changed = make(chan struct{})
}

// await releases g.mu, waits for a change or ctx, and locks g.mu again.
func (g *phaseGate) await(ctx context.Context) error {
	ch := g.changed
	g.mu.Unlock()
	select {
	case <-ch:
		g.mu.Lock()
		return nil
	case <-ctx.Done():
		g.mu.Lock()
		return ctx.Err()
	}
}

// cutover waits until no other cutover and no copy or index build runs;
// release ends the turn.
func (g *phaseGate) cutover(ctx context.Context) (release func(), err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.waiting++
	for g.window || g.heavy > 0 {
		if err := g.await(ctx); err != nil {
			g.waiting--
			g.notify()
			return nil, fmt.Errorf("wait for another move's cutover, copy or index build to finish: %w", err)
		}
	}
	g.waiting--
	g.window = true
	return func() {
		g.mu.Lock()
		g.window = false
		g.notify()
		g.mu.Unlock()
	}, nil
}

// heavyStep waits until no cutover runs or waits; release ends the step.
func (g *phaseGate) heavyStep(ctx context.Context) (release func(), err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.window || g.waiting > 0 {
		if err := g.await(ctx); err != nil {
			return nil, fmt.Errorf("wait for another move's cutover to finish: %w", err)
		}
	}
	g.heavy++
	return func() {
		g.mu.Lock()
		g.heavy--
		g.notify()
		g.mu.Unlock()
	}, nil
}
