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
	s, err := r.cat.Load(ctx)
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

// Watch listens for shard-map changes and reloads on each, until ctx ends.
// A lost connection is re-established with backoff, and the map is
// reloaded after each reconnect, since notifications may have been missed.
// It returns ctx.Err().
func (r *Router) Watch(ctx context.Context) error {
	if r.cat == nil { // a map made by hand: nothing to listen to
		<-ctx.Done()
		return ctx.Err()
	}
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
