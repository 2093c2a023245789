package plugin

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/harness/pglocal"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/testkit"
)

// failover is an environment whose server b runs on a primary of its own
// with a synchronous standby, registered under one DSN that names both
// hosts with target_session_attrs=read-write, as an HA deployment
// registers it.
type failover struct {
	e                *env
	primary, standby *pglocal.Cluster
	db               string // server b's database
	multi            string // the DSN naming both hosts
}

func newFailover(t *testing.T, o envOpts) *failover {
	t.Helper()
	ctx := context.Background()
	primary, dsnOf := ownClusterForB(t)
	o.dsnOf = dsnOf
	e := newEnv(t, o)
	pc, err := pgconn.ParseConfig(e.dsn["b"])
	if err != nil {
		t.Fatal(err)
	}
	// The standby is made after provisioning, so that it has b's shards.
	standby, err := pgtest.Set(t).AddStandby(ctx, primary, pglocal.StandbyOptions{Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = standby.Stop() })
	f := &failover{e: e, primary: primary, standby: standby, db: pc.Database}
	// The test's database on the primary is dropped when it ends, which
	// needs a primary killed by the test to be up again, and not waiting
	// for a synchronous standby that is now a primary itself.
	t.Cleanup(func() { f.restartOld(t) })
	f.multi = fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d user=postgres dbname=%s sslmode=disable target_session_attrs=read-write",
		primary.Port, standby.Port, pc.Database)
	if err := e.cat.Update(ctx, func(ctx context.Context, tx *catalog.Tx) error {
		return tx.SetServerDSN(ctx, "b", f.multi, "")
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	e.dsn["b"] = f.multi
	return f
}

// restartOld restarts the old primary as it was (crash recovery on its
// old timeline, writable) except that it no longer waits for its
// synchronous standby, which is a primary now: it acknowledges what it
// is sent, as an old primary with asynchronous replication would.
func (f *failover) restartOld(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	if err := f.primary.Configure(ctx, map[string]string{"synchronous_standby_names": "''"}); err != nil {
		t.Fatal(err)
	}
	if err := f.primary.Restart(ctx); err != nil {
		t.Fatal(err)
	}
}

// usersOn returns n users whose shards the map places on server.
func (f *failover) usersOn(t *testing.T, server string, n int) []int64 {
	t.Helper()
	var out []int64
	for u := int64(1); len(out) < n; u++ {
		if f.e.serverOf(t, f.e.shardOf(u)) == server {
			out = append(out, u)
		}
	}
	return out
}

// load is writers inserting photos until stopped, each write's outcome
// recorded: the IDs acknowledged, the errors, and when each write ended.
type load struct {
	mu    sync.Mutex
	acked []int64
	errs  map[string][]error // by server
	oks   []ack
	stop  atomic.Bool
	wg    sync.WaitGroup
}

// ack is an acknowledged write: its server and when it returned.
type ack struct {
	server string
	at     time.Time
}

// write runs one writer per user until stop.
func (l *load) write(t *testing.T, f *failover, users []int64) {
	l.errs = map[string][]error{}
	for _, u := range users {
		server := f.e.serverOf(t, f.e.shardOf(u))
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for !l.stop.Load() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				p := Photo{UserID: u, Caption: "failover"}
				err := f.e.db.WithContext(ctx).Create(&p).Error
				cancel()
				l.mu.Lock()
				if err == nil {
					l.acked = append(l.acked, p.ID)
					l.oks = append(l.oks, ack{server, time.Now()})
				} else {
					l.errs[server] = append(l.errs[server], err)
				}
				l.mu.Unlock()
				if err != nil {
					time.Sleep(20 * time.Millisecond) // a client's pause before it retries
				}
			}
		}()
	}
}

func (l *load) finish() { l.stop.Store(true); l.wg.Wait() }

// ackedSince counts the writes to server acknowledged after t.
func (l *load) ackedSince(server string, t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, ok := range l.oks {
		if ok.server == server && ok.at.After(t) {
			n++
		}
	}
	return n
}

// firstAckAfter is when the first write to server acknowledged after t
// returned.
func (l *load) firstAckAfter(server string, t time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	for _, ok := range l.oks {
		if ok.server == server && ok.at.After(t) && (first.IsZero() || ok.at.Before(first)) {
			first = ok.at
		}
	}
	return first
}

// checkErrors fails the test for any error that is not a shardkit error
// that Retryable accepts: a client under failover retries what it is told
// to retry and nothing else.
func (l *load) checkErrors(t *testing.T, server string) {
	t.Helper()
	for s, errs := range l.errs {
		if s != server && len(errs) > 0 {
			t.Errorf("%d errors on server %s, which did not fail over: %v", len(errs), s, errs[0])
		}
		for _, err := range errs {
			var se *ShardError
			var sv *ServerError
			if !(errors.As(err, &se) || errors.As(err, &sv)) || !Retryable(err) {
				t.Errorf("error during the failover is not a retryable shardkit error: %T %v", err, err)
			}
		}
	}
}

// checkNothingLost fails the test unless every acknowledged write is on
// server b's current primary (read through the plugin).
func (l *load) checkNothingLost(t *testing.T, f *failover) {
	t.Helper()
	l.mu.Lock()
	acked := append([]int64(nil), l.acked...)
	l.mu.Unlock()
	var got []Photo
	if err := f.e.db.Clauses(AllShards()).Where("caption = ?", "failover").Find(&got).Error; err != nil {
		t.Fatal(err)
	}
	have := map[int64]bool{}
	for _, p := range got {
		have[p.ID] = true
	}
	var lost []int64
	for _, id := range acked {
		if !have[id] {
			lost = append(lost, id)
		}
	}
	sort.Slice(lost, func(i, j int) bool { return lost[i] < lost[j] })
	if len(lost) > 0 {
		t.Fatalf("%d of %d acknowledged writes lost: %v", len(lost), len(acked), lost)
	}
}

// TestFailoverSyncStandby kills server b's primary under load and
// promotes its synchronous standby: no acknowledged write is lost, every
// error on the way is a retryable shardkit error, server a never fails,
// and writes to b succeed again soon after the promotion.
func TestFailoverSyncStandby(t *testing.T) {
	ctx := context.Background()
	f := newFailover(t, envOpts{})
	var l load
	l.write(t, f, append(f.usersOn(t, "b", 4), f.usersOn(t, "a", 1)...))
	start := time.Now()
	testkit.Eventually(t, 30*time.Second, func() bool { return l.ackedSince("b", start) >= 20 })
	if err := f.primary.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := f.standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	testkit.Eventually(t, 60*time.Second, func() bool { return l.ackedSince("b", promoted) >= 40 })
	l.finish()
	first := l.firstAckAfter("b", promoted)
	t.Logf("killed, promoted %v later; first write to b %v after the promotion; %d writes acknowledged, %d errors on b",
		promoted.Sub(killed).Round(time.Millisecond), first.Sub(promoted).Round(time.Millisecond), len(l.acked), len(l.errs["b"]))
	l.checkErrors(t, "b")
	l.checkNothingLost(t, f)
	// The bound is generous for a loaded machine; the figure is the log's.
	if d := first.Sub(promoted); d > 10*time.Second {
		t.Errorf("first write %v after the promotion, want within seconds", d)
	}
}
