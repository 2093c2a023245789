package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// MapChannel is the Postgres notification channel on which the catalog
// announces a new shard-map version.
const MapChannel = "shardkit_map"

// ErrNoCatalog reports a catalog database that has not been initialised.
// Provision it first (shardctl init, migrations.Provision), or check that the
// DSN names the catalog's database.
var ErrNoCatalog = errors.New("catalog not initialised: provision it first (migrations.Provision)")

// Source is where a Router reads the shard map and hears of new versions:
// *catalog.Catalog is the one for production; NewFixed needs none.
type Source interface {
	// Load reads the whole shard map as one consistent snapshot.
	Load(ctx context.Context) (*Snapshot, error)
	// ListenMap opens a connection that receives a notification on
	// MapChannel for each new map version. The caller closes it.
	ListenMap(ctx context.Context) (Listener, error)
}

// VersionSource is a Source that can also answer the current map version
// alone, and read only the part of the map that changed since a snapshot:
// what a polling router (WatchOptions.Poll) asks on each check and on each
// change. *catalog.Catalog is one. A Source without these methods is
// polled with Load.
type VersionSource interface {
	Source
	// MapVersion returns the newest committed map version.
	MapVersion(ctx context.Context) (int64, error)
	// LoadChanges returns the map as it is now, made from since and what
	// changed after since.Version (see Snapshot.Next).
	LoadChanges(ctx context.Context, since *Snapshot) (*Snapshot, error)
}

// Listener delivers the notifications of one ListenMap connection.
type Listener interface {
	WaitForNotification(ctx context.Context) (*pgconn.Notification, error)
	Close(ctx context.Context) error
}

// Router holds the current shard-map snapshot and replaces it when the
// catalog announces a new version. It is safe for concurrent use; every
// caller of Snapshot gets one immutable, consistent map.
type Router struct {
	cat  Source
	snap atomic.Pointer[Snapshot]

	mu   sync.Mutex
	subs map[chan *Snapshot]struct{}
}

// New loads the shard map from src (a *catalog.Catalog).
func New(ctx context.Context, src Source) (*Router, error) {
	if src == nil {
		return nil, fmt.Errorf("shardkit: %w: router.New needs a source (catalog.Open)", ErrNoCatalog)
	}
	cat := src
	r := &Router{cat: cat, subs: map[chan *Snapshot]struct{}{}}
	if _, err := r.Reload(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// NewFixed returns a router over a shard map made by hand, with no
// catalog: Reload returns the map in force, Watch only waits for its
// context, and Set installs a new version. It serves tests of code that
// routes (the plugin's routing decisions, say) without a catalog database,
// and tools that work on one map version.
func NewFixed(snap *Snapshot) (*Router, error) {
	if snap == nil {
		return nil, fmt.Errorf("%w: nil snapshot", ErrBadCatalog)
	}
	r := &Router{subs: map[chan *Snapshot]struct{}{}}
	r.snap.Store(snap)
	return r, nil
}

// Set installs snap if it is newer than the map in force and tells the
// subscribers, as a reload after a catalog notification does. It returns
// the snapshot in force afterwards. Routers that have a catalog take
// their maps from it; Set is for maps made by hand (NewFixed).
func (r *Router) Set(snap *Snapshot) *Snapshot {
	return r.install(snap)
}

// Source returns where the router reads the shard map (the *catalog.Catalog
// given to New), or nil for a map made by hand (NewFixed).
func (r *Router) Source() Source { return r.cat }

// Snapshot returns the current shard map.
func (r *Router) Snapshot() *Snapshot { return r.snap.Load() }

// Reload reads the shard map now. A snapshot older than the current one is
// never installed. It returns the snapshot in force afterwards.
func (r *Router) Reload(ctx context.Context) (*Snapshot, error) {
	if r.cat == nil { // a map made by hand
		return r.snap.Load(), nil
	}
	cur := r.snap.Load()
	var s *Snapshot
	var err error
	if vs, ok := r.cat.(VersionSource); ok && cur != nil {
		// The rows that changed since cur: a router that meets a fenced
		// write reloads at once, and at a cutover many do together.
		s, err = vs.LoadChanges(ctx, cur)
	} else {
		s, err = r.cat.Load(ctx)
	}
	if err != nil {
		return nil, err
	}
	return r.install(s), nil
}

// install makes s the map in force unless a newer one already is.
func (r *Router) install(s *Snapshot) *Snapshot {
	for {
		cur := r.snap.Load()
		if cur != nil && cur.Version >= s.Version {
			return cur
		}
		if r.snap.CompareAndSwap(cur, s) {
			r.publish(s)
			return s
		}
	}
}

// Subscribe returns a channel that receives each newly installed snapshot
// (the newest only, if the reader is slow), and a function to unsubscribe.
func (r *Router) Subscribe() (<-chan *Snapshot, func()) {
	ch := make(chan *Snapshot, 1)
	r.mu.Lock()
	r.subs[ch] = struct{}{}
	r.mu.Unlock()
	return ch, func() {
		r.mu.Lock()
		delete(r.subs, ch)
		r.mu.Unlock()
	}
}

func (r *Router) publish(s *Snapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for ch := range r.subs {
		select {
		case <-ch: // drop the stale one
		default:
		}
		select {
		case ch <- s:
		default:
		}
	}
}

// DefaultPoll is the interval of the map-version check of a router that
// polls (WatchOptions with Listen false and Poll 0). Half a second keeps
// a map change within a second of every router (the interval, one check
// and one reload of the changed rows) at two small queries a second per
// process on the catalog.
const DefaultPoll = 500 * time.Millisecond

// WatchOptions says how a router learns of new map versions.
//
// Polling asks the catalog for the map version (one small query) every
// Poll through the catalog's shared pool, and on a new version reads only
// the rows that changed: it works through a connection pooler in
// transaction mode and costs no connection per router: the routers of a
// process that poll one source at one interval share one check (one
// query per interval, one reload of the changed rows per change), so the
// catalog's load grows with processes, not routers. A router
// serves a new map at most Poll plus one version check and one reload
// after the change commits. Listening holds one connection per router
// outside the pool (LISTEN needs a session: a direct connection, never a
// transaction pooler) and reloads within one round trip of the commit.
//
// The zero value polls every DefaultPoll and does not listen.
type WatchOptions struct {
	// Poll is the interval of the version check. 0 means DefaultPoll when
	// Listen is false and no polling when it is true; a negative value
	// means no polling with Listen, DefaultPoll without.
	Poll time.Duration
	// Listen holds a LISTEN connection on MapChannel and reloads on each
	// notification, and after each reconnect.
	Listen bool
}

// poll returns the interval of the version check, 0 for none.
func (o WatchOptions) poll() time.Duration {
	switch {
	case o.Poll > 0:
		return o.Poll
	case o.Listen:
		return 0
	default:
		return DefaultPoll
	}
}

// Watch listens for shard-map changes and reloads on each, until ctx ends:
// WatchWith(ctx, WatchOptions{Listen: true}). It holds a connection of its
// own on the catalog; behind a pooler, or with many routers, use
// WatchWith with polling.
func (r *Router) Watch(ctx context.Context) error {
	return r.WatchWith(ctx, WatchOptions{Listen: true})
}

// WatchWith keeps the router's map current as o says (polling, listening
// or both) until ctx ends, and returns ctx.Err(). Errors are logged and
// retried: a lost LISTEN connection is re-established with backoff and
// the map reloaded after each reconnect, since notifications may have
// been missed; a failed version check is tried again at the next interval.
func (r *Router) WatchWith(ctx context.Context, o WatchOptions) error {
	if r.cat == nil { // a map made by hand: nothing to watch
		<-ctx.Done()
		return ctx.Err()
	}
	every := o.poll()
	switch {
	case !o.Listen:
		return r.pollLoop(ctx, every)
	case every == 0:
		return r.listenLoop(ctx)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = r.pollLoop(ctx, every) }()
	err := r.listenLoop(ctx)
	<-done
	return err
}

func (r *Router) listenLoop(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for {
		err := r.listen(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		slog.Warn("shardkit: shard-map listener lost; reconnecting", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		if backoff < 5*time.Second {
			backoff *= 2
		}
	}
}

// pollLoop keeps the router's map current with a version check every
// interval, shared with the other routers of this process that poll the
// same source at the same interval (see pollers), until ctx ends.
func (r *Router) pollLoop(ctx context.Context, every time.Duration) error {
	if !shareable(r.cat) {
		return r.pollAlone(ctx, every)
	}
	leave := joinPoller(r, every)
	defer leave()
	<-ctx.Done()
	return ctx.Err()
}

// pollAlone is the version check of a router whose source cannot be
// shared: the same loop as a shared poller's, for this router alone.
func (r *Router) pollAlone(ctx context.Context, every time.Duration) error {
	p := &poller{key: pollKey{src: r.cat, every: every}, done: make(chan struct{})}
	p.members = map[*Router]int{r: 1}
	// p is not in pollers, but its members are read under that lock.
	p.run(ctx)
	return ctx.Err()
}

func (r *Router) listen(ctx context.Context) error {
	lc, err := r.cat.ListenMap(ctx)
	if err != nil {
		return err
	}
	defer lc.Close(context.Background())
	if _, err := r.Reload(ctx); err != nil {
		return err
	}
	for {
		n, err := lc.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if _, err := r.Reload(ctx); err != nil {
			return fmt.Errorf("reload after notification %q: %w", n.Payload, err)
		}
	}
}
