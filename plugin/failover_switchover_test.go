package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/shardkit/shardkit/catalog"
	fo "github.com/shardkit/shardkit/failover"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/testkit"
	"github.com/shardkit/shardkit/router"
)

// switchLoad is writers and readers through the plugin, every call
// recorded: how long it took, its error, and each acknowledged write.
type switchLoad struct {
	mu       sync.Mutex
	acked    []switchAck
	errs     []error
	maxWrite map[string]time.Duration // the longest write call, by server
	maxRead  time.Duration
	// When the longest write (by server) and the longest read began: a
	// stall is placed against the switchover's steps (logged with their
	// instants), before the release (the fence's wait) or after it (the
	// callers' reconnects to the new primary).
	slowWrite map[string]time.Time
	slowRead  time.Time
	reads     int
	stop      atomic.Bool
	wg        sync.WaitGroup
}

type switchAck struct {
	id, user  int64
	server    string
	begun, at time.Time // when the call began and returned
}

func (l *switchLoad) write(f *failover, u int64, server string) {
	defer l.wg.Done()
	for !l.stop.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		p := Photo{UserID: u, Caption: "switchover"}
		start := time.Now()
		err := f.e.db.WithContext(ctx).Create(&p).Error
		took := time.Since(start)
		cancel()
		l.mu.Lock()
		if took > l.maxWrite[server] {
			l.maxWrite[server], l.slowWrite[server] = took, start
		}
		if err == nil {
			l.acked = append(l.acked, switchAck{p.ID, u, server, start, time.Now()})
		} else {
			l.errs = append(l.errs, fmt.Errorf("write for user %d on %s, begun %s, took %v: %w", u, server, start.Format("15:04:05.000"), took, err))
		}
		l.mu.Unlock()
	}
}

// read reads back the newest acknowledged write to server b, again and
// again: a read that begins after a write was acknowledged must find it,
// wherever the server's primary is.
func (l *switchLoad) read(f *failover) {
	defer l.wg.Done()
	for !l.stop.Load() {
		var last switchAck
		l.mu.Lock()
		for i := len(l.acked) - 1; i >= 0; i-- {
			if l.acked[i].server == "b" {
				last = l.acked[i]
				break
			}
		}
		l.mu.Unlock()
		if last.id == 0 {
			time.Sleep(time.Millisecond)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var p Photo
		start := time.Now()
		err := f.e.db.WithContext(ctx).Where("user_id = ? AND id = ?", last.user, last.id).Take(&p).Error
		if err != nil {
			err = fmt.Errorf("begun %s: %w", start.Format("15:04:05.000"), err)
		}
		took := time.Since(start)
		cancel()
		l.mu.Lock()
		l.reads++
		if took > l.maxRead {
			l.maxRead, l.slowRead = took, start
		}
		if err != nil {
			l.errs = append(l.errs, fmt.Errorf("read of photo %d acknowledged before the read began: %w", last.id, err))
		}
		l.mu.Unlock()
	}
}

func (l *switchLoad) ackedSince(server string, t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, a := range l.acked {
		if a.server == server && a.at.After(t) {
			n++
		}
	}
	return n
}

// newSwitchover is a failover environment whose primary is recorded and
// whose router watches the map, as a service's does; the old primary is
// made writable again before the test's databases are dropped.
func newSwitchover(t *testing.T) (*failover, router.Primary) {
	t.Helper()
	f := newFailover(t, envOpts{})
	first := f.recordPrimary(t)
	wctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	go func() { _ = f.e.r.WatchWith(wctx, router.WatchOptions{Poll: 50 * time.Millisecond}) }()
	sees(t, f.e.r, first)
	t.Cleanup(func() {
		if err := f.primary.Configure(context.Background(), map[string]string{"default_transaction_read_only": "off"}); err != nil {
			t.Error(err)
		}
	})
	return f, first
}

// startSwitchLoad starts four writers on server b, one on a and two
// readers of b, and returns once b acknowledged 20 writes.
func startSwitchLoad(t *testing.T, f *failover) *switchLoad {
	t.Helper()
	l := &switchLoad{maxWrite: map[string]time.Duration{}, slowWrite: map[string]time.Time{}}
	for _, srv := range []struct {
		name string
		n    int
	}{{"b", 4}, {"a", 1}} {
		for _, u := range f.usersOn(t, srv.name, srv.n) {
			l.wg.Add(1)
			go l.write(f, u, srv.name)
		}
	}
	for range 2 {
		l.wg.Add(1)
		go l.read(f)
	}
	t.Cleanup(l.finish)
	start := time.Now()
	testkit.Eventually(t, 30*time.Second, func() bool { return l.ackedSince("b", start) >= 20 })
	return l
}

func (l *switchLoad) finish() { l.stop.Store(true); l.wg.Wait() }

// checkNoErrors fails the test for each error a caller saw (ten at most).
func (l *switchLoad) checkNoErrors(t *testing.T) {
	t.Helper()
	for i, err := range l.errs {
		if i == 10 {
			t.Errorf("… %d errors in all", len(l.errs))
			break
		}
		t.Errorf("error seen by a caller: %v", err)
	}
}

// TestSwitchoverNoErrors runs a planned switchover of server b (a primary
// with a synchronous standby, one DSN naming both hosts with
// target_session_attrs=read-write) under writers and readers through the
// plugin: no call fails, no write waits more than a second beyond the
// fence and the longest write on another server, every
// acknowledged write is on the new primary, every read finds the newest
// acknowledged write, and the old primary gets no write after it.
func TestSwitchoverNoErrors(t *testing.T) {
	ctx := context.Background()
	f, first := newSwitchover(t)
	e := f.e
	// A process whose router does not watch the map: it learns of the
	// fence only when the read-only primary refuses its write.
	db2 := e.process(ctx, t)
	l := startSwitchLoad(t, f)
	stale := &failover{e: &env{db: db2}}
	l.wg.Add(1)
	go l.write(stale, f.usersOn(t, "b", 5)[4], "b (stale map)")

	rep, err := fo.Switchover(ctx, e.cat, "b", fo.Options{
		To:       fmt.Sprintf("127.0.0.1:%d", f.standby.Port),
		Progress: func(s fo.Step) { t.Logf("switchover: %s  at %s", s, time.Now().Format("15:04:05.000")) },
	})
	if err != nil {
		t.Fatal(err)
	}
	done := time.Now()
	testkit.Eventually(t, 60*time.Second, func() bool { return l.ackedSince("b", done) >= 40 })
	l.finish()

	at := func(ts time.Time) string { return ts.Format("15:04:05.000") }
	t.Logf("fenced %v; longest write on b %v begun at %s (%v with a stale map, at %s), on a %v; longest read %v begun at %s; %d writes, %d reads",
		rep.Fenced.Round(time.Millisecond), l.maxWrite["b"].Round(time.Millisecond), at(l.slowWrite["b"]),
		l.maxWrite["b (stale map)"].Round(time.Millisecond), at(l.slowWrite["b (stale map)"]), l.maxWrite["a"].Round(time.Millisecond),
		l.maxRead.Round(time.Millisecond), at(l.slowRead), len(l.acked), l.reads)
	l.checkNoErrors(t)
	// A write on b waits for the fence, as long as the switchover's steps
	// take on this machine; beyond it, it costs at most what a write on a
	// does in the same run (whose stalls slow both alike) and a second.
	if d := l.maxWrite["b"] - rep.Fenced - l.maxWrite["a"]; d > time.Second {
		t.Errorf("longest write on b took %v (begun at %s; the steps' instants are above), %v more than the fence (%v) and the longest on a (%v): want at most 1s more",
			l.maxWrite["b"], at(l.slowWrite["b"]), d, rep.Fenced, l.maxWrite["a"])
	}
	if rep.Primary.SystemID != first.SystemID || rep.Primary.Timeline <= first.Timeline {
		t.Errorf("recorded %v after the switchover, %v before: want the same system on a newer timeline", rep.Primary, first)
	}

	var all, after []int64
	for _, a := range l.acked {
		if !strings.HasPrefix(a.server, "b") {
			continue
		}
		all = append(all, a.id)
		// Begun after the switchover: a write acknowledged after it may
		// have committed on the old primary before the promotion (and so
		// be on both), its caller slow to return.
		if a.begun.After(done) {
			after = append(after, a.id)
		}
	}
	if n := f.onHost(t, f.standby, all); n != len(all) {
		t.Errorf("%d of the %d writes acknowledged on b are on the new primary", n, len(all))
	}
	if n := f.onHost(t, f.primary, after); n != 0 {
		t.Errorf("%d of the %d writes begun after the switchover are on the old primary", n, len(after))
	}
}

// TestSwitchoverAbortsCleanly names a --to host that is not a standby
// (the primary itself): the switchover stops at its check with a typed
// error and changes nothing.
func TestSwitchoverAbortsCleanly(t *testing.T) {
	ctx := context.Background()
	f, _ := newSwitchover(t)
	_, err := fo.Switchover(ctx, f.e.cat, "b", fo.Options{To: fmt.Sprintf("127.0.0.1:%d", f.primary.Port)})
	var se *fo.StepError
	if !errors.As(err, &se) || !errors.Is(err, fo.ErrNotStandby) || !se.Aborted || se.Step != "check" {
		t.Fatalf("switchover to the primary: %v, want a *StepError at check, aborted, with ErrNotStandby", err)
	}
	f.checkUndone(t)
}

// TestSwitchoverUndoneWhenReplayBehind pauses the standby's replay, so
// that the switchover cannot see the old primary's last write replayed:
// it stops at replay, after the fence and the read-only primary, and
// undoes both. The callers see no error: their writes waited on the fence
// and went on on the old primary.
func TestSwitchoverUndoneWhenReplayBehind(t *testing.T) {
	ctx := context.Background()
	f, first := newSwitchover(t)
	pgtest.Exec(t, f.standby.DSN("postgres"), "SELECT pg_wal_replay_pause()")
	t.Cleanup(func() { pgtest.Exec(t, f.standby.DSN("postgres"), "SELECT pg_wal_replay_resume()") })
	l := startSwitchLoad(t, f)
	_, err := fo.Switchover(ctx, f.e.cat, "b", fo.Options{To: fmt.Sprintf("127.0.0.1:%d", f.standby.Port), ReplayWait: 300 * time.Millisecond})
	var se *fo.StepError
	if !errors.As(err, &se) || !errors.Is(err, fo.ErrReplayBehind) || !se.Aborted || se.Step != "replay" {
		t.Fatalf("switchover with replay paused: %v, want a *StepError at replay, aborted, with ErrReplayBehind", err)
	}
	// The error says where the standby and the old primary's walsenders
	// stood, for an operator to tell a slow replay from unsent WAL.
	for _, want := range []string{"old primary flushed", "walsenders:", "standby received", "replayed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the replay's error does not say %q: %v", want, err)
		}
	}
	t.Logf("refused: %v", err)
	undone := time.Now()
	testkit.Eventually(t, 60*time.Second, func() bool { return l.ackedSince("b", undone) >= 20 })
	l.finish()
	l.checkNoErrors(t)
	f.checkUndone(t)
	if srv, _ := f.e.r.Snapshot().Server("b"); srv.Primary != first {
		t.Errorf("server b's primary is %v after the undone switchover, want %v", srv.Primary, first)
	}
}

// checkUndone fails the test unless server b's shards are active in the
// catalog and its primary takes writes.
func (f *failover) checkUndone(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if _, err := f.e.r.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	for s := 0; s < f.e.shards; s++ {
		if pl, _ := f.e.r.Snapshot().Placement(s); pl.State != router.StateActive {
			t.Errorf("shard %d is %s after the undone switchover", s, pl.State)
		}
	}
	var ro string
	if err := pgtest.Connect(t, f.primary.DSN(f.db)).QueryRow(ctx, "SHOW default_transaction_read_only").Scan(&ro); err != nil || ro != "off" {
		t.Errorf("the old primary has default_transaction_read_only %q (%v) after the undone switchover, want off", ro, err)
	}
	u := f.usersOn(t, "b", 1)[0]
	if err := f.e.db.Create(&Photo{UserID: u, Caption: "undone"}).Error; err != nil {
		t.Errorf("write to b after the undone switchover: %v", err)
	}
}

// TestTransactionOnFencedServerFailsFast fences the shard of a
// transaction that already runs on its server: its next write fails at
// once with ErrShardMoved, to be run again whole, instead of waiting
// inside the transaction (which holds up a switchover's drain of write
// transactions, and can only end refused). Run again while the shard is
// fenced, the transaction waits for the fence before it begins, and
// commits on the shard's home once the fence ends.
func TestTransactionOnFencedServerFailsFast(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, envOpts{})
	u := int64(7)
	shard := e.shardOf(u)
	server := e.serverOf(t, shard)
	fence := func(st router.ShardState) {
		t.Helper()
		if _, err := e.cat.PlaceShard(ctx, shard, server, st); err != nil {
			t.Fatal(err)
		}
		if _, err := e.r.Reload(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var inTx error
	var took time.Duration
	err := e.db.Clauses(Shard(u)).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&Photo{UserID: u, Caption: "before the fence"}).Error; err != nil {
			return err
		}
		fence(router.StateFenced)
		start := time.Now()
		inTx = tx.Create(&Photo{UserID: u, Caption: "under the fence"}).Error
		took = time.Since(start)
		return inTx
	})
	if !errors.Is(inTx, ErrShardMoved) || !errors.Is(err, ErrShardMoved) || !Retryable(err) {
		t.Fatalf("write in a transaction open on the fenced server: %v after %v (transaction: %v), want ErrShardMoved at once", inTx, took, err)
	}
	done := make(chan error, 1)
	go func() {
		done <- e.db.Clauses(Shard(u)).Transaction(func(tx *gorm.DB) error {
			return tx.Create(&Photo{UserID: u, Caption: "after the fence"}).Error
		})
	}()
	fence(router.StateActive)
	if err := <-done; err != nil {
		t.Fatalf("transaction begun on the fenced shard: %v, want it to wait for the fence and commit", err)
	}
}

// heldSource is the catalog as a router's source whose LoadChanges, once
// held, waits until released: a router that reloads the map after a
// refusal reads it only after what the test lets happen first.
type heldSource struct {
	*catalog.Catalog
	mu      sync.Mutex
	gate    chan struct{} // closed by release; nil: not held
	entered chan struct{} // a held LoadChanges is waiting
}

func newHeldSource(cat *catalog.Catalog) *heldSource {
	return &heldSource{Catalog: cat, entered: make(chan struct{}, 1)}
}

func (h *heldSource) hold() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gate = make(chan struct{})
}

func (h *heldSource) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gate != nil {
		close(h.gate)
		h.gate = nil
	}
}

// LoadChanges is part of the router.VersionSource interface.
func (h *heldSource) LoadChanges(ctx context.Context, since *router.Snapshot) (*router.Snapshot, error) {
	h.mu.Lock()
	gate := h.gate
	h.mu.Unlock()
	if gate != nil {
		select {
		case h.entered <- struct{}{}:
		default:
		}
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return h.Catalog.LoadChanges(ctx, since)
}

// TestSwitchoverWriteRefusedThenMapReadLate forces the interleaving of a
// write that the read-only old primary refused (25006) and whose router
// reads the map only once the switchover is over: a process that does
// not watch the map writes after the drain step, and its reload is held
// until the switchover returned (its session on the old primary ended by
// the sessions step meanwhile). The map it then reads has the shard
// active on the same server, under the new primary: the write did
// nothing on the old one and must run there, not fail with 25006.
func TestSwitchoverWriteRefusedThenMapReadLate(t *testing.T) {
	ctx := context.Background()
	f, _ := newSwitchover(t)
	src := newHeldSource(f.e.cat)
	db2 := f.e.processWith(ctx, t, src)
	u := f.usersOn(t, "b", 1)[0]
	if err := db2.Create(&Photo{UserID: u, Caption: "before the switchover"}).Error; err != nil {
		t.Fatal(err)
	}
	src.hold()
	t.Cleanup(src.release)
	p := Photo{UserID: u, Caption: "refused by the old primary"}
	var werr error
	wrote := make(chan struct{})
	rep, err := fo.Switchover(ctx, f.e.cat, "b", fo.Options{
		To: fmt.Sprintf("127.0.0.1:%d", f.standby.Port),
		Progress: func(s fo.Step) {
			t.Logf("switchover: %s", s)
			if s.Name != "drain" {
				return
			}
			// Every backend of the old primary is read-only now; db2's map,
			// older than the fence, sends the write there.
			go func() {
				defer close(wrote)
				werr = db2.Create(&p).Error
			}()
			select {
			case <-src.entered: // refused, and reloading the map
			case <-wrote:
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	src.release()
	<-wrote
	if werr != nil {
		t.Fatalf("write refused by the old primary during the switchover, map read after it (fenced %v): %v", rep.Fenced, werr)
	}
	if n := f.onHost(t, f.standby, []int64{p.ID}); n != 1 {
		t.Errorf("the write is not on the new primary (%d rows)", n)
	}
}

// TestSwitchoverReadOnEndedSession reads through a process whose map is
// older than the switchover's record, on a connection to the old primary
// that the sessions step ended: as a reader routed just before the record
// meets it when its read reaches the old primary as the step ends its
// session. The read did not run, and runs on the new primary, whose pool
// the reloaded map gives the server.
func TestSwitchoverReadOnEndedSession(t *testing.T) {
	ctx := context.Background()
	f, _ := newSwitchover(t)
	db3 := f.e.process(ctx, t)
	u := f.usersOn(t, "b", 1)[0]
	p := Photo{UserID: u, Caption: "read after the switchover"}
	if err := f.e.db.Create(&p).Error; err != nil {
		t.Fatal(err)
	}
	// db3's pool now holds an idle connection to the old primary.
	var got Photo
	if err := db3.Where("user_id = ? AND id = ?", u, p.ID).Take(&got).Error; err != nil {
		t.Fatal(err)
	}
	rep, err := fo.Switchover(ctx, f.e.cat, "b", fo.Options{To: fmt.Sprintf("127.0.0.1:%d", f.standby.Port)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Terminated == 0 {
		t.Fatalf("the sessions step ended no session on the old primary: %+v", rep.Steps)
	}
	got = Photo{}
	if err := db3.Where("user_id = ? AND id = ?", u, p.ID).Take(&got).Error; err != nil {
		t.Fatalf("read through a map older than the switchover, its session on the old primary ended: %v", err)
	}
	if got.ID != p.ID {
		t.Fatalf("read %d, want %d", got.ID, p.ID)
	}
}

// TestSwitchoverFenceOutlastsFenceWait holds a switchover after its
// replay step for longer than the plugin's FenceWait, as a loaded machine
// or a slow pg_promote can: a write held by the fence (one whose router
// saw it, one refused by the read-only old primary through a map older
// than the fence) waits for the fence's lease, not FenceWait, and goes on
// on the new primary once the switchover releases it.
func TestSwitchoverFenceOutlastsFenceWait(t *testing.T) {
	ctx := context.Background()
	f, _ := newSwitchover(t)
	db2 := f.e.process(ctx, t)
	users := f.usersOn(t, "b", 2)
	// Each process has a connection to the old primary: through a map
	// older than the fence a write is refused there (25006) and waits on
	// the fence; a new connection, which finds no writable host until the
	// promotion, would fail it.
	for i, db := range []*gorm.DB{f.e.db, db2} {
		if err := db.Create(&Photo{UserID: users[i], Caption: "before the switchover"}).Error; err != nil {
			t.Fatal(err)
		}
	}
	type write struct {
		p    Photo
		err  error
		took time.Duration
	}
	writes := []*write{{p: Photo{UserID: users[0], Caption: "held"}}, {p: Photo{UserID: users[1], Caption: "held, stale map"}}}
	var wg sync.WaitGroup
	held := 0 * time.Second
	_, err := fo.Switchover(ctx, f.e.cat, "b", fo.Options{
		To: fmt.Sprintf("127.0.0.1:%d", f.standby.Port),
		Progress: func(s fo.Step) {
			t.Logf("switchover: %s", s)
			if s.Name != "replay" {
				return
			}
			start := time.Now()
			for i, w := range writes {
				db := f.e.db
				if i == 1 {
					db = db2
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					begun := time.Now()
					w.err = db.Create(&w.p).Error
					w.took = time.Since(begun)
				}()
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			// The fence outlasts FenceWait by half a second, or less if the
			// writes gave up.
			select {
			case <-done:
			case <-time.After(defaultFenceWait + 500*time.Millisecond):
			}
			held = time.Since(start)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for _, w := range writes {
		if w.err != nil {
			t.Errorf("%q, held by the fence %v: %v after %v", w.p.Caption, held, w.err, w.took)
			continue
		}
		if w.took < defaultFenceWait {
			t.Errorf("%q took %v, less than FenceWait (%v): the fence did not hold it", w.p.Caption, w.took, defaultFenceWait)
		}
		if n := f.onHost(t, f.standby, []int64{w.p.ID}); n != 1 {
			t.Errorf("%q is not on the new primary", w.p.Caption)
		}
	}
}

// TestReadOnPoolClosedByNewerMap routes a read by a map older than a
// change of the server's DSNs (as a switchover's record changes its
// primary) and, before the read takes a connection, lets a statement
// routed by the newer map open the server's new pool, which closes the
// old one: the read, refused by the closed pool, runs on the new pool.
func TestReadOnPoolClosedByNewerMap(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, envOpts{})
	db3 := e.process(ctx, t)
	p := db3.Config.Plugins["shardkit"].(*Plugin)
	u := int64(1)
	for e.serverOf(t, e.shardOf(u)) != "b" {
		u++
	}
	photo := Photo{UserID: u, Caption: "read on a closed pool"}
	if err := db3.Create(&photo).Error; err != nil {
		t.Fatal(err)
	}
	p.pools.mu.RLock()
	old := p.pools.by["b"]
	p.pools.mu.RUnlock()
	if err := e.cat.Update(ctx, func(ctx context.Context, tx *catalog.Tx) error {
		dsn := e.dsn["b"]
		if strings.Contains(dsn, "://") {
			sep := "?"
			if strings.Contains(dsn, "?") {
				sep = "&"
			}
			dsn += sep + "application_name=shardkit_newer_map"
		} else {
			dsn += " application_name=shardkit_newer_map"
		}
		return tx.SetServerDSN(ctx, "b", dsn, "")
	}); err != nil {
		t.Fatal(err)
	}
	var armed atomic.Bool
	armed.Store(true)
	if err := db3.Callback().Query().After("shardkit:route").Before("gorm:query").Register("test:newer_map", func(db *gorm.DB) {
		if !armed.CompareAndSwap(true, false) {
			return
		}
		snap, err := p.router.Reload(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := p.pools.get(snap, "b"); err != nil {
			t.Error(err)
			return
		}
		testkit.Eventually(t, 30*time.Second, func() bool { return errors.Is(old.PingContext(ctx), errPoolClosed) })
	}); err != nil {
		t.Fatal(err)
	}
	var got Photo
	if err := db3.Where("user_id = ? AND id = ?", u, photo.ID).Take(&got).Error; err != nil {
		t.Fatalf("read routed to the pool a newer map closed: %v", err)
	}
	if armed.Load() || got.ID != photo.ID {
		t.Fatalf("read %d (the pool closed under it: %v), want %d", got.ID, !armed.Load(), photo.ID)
	}
}

// TestSwitchoverReadNeedsConnectionDuringFence reads, after the replay
// step and before the promotion, through a process that keeps no idle
// connection: its new connection finds no writable host (the old primary
// read-only, the standby not promoted yet). The read waits for the fence
// and runs on the new primary.
func TestSwitchoverReadNeedsConnectionDuringFence(t *testing.T) {
	ctx := context.Background()
	f, _ := newSwitchover(t)
	db3 := f.e.processWith(ctx, t, f.e.cat, func(c *Config) { c.MaxIdleConns = -1 })
	u := f.usersOn(t, "b", 1)[0]
	p := Photo{UserID: u, Caption: "read during the fence"}
	if err := f.e.db.Create(&p).Error; err != nil {
		t.Fatal(err)
	}
	var got Photo
	var rerr error
	// Before, the read failed at once; now it waits for the fence, which
	// the promotion ends.
	switchoverDuringReplay(t, f, func() {
		rerr = db3.Where("user_id = ? AND id = ?", u, p.ID).Take(&got).Error
	})
	if rerr != nil || got.ID != p.ID {
		t.Fatalf("read that needed a new connection during the fence: %v (read %d, want %d)", rerr, got.ID, p.ID)
	}
}

// TestSwitchoverWriteNeedsConnectionDuringFence writes, after the replay
// step and before the promotion, through a process that keeps no idle
// connection and has not seen the fence: its new connection finds no
// writable host (the old primary read-only, the standby not promoted
// yet). The write did nothing; it waits for the fence and runs on the new
// primary, and the server is not taken as down for the writes after it.
func TestSwitchoverWriteNeedsConnectionDuringFence(t *testing.T) {
	ctx := context.Background()
	f, _ := newSwitchover(t)
	db3 := f.e.processWith(ctx, t, f.e.cat, func(c *Config) { c.MaxIdleConns = -1 })
	u := f.usersOn(t, "b", 1)[0]
	var werr, after error
	p := Photo{UserID: u, Caption: "written during the fence"}
	switchoverDuringReplay(t, f, func() {
		werr = db3.Create(&p).Error
		// The next write on the server: not refused as a server taken
		// down by the first one's failed connection.
		after = db3.Create(&Photo{UserID: u, Caption: "written after it"}).Error
	})
	if werr != nil || after != nil {
		t.Fatalf("writes that needed a new connection during the fence: %v; the one after: %v", werr, after)
	}
	var got Photo
	if err := f.e.db.Where("user_id = ? AND id = ?", u, p.ID).Take(&got).Error; err != nil || got.Caption != p.Caption {
		t.Fatalf("the write during the fence is not on the new primary: %v (%+v)", err, got)
	}
}

// switchoverDuringReplay switches server b over to f's standby and, once
// the replay step is done (the old primary read-only, the standby not
// promoted), runs fn on a goroutine of its own, holding the switchover
// there until fn returned or a second passed. It returns once the
// switchover succeeded and fn returned.
func switchoverDuringReplay(t *testing.T, f *failover, fn func()) {
	t.Helper()
	ran := make(chan struct{})
	_, err := fo.Switchover(context.Background(), f.e.cat, "b", fo.Options{
		To: fmt.Sprintf("127.0.0.1:%d", f.standby.Port),
		Progress: func(s fo.Step) {
			t.Logf("switchover: %s", s)
			if s.Name != "replay" {
				return
			}
			go func() {
				defer close(ran)
				fn()
			}()
			select {
			case <-ran:
			case <-time.After(time.Second):
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	<-ran
}
