package rebalance

import (
	"context"
	"errors"
	"fmt"
	"github.com/jackc/pgx/v5"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardkit/shardkit/internal/harness/benchout"
	"github.com/shardkit/shardkit/router"
)

// fenceOn reads the barrier of a shard's schema on a server.
func (e *env) fenceOn(t *testing.T, server string, shard int) fenceBody {
	t.Helper()
	var src string
	var left *float64
	err := e.pools[server].QueryRow(context.Background(), sqlFenceBody, ident(router.SchemaName(shard), barrierName)).Scan(&src, &left)
	if err != nil {
		t.Fatal(err)
	}
	return parseFenceBody(src, left)
}

// lapseInCatalog moves the catalog's fence deadline of a fenced shard into
// the past, as if the catalog's clock had run past it: the fence watcher
// then asks the shard's server, whose clock decides.
func (e *env) lapseInCatalog(t *testing.T, shard int) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), e.catalogDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tag, err := conn.Exec(context.Background(),
		`UPDATE shardkit.shard_map SET fence_until = now() - interval '1 millisecond' WHERE shard = $1 AND state = 'fenced'`, shard)
	if err != nil || tag.RowsAffected() != 1 {
		t.Errorf("lapse the fence of shard %d in the catalog: %v (%d rows)", shard, err, tag.RowsAffected())
	}
}

// waitLapsedOn waits until the barrier on server no longer holds a lease
// (its deadline passed on the server's clock).
func (e *env) waitLapsedOn(t *testing.T, server string, shard int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for b := e.fenceOn(t, server, shard); b.held(); b = e.fenceOn(t, server, shard) {
		if time.Now().After(deadline) {
			t.Fatalf("the lease on %s still holds after a minute", server)
		}
		time.Sleep(b.left + time.Millisecond)
	}
}

// rawInsert writes a photo straight into a shard's schema on a server, as
// a router with a stale map would.
func (e *env) rawInsert(ctx context.Context, server string, shard int, caption string) (int64, error) {
	var id int64
	err := e.pools[server].QueryRow(ctx, `INSERT INTO `+ident(router.SchemaName(shard), "photos")+
		` (user_id, caption) VALUES ($1, $2) RETURNING id`, shard+e.shards, caption).Scan(&id)
	return id, err
}

// hasPhoto reports whether a photo is in a shard's schema on a server.
func (e *env) hasPhoto(t *testing.T, server string, shard int, id int64) bool {
	t.Helper()
	var ok bool
	err := e.pools[server].QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM `+ident(router.SchemaName(shard), "photos")+
		` WHERE id = $1)`, id).Scan(&ok)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestFenceLease: a cutover whose lease lapses before its seal does not
// flip (errFenceLapsed) and leaves the shard writable on its source, a
// write taken there after the deadline included; and the fence watcher
// racing a live mover at its seal: whichever gets the source's locks first
// decides. Either way the shard ends with one home and every write, and a
// resume finishes the move.
func TestFenceLease(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 2, 2, 2) // shard 0 on s0, shard 1 on s1
	seedPhotos(t, e, 0, 500)
	w := newRawWriter(t, e, []int{0, 1})
	w.via = newPluginOpsWait(t, e, w.r, time.Minute)
	stop := w.run(ctx)
	defer stop()
	watcher := e.mover(t, Config{})

	cases := []struct {
		name  string
		step  Step // the hook runs before this step
		lease time.Duration
		// late: a writer that ignores the map waits on the source until
		// the lease lets it in (no watcher).
		late bool
		// lapse: the watcher runs once the source's lease lapsed.
		lapse bool
		want  string // what the watcher does
		err   error  // what the mover returns
	}{
		{"lease lapses before the seal", stepSealed, 2 * time.Second, true, false, "", errFenceLapsed},
		{"watcher releases before the seal", stepSealed, 2 * time.Second, false, true, "released", errFenceLapsed},
		{"seal before the watcher", stepFlipped, 0, false, false, "flipped", nil},
		{"watcher while the source's lease holds", stepSealed, 0, false, false, "held", nil},
	}
	for _, c := range cases {
		from := e.placement(t, 0).Server
		to := map[string]string{"s0": "s1", "s1": "s0"}[from]
		var got []Fence
		var werr error
		var late int64
		var armed atomic.Bool
		armed.Store(true)
		mv := e.mover(t, Config{FenceLease: c.lease, hook: func(_ Move, s Step, done bool) {
			if s != c.step || done || !armed.CompareAndSwap(true, false) {
				return
			}
			if c.late {
				deadline := time.Now().Add(time.Minute)
				for {
					id, err := e.rawInsert(ctx, from, 0, "after the lease")
					if err == nil {
						late = id
						return
					}
					if !router.IsFenceError(err) || time.Now().After(deadline) {
						t.Errorf("%s: write on the source while the lease runs out: %v", c.name, err)
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			e.lapseInCatalog(t, 0)
			if c.lapse {
				e.waitLapsedOn(t, from, 0)
			}
			got, werr = watcher.ReleaseLapsedFences(ctx)
		}})
		m, err := mv.Move(ctx, 0, to, MoveOptions{})
		if c.want != "" && (werr != nil || len(got) != 1 || got[0].Action != c.want || got[0].Server != from) {
			t.Errorf("%s: watcher did %+v (%v), want %s on %s", c.name, got, werr, c.want, from)
		}
		if !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
			t.Fatalf("%s: move: err = %v, want %v", c.name, err, c.err)
		}
		p := e.placement(t, 0)
		if err == nil {
			if p.Server != to || p.State != router.StateActive || m.State != StateReversible {
				t.Errorf("%s: shard 0 %s on %s, move %s; want active on %s, reversible", c.name, p.State, p.Server, m.State, to)
			}
		} else {
			var me *MoveError
			if !errors.As(err, &me) || me.Step != stepSealed {
				t.Errorf("%s: err = %v, want a *MoveError at step %s", c.name, err, stepSealed)
			}
			if p.Server != from || p.State != router.StateMoving {
				t.Errorf("%s: shard 0 %s on %s, want moving on %s", c.name, p.State, p.Server, from)
			}
			if open, err := mv.j.open(ctx, 0); err != nil || open.Step != stepCaughtUp || open.State != StateRunning {
				t.Errorf("%s: journal after the lapse: %s at %s (%v), want running at %s", c.name, open.State, open.Step, err, stepCaughtUp)
			}
			if b := e.fenceOn(t, from, 0); b.kind != fenceReleased {
				t.Errorf("%s: source barrier %q, want released", c.name, b.kind)
			}
			if m, err = watcher.Resume(ctx, 0); err != nil || m.State != StateReversible {
				t.Fatalf("%s: resume: %v (%s)", c.name, err, m.State)
			}
		}
		if late != 0 && !e.hasPhoto(t, to, 0, late) {
			t.Errorf("%s: photo %d written on the source after the lease is not on the target", c.name, late)
		}
		if _, err := e.rawInsert(ctx, from, 0, "stale"); !router.IsFenceError(err) {
			t.Errorf("%s: write on the old home: err = %v, want the fence", c.name, err)
		}
		resume := w.hold() // Verify compares copies at rest
		if _, err := watcher.Verify(ctx, 0); err != nil {
			t.Errorf("%s: verify: %v", c.name, err)
		}
		resume()
		if _, err := watcher.Complete(ctx, 0); err != nil {
			t.Fatalf("%s: complete: %v", c.name, err)
		}
		t.Logf("%s: move %d, watcher %q", c.name, m.ID, c.want)
		if m.Cutover.Seal > 0 {
			figure(t, "FenceLease/seal", benchout.Metric{Value: ms(m.Cutover.Seal), Unit: "seal-ms"})
		}
	}

	// Then no hook: the watcher polls without pause while a mover whose
	// lease is about as long as a fenced window on a loaded machine cuts
	// over, so they meet at whatever point the timing gives. Each attempt
	// seals and flips, or lapses and is resumed; nothing else may happen.
	wctx, cancel := context.WithCancel(ctx)
	watched := make(chan error, 1)
	go func() { watched <- watcher.WatchFences(wctx, time.Millisecond) }()
	from := e.placement(t, 0).Server
	to := map[string]string{"s0": "s1", "s1": "s0"}[from]
	mv := e.mover(t, Config{FenceLease: 40 * time.Millisecond})
	m, err := mv.Move(ctx, 0, to, MoveOptions{})
	lapses := 0
	for ; errors.Is(err, errFenceLapsed) && lapses < 10; lapses++ {
		m, err = mv.Resume(ctx, 0)
	}
	cancel()
	<-watched
	if errors.Is(err, errFenceLapsed) { // the machine is too slow for the lease: finish with the default
		m, err = watcher.Resume(ctx, 0)
	}
	if err != nil || m.State != StateReversible {
		t.Fatalf("racing the watcher: %v (%s)", err, m.State)
	}
	if p := e.placement(t, 0); p.Server != to || p.State != router.StateActive {
		t.Errorf("racing the watcher: shard 0 %s on %s, want active on %s", p.State, p.Server, to)
	}
	if _, err := e.rawInsert(ctx, from, 0, "stale"); !router.IsFenceError(err) {
		t.Errorf("racing the watcher: write on the old home: err = %v, want the fence", err)
	}
	resume := w.hold()
	if _, err := watcher.Verify(ctx, 0); err != nil {
		t.Errorf("racing the watcher: verify: %v", err)
	}
	resume()
	if _, err := watcher.Complete(ctx, 0); err != nil {
		t.Fatal(err)
	}
	t.Logf("racing the watcher: move %d cut over after %d lapsed attempts (lease 40ms)", m.ID, lapses)
	if m.Cutover.Seal > 0 {
		figure(t, "FenceLease/seal", benchout.Metric{Value: ms(m.Cutover.Seal), Unit: "seal-ms"})
	}

	stop()
	w.check(t)
	if left := e.leftovers(t); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	t.Logf("writer: %d ops, longest write %v", w.ops, w.maxWait)
}

// TestKillMoverThenWatchFences kills the mover at every step of the fenced
// window and resumes nothing: the fence watcher alone makes the shard
// writable again through the plugin, within the lease and its interval,
// with one writable home; then the move is resumed (or rolled back) and
// nothing the writers were told was written is lost or doubled.
func TestKillMoverThenWatchFences(t *testing.T) {
	if testing.Short() {
		t.Skip("kills mover processes (between processes; the first make test stage runs it)")
	}
	ctx := context.Background()
	e := newEnv(t, 2, 2, 2) // shard 0 on s0, shard 1 on s1
	seedPhotos(t, e, 0, 1000)
	const lease, interval = 3 * time.Second, 200 * time.Millisecond
	// The lag gate is not what this test is about: a loose one opens at
	// once on a loaded machine.
	mv := e.mover(t, Config{CutoverLag: 250 * time.Millisecond})
	wctx, cancel := context.WithCancel(ctx)
	watched := make(chan error, 1)
	go func() { watched <- mv.WatchFences(wctx, interval) }()
	defer func() { cancel(); <-watched }()

	w := newRawWriter(t, e, []int{0, 1})
	w.via = newPluginOpsWait(t, e, w.r, 2*time.Minute) // writes wait out a dead mover's fence
	probe := newPluginOpsWait(t, e, w.r, 2*time.Minute)
	stop := w.run(ctx)
	defer stop()

	type kill struct {
		op    string
		step  Step
		atEnd bool
	}
	// The states a kill can leave inside the window: fenced with the
	// barrier prepared but not installed, a lease, a seal (the flip to
	// come), flipped; then a lease and a seal of a rollback.
	kills := []kill{
		{"move", stepFenced, true}, {"move", stepApplied, true},
		{"move", stepSealed, true}, {"move", stepFlipped, true},
		{"rollback", stepRbApplied, true}, {"rollback", stepRbSealed, true},
	}
	// The lease counts from the barrier, before the kill: a write waits at
	// most the lease, the watcher's interval and the time they take on a
	// loaded machine.
	bound := lease + interval + 15*time.Second
	for i, k := range kills {
		name := fmt.Sprintf("%s_%s_%v", k.op, k.step, k.atEnd)
		from := e.placement(t, 0).Server
		to := map[string]string{"s0": "s1", "s1": "s0"}[from]
		src, tgt := from, to
		if k.op == "rollback" {
			if _, err := mv.Move(ctx, 0, to, MoveOptions{}); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			src, tgt = to, from // the rollback cuts over from the target
		}
		runChildLease(t, e, k.op, 0, to, k.step, k.atEnd, lease, "CHILD_CUTOVER_LAG=250ms")
		// Wait for the watcher to unfence (the plugin may also write on the
		// fenced source while no barrier was installed: that is its home).
		killed := time.Now()
		for e.placement(t, 0).State == router.StateFenced && time.Since(killed) < bound {
			time.Sleep(interval / 4)
		}
		id, err := probe.insert(ctx, 0, int64(e.shards), "probe "+name)
		took := time.Since(killed)
		if err != nil {
			t.Fatalf("%s: write through the plugin after the kill: %v", name, err)
		}
		if took > bound {
			t.Errorf("%s: first write after the kill took %v, bound %v", name, took, bound)
		}
		// One writable home: the probe is where the map says, and the other
		// side refuses writes (or holds no copy of the shard).
		p := e.placement(t, 0)
		other := map[string]string{"s0": "s1", "s1": "s0"}[p.Server]
		if p.State == router.StateFenced || !e.hasPhoto(t, p.Server, 0, id) {
			t.Errorf("%s: probe %d not on the map's home %s (%s)", name, id, p.Server, p.State)
		}
		sealed := k.step == stepSealed || k.step == stepRbSealed || k.step == stepFlipped
		if want := map[bool]string{true: tgt, false: src}[sealed]; p.Server != want {
			t.Errorf("%s: shard 0 on %s after the watcher, want %s", name, p.Server, want)
		}
		// A forward move's target never carries a barrier: it is not in the map.
		if e.schemaOn(t, other, 0) && !(k.op == "move" && other == to) {
			if _, err := e.rawInsert(ctx, other, 0, "stale"); !router.IsFenceError(err) {
				t.Errorf("%s: write on %s, not the shard's home: err = %v, want the fence", name, other, err)
			}
		}
		t.Logf("%s: writable again after %v, shard 0 %s on %s", name, took.Round(time.Millisecond), p.State, p.Server)
		when := "in_window"
		if k.step == stepFlipped {
			when = "after_flip"
		}
		figure(t, "KillMoverThenWatchFences/"+when, benchout.Metric{Value: ms(took), Unit: "writable-ms"})

		// Then the move goes on, or back.
		var m Move
		switch {
		case k.op == "rollback" && p.Server == src:
			m, err = mv.Rollback(ctx, 0) // released: roll back again
		case k.op == "rollback":
			m, err = mv.Resume(ctx, 0) // flipped back to the source: finish the rollback
		default:
			if m, err = mv.Resume(ctx, 0); err == nil {
				resume := w.hold() // Verify compares copies at rest
				_, err = mv.Verify(ctx, 0)
				resume()
				if err == nil {
					if i%2 == 0 {
						m, err = mv.Complete(ctx, 0)
					} else {
						m, err = mv.Rollback(ctx, 0)
					}
				}
			}
		}
		if err != nil {
			t.Fatalf("%s: finishing the move: %v", name, err)
		}
		if m.open() {
			t.Fatalf("%s: move %d still %s", name, m.ID, m.State)
		}
		if p := e.placement(t, 0); p.State != router.StateActive {
			t.Errorf("%s: shard 0 is %s", name, p.State)
		}
	}
	stop()
	w.check(t)
	if left := e.leftovers(t); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	t.Logf("writer: %d ops, %d failed, longest write %v", w.ops, len(w.failures), w.maxWait)
	figure(t, "KillMoverThenWatchFences/writer",
		benchout.Metric{Value: float64(len(w.failures)), Unit: "failed-writes"},
		benchout.Metric{Value: float64(w.ops), Unit: "writes"})
}

// TestFenceBodies walks a barrier through its bodies on one server: the
// lease refuses writes until its deadline only, the seal refuses for good
// and only over its own unlapsed lease, a release lets writes in and makes
// a later seal fail.
func TestFenceBodies(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 1, 1, 1)
	schema := router.SchemaName(0)
	pool := e.pools["s0"]
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	write := func() error { _, err := e.rawInsert(ctx, "s0", 0, "body"); return err }
	install := func(token string, lease time.Duration) string {
		t.Helper()
		bs, err := barrierSQL(ctx, pool, schema, time.Second, token, lease, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := write(); err != nil {
			t.Fatalf("write with the barrier prepared: %v", err)
		}
		if _, err := runBarrier(ctx, conn, schema, bs.sql, time.Second); err != nil {
			t.Fatal(err)
		}
		return bs.sql
	}
	tables, err := listTables(ctx, pool, schema)
	if err != nil {
		t.Fatal(err)
	}

	// A lease that holds: refused; another attempt's seal fails; its own seals.
	install("aa01", time.Hour)
	if b := e.fenceOn(t, "s0", 0); b.kind != fenceLease || !b.held() {
		t.Fatalf("body %+v, want a lease that holds", b)
	}
	if err := write(); !router.IsFenceError(err) {
		t.Fatalf("write under the lease: %v, want the fence", err)
	}
	if err := runSeal(ctx, conn, schema, sealSQL(schema, "bb02", tables, time.Second)); !errors.Is(err, errFenceLapsed) {
		t.Errorf("seal of another attempt: %v, want errFenceLapsed", err)
	}
	if err := runSeal(ctx, conn, schema, sealSQL(schema, "aa01", tables, time.Second)); err != nil {
		t.Fatalf("seal: %v", err)
	}
	if err := write(); !router.IsFenceError(err) {
		t.Errorf("write after the seal: %v, want the fence", err)
	}
	// A sealed barrier is neither released nor prepared over.
	if b, err := releaseFence(ctx, pool, schema, true, ""); err != nil || b.kind != fenceSealed {
		t.Errorf("release of a sealed barrier: %+v %v", b, err)
	}
	if _, err := barrierSQL(ctx, pool, schema, time.Second, "cc03", time.Hour, ""); !errors.Is(err, errFenceLapsed) {
		t.Errorf("preparing over a sealed barrier: %v, want errFenceLapsed", err)
	}
	if err := removeBarrier(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}

	// A lease that lapsed: writes go through, the seal fails.
	install("dd04", 50*time.Millisecond)
	e.waitLapsedOn(t, "s0", 0)
	if err := write(); err != nil {
		t.Errorf("write after the lease lapsed: %v", err)
	}
	if err := runSeal(ctx, conn, schema, sealSQL(schema, "dd04", tables, time.Second)); !errors.Is(err, errFenceLapsed) {
		t.Errorf("seal after the lapse: %v, want errFenceLapsed", err)
	}

	// Released while it holds (a resume): writes go through, the seal
	// fails, and so does that attempt's barrier.
	ee05 := install("ee05", time.Hour)
	if b, err := releaseFence(ctx, pool, schema, false, ""); err != nil || b.kind != fenceLease {
		t.Fatalf("release without force: %+v %v", b, err)
	}
	if err := write(); !router.IsFenceError(err) {
		t.Errorf("a lease that holds was released without force: %v", err)
	}
	if _, err := releaseFence(ctx, pool, schema, true, ""); err != nil {
		t.Fatal(err)
	}
	if b := e.fenceOn(t, "s0", 0); b.kind != fenceReleased {
		t.Errorf("body %+v after the release, want released", b)
	}
	if err := write(); err != nil {
		t.Errorf("write after the release: %v", err)
	}
	if err := runSeal(ctx, conn, schema, sealSQL(schema, "ee05", tables, time.Second)); !errors.Is(err, errFenceLapsed) {
		t.Errorf("seal after the release: %v, want errFenceLapsed", err)
	}
	if _, err := runBarrier(ctx, conn, schema, ee05, time.Second); !errors.Is(err, errFenceLapsed) {
		t.Errorf("barrier of a released attempt: %v, want errFenceLapsed", err)
	}
	if err := write(); err != nil {
		t.Errorf("write after a released attempt's barrier: %v", err)
	}
}
