package rebalance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardkit/shardkit/router"
)

// rawWriter inserts and updates photos through raw SQL while honouring the
// shard map the way the plugin does: writes to a fenced shard wait
// (bounded), and the source's barrier (router.FenceSQLState) means reload
// the map and retry. It records what it wrote, to check nothing is lost.
type rawWriter struct {
	e      *env
	r      *router.Router
	bound  time.Duration
	pause  time.Duration // between a goroutine's writes
	shards []int

	// via, when set, writes through something else than raw SQL (the
	// plugin); nil means raw SQL that honours the fence itself.
	via writeOps

	// gate is held (read) by every write; hold takes it to pause them.
	gate sync.RWMutex

	mu       sync.Mutex
	rows     map[int64]int // photo id → last version written
	shardOf  map[int64]int
	placed   map[int64]string // photo id → where and by which map the insert went, for a loss report
	failures []error
	reported int // failures checkSoFar reported
	maxWait  time.Duration
	slow     [][2]time.Time // start and end of writes over 5ms
	ops      int
}

func newRawWriter(t *testing.T, e *env, shards []int) *rawWriter {
	t.Helper()
	r, err := router.New(context.Background(), e.cat)
	if err != nil {
		t.Fatal(err)
	}
	return &rawWriter{e: e, r: r, bound: 5 * time.Second, pause: time.Millisecond, shards: shards, rows: map[int64]int{}, shardOf: map[int64]int{}, placed: map[int64]string{}}
}

// writeOps are the writer's two operations on a shard.
type writeOps interface {
	insert(ctx context.Context, shard int, user int64, caption string) (int64, error)
	update(ctx context.Context, shard int, user, id int64, version int) error
}

// timed records the longest write.
func (w *rawWriter) timed(start time.Time) {
	end := time.Now()
	d := end.Sub(start)
	w.mu.Lock()
	w.maxWait = max(w.maxWait, d)
	if d > 5*time.Millisecond {
		w.slow = append(w.slow, [2]time.Time{start, end})
	}
	w.mu.Unlock()
}

// longestDuring returns the longest write that overlapped [from, to].
func (w *rawWriter) longestDuring(from, to time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var longest time.Duration
	for _, s := range w.slow {
		if s[1].After(from) && s[0].Before(to) {
			longest = max(longest, s[1].Sub(s[0]))
		}
	}
	return longest
}

func (w *rawWriter) insert(ctx context.Context, shard int, user int64, caption string) (int64, error) {
	defer w.timed(time.Now())
	if w.via != nil {
		return w.via.insert(ctx, shard, user, caption)
	}
	var id int64
	placed, err := w.write(ctx, shard, func(p *pgxpool.Pool, schema string) error {
		return p.QueryRow(ctx, `INSERT INTO `+ident(schema, "photos")+` (user_id, caption) VALUES ($1, $2) RETURNING id`,
			user, caption).Scan(&id)
	})
	if err == nil {
		w.mu.Lock()
		w.placed[id] = placed
		w.mu.Unlock()
	}
	return id, err
}

func (w *rawWriter) update(ctx context.Context, shard int, user, id int64, version int) error {
	defer w.timed(time.Now())
	if w.via != nil {
		return w.via.update(ctx, shard, user, id, version)
	}
	_, err := w.write(ctx, shard, func(p *pgxpool.Pool, schema string) error {
		tag, err := p.Exec(ctx, `UPDATE `+ident(schema, "photos")+` SET version = $2 WHERE id = $1`, id, version)
		if err == nil && tag.RowsAffected() != 1 {
			// The row was inserted and acknowledged on the shard's home:
			// an update that finds it missing there is a loss (or a write
			// routed to a server that is not the home), caught when it
			// happens rather than at the end.
			return fmt.Errorf("update of photo %d in %s found %d rows, want 1 (inserted on %s)", id, schema, tag.RowsAffected(), w.placedOf(id))
		}
		return err
	})
	return err
}

// placedOf says where the insert of photo id went.
func (w *rawWriter) placedOf(id int64) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.placed[id]
}

// run writes until ctx ends: one goroutine per shard, alternating inserts
// and updates of earlier rows.
func (w *rawWriter) run(ctx context.Context) func() {
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = w.r.Watch(wctx) }()
	// Statements run to the end on their own context, so every write the
	// database took is known to the writer; wctx only stops the loop.
	qctx := context.WithoutCancel(ctx)
	for _, shard := range w.shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []int64
			users := map[int64]int64{}
			for i := 0; wctx.Err() == nil; i++ {
				time.Sleep(w.pause)
				w.gate.RLock()
				if i%3 == 2 && len(mine) > 0 {
					id := mine[(i*7919)%len(mine)]
					w.mu.Lock()
					v := w.rows[id] + 1
					w.mu.Unlock()
					err := w.update(qctx, shard, users[id], id, v)
					w.done(err, func() { w.rows[id] = v })
					w.gate.RUnlock()
					continue
				}
				user := int64(shard + w.e.shards*(1+i%50)) // never 0: a zero key is "no key" to GORM
				id, err := w.insert(qctx, shard, user, fmt.Sprintf("photo %d", i))
				w.done(err, func() { w.rows[id] = 0; w.shardOf[id] = shard; users[id] = user; mine = append(mine, id) })
				w.gate.RUnlock()
			}
		}()
	}
	return func() { cancel(); wg.Wait() }
}

// hold pauses the writes once those under way finished; resume ends it.
func (w *rawWriter) hold() (resume func()) {
	w.gate.Lock()
	return w.gate.Unlock
}

func (w *rawWriter) done(err error, ok func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			w.failures = append(w.failures, err)
		}
		return
	}
	w.ops++
	ok()
}

// write runs fn on the shard's current home. A write the old home's fence
// refuses goes again where the map, reloaded, places the shard: the fence
// and the seal come after the map changed, so the reloaded map is newer
// than the one the write was routed by. A shard that moves twice in a row
// (the kill test cuts over, then rolls back at once) can refuse it again
// on the next home; each retry needs a newer map than the last, and one
// that is not newer fails the write, as a refusal the map does not explain.
// A write that finds no table where the map put the shard (42P01) goes
// again, like the plugin's, when the reloaded map puts the shard on
// another server: a rollback drops its copy right after flipping back.
// It returns where the write that succeeded went: the server, the map
// version that placed it there, and the time it ended.
func (w *rawWriter) write(ctx context.Context, shard int, fn func(p *pgxpool.Pool, schema string) error) (string, error) {
	start, reloaded := time.Now(), time.Now()
	for {
		snap := w.r.Snapshot()
		p, err := snap.Placement(shard)
		if err != nil {
			return "", err
		}
		if p.State == router.StateFenced {
			if time.Since(start) > w.bound {
				return "", fmt.Errorf("shard %d fenced for more than %v", shard, w.bound)
			}
			if err := sleep(ctx, 500*time.Microsecond); err != nil {
				return "", err
			}
			// The map's notification can come late on a loaded machine:
			// read the map itself too, as the plugin does (every 20 ms).
			if time.Since(reloaded) > 20*time.Millisecond {
				if _, err := w.r.Reload(ctx); err != nil {
					return "", err
				}
				reloaded = time.Now()
			}
			continue
		}
		err = fn(w.e.pools[p.Server], p.Schema)
		if (router.IsFenceError(err) || router.IsUndefinedTable(err)) && time.Since(start) <= w.bound {
			fresh, rerr := w.r.Reload(ctx)
			if rerr != nil {
				return "", rerr
			}
			if router.IsFenceError(err) && fresh.Version > snap.Version {
				continue
			}
			// No table where the map put the shard: a rollback dropped
			// that copy right after flipping the shard back, and the
			// write did nothing there. As the plugin does, run it again
			// on the shard's home if the map now puts it elsewhere.
			if now, perr := fresh.Placement(shard); perr == nil && router.IsUndefinedTable(err) && now.Server != p.Server {
				continue
			}
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		placed := fmt.Sprintf("%s (%s) by map v%d, done %s", p.Server, p.State, snap.Version, time.Now().Format("15:04:05.000"))
		if err != nil {
			return "", fmt.Errorf("write on %s: %w", placed, err)
		}
		return placed, nil
	}
}

// check verifies that every row the writer wrote is on the shard's current
// server exactly once with its last version, and nothing else is there.
func (w *rawWriter) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.failures) > 0 {
		t.Errorf("%d writes failed; first: %v", len(w.failures), w.failures[0])
	}
	for _, shard := range w.shards {
		want := w.wrote(shard)
		got := w.stored(t, shard)
		w.compare(t, shard, "", want, got, true)
	}
}

// checkSoFar verifies, while the writer runs, that every write to shard
// acknowledged so far is on the shard's current server with at least its
// version: a loss is then reported by the step that made it (what comes
// after, named after), not only at the end.
func (w *rawWriter) checkSoFar(t *testing.T, shard int, after string) {
	t.Helper()
	w.mu.Lock()
	want := w.wrote(shard)
	w.mu.Unlock()
	got := w.stored(t, shard)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.compare(t, shard, after, want, got, false)
	for _, err := range w.failures[w.reported:] {
		t.Errorf("a write failed before the end of %s: %v", after, err)
	}
	w.reported = len(w.failures)
}

// wrote returns the last version of each row of shard the writer wrote;
// w.mu is held.
func (w *rawWriter) wrote(shard int) map[int64]int {
	want := map[int64]int{}
	for id, v := range w.rows {
		if w.shardOf[id] == shard {
			want[id] = v
		}
	}
	return want
}

// stored returns the writer's rows of shard on the shard's current server.
func (w *rawWriter) stored(t *testing.T, shard int) map[int64]int {
	t.Helper()
	p := w.e.placement(t, shard)
	got := map[int64]int{}
	rows, err := w.e.pools[p.Server].Query(context.Background(), `SELECT id, version FROM `+ident(p.Schema, "photos")+` WHERE caption LIKE 'photo %'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var v int
		if err := rows.Scan(&id, &v); err != nil {
			t.Fatal(err)
		}
		got[id] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// compare reports the rows of want missing from got or with another
// version (exact: got's version equals want's and got holds nothing more;
// otherwise at least want's version, since writes went on); w.mu is held.
func (w *rawWriter) compare(t *testing.T, shard int, after string, want, got map[int64]int, exact bool) {
	t.Helper()
	where := ""
	if after != "" {
		where = " after " + after
	}
	bad := 0
	for id, v := range want {
		g, ok := got[id]
		switch {
		case !ok:
			t.Errorf("shard %d%s: photo %d lost (written on %s)", shard, where, id, w.placed[id])
			w.findRow(t, id)
			bad++
		case g != v && (exact || g < v):
			t.Errorf("shard %d%s: photo %d has version %d, want %d", shard, where, id, g, v)
			bad++
		}
	}
	if exact && len(got) != len(want) {
		t.Errorf("shard %d: %d rows, writer wrote %d", shard, len(got), len(want))
		bad++
	}
	if bad > 0 {
		w.logMoves(t, shard)
	}
}

// findRow logs every photos table on every server that holds the photo,
// for a loss report: a row on the wrong server or in a leftover schema
// says which step put it there.
func (w *rawWriter) findRow(t *testing.T, id int64) {
	t.Helper()
	ctx := context.Background()
	for name, p := range w.e.pools {
		rows, err := p.Query(ctx, `SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relname = 'photos' AND c.relkind = 'r'`)
		if err != nil {
			t.Logf("find photo %d on %s: %v", id, name, err)
			continue
		}
		var schemas []string
		for rows.Next() {
			var s string
			if rows.Scan(&s) == nil {
				schemas = append(schemas, s)
			}
		}
		rows.Close()
		for _, s := range schemas {
			var v int
			if err := p.QueryRow(ctx, `SELECT version FROM `+ident(s, "photos")+` WHERE id = $1`, id).Scan(&v); err == nil {
				t.Logf("photo %d is on %s in %s (version %d)", id, name, s, v)
			}
		}
	}
}

// logMoves logs the journal of shard's moves, for a loss report: each
// move's times, state, last step and positions.
func (w *rawWriter) logMoves(t *testing.T, shard int) {
	t.Helper()
	moves, err := RecentMoves(context.Background(), w.e.cat, 200)
	if err != nil {
		t.Logf("read the moves: %v", err)
		return
	}
	for _, m := range moves {
		if m.Shard == shard {
			t.Logf("move %d %s→%s %s/%s started %s updated %s final %s target %s err %q", m.ID, m.Source, m.Target, m.State, m.Step,
				m.Started.Format("15:04:05.000"), m.Updated.Format("15:04:05.000"), m.FinalLSN, m.TargetLSN, m.Error)
		}
	}
}
