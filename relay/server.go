package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/shardkit/shardkit/router"
)

// Limits of the relay's protocol.
const (
	// MaxWait bounds how long a request waits for a newer version.
	MaxWait = time.Minute
	// history is how many recent versions the relay can send deltas
	// from; a client further behind gets the whole map.
	history = 32
)

// Server answers the routers of a host with the map of one router.Router,
// which the caller keeps current (router.Router.WatchWith, listening to
// the catalog).
//
// Its HTTP endpoints (GET):
//
//	/v1/version?after=V&wait=D  {"version": N}: the version in force, once it is past V (waiting at most D)
//	/v1/map?since=V&wait=D      the map once its version is past V: the placements changed after V when
//	                            the relay holds V, the whole map otherwise; 304 if D ends first
//	/v1/map                     the whole map
type Server struct {
	r  *router.Router
	id string // the catalog's identity, which every reply carries

	mu      sync.Mutex
	recent  []*router.Snapshot // ascending versions, the newest last
	next    chan struct{}      // closed when a newer version arrives
	encoded map[int64][]byte   // replies for the newest version, by since (0: the whole map)
}

// NewServer returns a relay server for r's map, which is the map of the
// catalog whose identity is catalogID (catalog.Stamp.ID): every reply
// carries it, and a client that expects another catalog refuses the map.
// Run must run for it to hear of new versions.
func NewServer(r *router.Router, catalogID string) *Server {
	s := &Server{r: r, id: catalogID, next: make(chan struct{}), encoded: map[int64][]byte{}}
	s.add(r.Snapshot())
	return s
}

// Run follows r's new versions until ctx ends, and returns ctx.Err().
func (s *Server) Run(ctx context.Context) error {
	updates, unsubscribe := s.r.Subscribe()
	defer unsubscribe()
	s.add(s.r.Snapshot()) // anything installed before the subscription
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case snap := <-updates:
			s.add(snap)
		}
	}
}

// add records snap if it is newer than the newest held and wakes the
// waiting requests.
func (s *Server) add(snap *router.Snapshot) {
	if snap == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.recent); n > 0 && s.recent[n-1].Version >= snap.Version {
		return
	}
	s.recent = append(s.recent, snap)
	if len(s.recent) > history {
		s.recent = append([]*router.Snapshot(nil), s.recent[len(s.recent)-history:]...)
	}
	s.encoded = map[int64][]byte{}
	close(s.next)
	s.next = make(chan struct{})
}

// await returns the newest snapshot once its version is past after, or
// nil if wait ends (or ctx does) first.
func (s *Server) await(ctx context.Context, after int64, wait time.Duration) *router.Snapshot {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		cur, next := s.recent[len(s.recent)-1], s.next
		s.mu.Unlock()
		if cur.Version > after {
			return cur
		}
		select {
		case <-next:
		case <-timer.C:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// reply returns the encoded reply of version cur for a client holding
// since (0: none): a delta when the relay still holds since, the whole
// map otherwise, each encoded once for every client that asks the same.
// The cache holds at most one reply per version held, whatever the
// clients send.
func (s *Server) reply(cur *router.Snapshot, since int64) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var old *router.Snapshot
	for _, o := range s.recent {
		if o.Version == since && o != cur {
			old = o
		}
	}
	encode := func() ([]byte, error) {
		if old != nil {
			return json.Marshal(delta(old, cur, s.id))
		}
		return json.Marshal(fullMap(cur, s.id))
	}
	if s.recent[len(s.recent)-1] != cur {
		return encode() // a newer version arrived meanwhile: not cached
	}
	key := int64(0)
	if old != nil {
		key = old.Version
	}
	if b, ok := s.encoded[key]; ok {
		return b, nil
	}
	b, err := encode()
	if err == nil {
		s.encoded[key] = b
	}
	return b, err
}

// ServeHTTP answers the endpoints listed on Server.
func (s *Server) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet {
		http.Error(w, "relay: only GET", http.StatusMethodNotAllowed)
		return
	}
	q := req.URL.Query()
	after, err1 := intParam(q.Get("after"))
	since, err2 := intParam(q.Get("since"))
	wait, err3 := waitParam(q.Get("wait"))
	if err := errors.Join(err1, err2, err3); err != nil {
		http.Error(w, "relay: "+err.Error(), http.StatusBadRequest)
		return
	}
	switch req.URL.Path {
	case "/v1/version":
		cur := s.await(req.Context(), after, wait)
		if cur == nil {
			cur = s.newest()
		}
		writeJSON(w, mustMarshal(wireVersion{Version: cur.Version}))
	case "/v1/map":
		cur := s.await(req.Context(), since, wait)
		if cur == nil {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		b, err := s.reply(cur, since)
		if err != nil {
			http.Error(w, "relay: "+err.Error(), http.StatusInternalServerError)
			return
		}
		writeJSON(w, b)
	default:
		http.NotFound(w, req)
	}
}

func (s *Server) newest() *router.Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recent[len(s.recent)-1]
}

func writeJSON(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

func mustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only fixed types of ints
	}
	return b
}

// intParam reads a version parameter: absent is 0.
func intParam(v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("version %q: want a number >= 0", v)
	}
	return n, nil
}

// waitParam reads a wait parameter (a Go duration, at most MaxWait):
// absent is 0, no wait.
func waitParam(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > MaxWait {
		return 0, fmt.Errorf("wait %q: want a duration from 0 to %v", v, MaxWait)
	}
	return d, nil
}

// Serve answers on l until ctx ends, at most MaxConns connections at
// once; then it stops accepting, ends the waiting requests and returns
// nil. l is a Unix socket (Listen checks its peers' uids) or a TCP
// listener from ListenTCP, which authenticates its clients; any other TCP
// listener is refused with ErrNoCredential.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	var h http.Handler = s
	if tl, ok := l.(*tcpListener); ok {
		h = tl.auth(s)
	} else if n := l.Addr().Network(); n != "unix" && n != "unixpacket" {
		_ = l.Close()
		return fmt.Errorf("relay: serve on %s %s: %w", n, l.Addr(), ErrNoCredential)
	}
	// A request is a GET line and a few headers: read it in seconds. A
	// reply may wait MaxWait for a new version before it is written. An
	// idle client's connection is closed after two of its long polls.
	hs := &http.Server{Handler: h, BaseContext: func(net.Listener) context.Context { return ctx },
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: MaxWait + 30*time.Second, IdleTimeout: 2*longPoll + 30*time.Second,
		MaxHeaderBytes: 8 << 10}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(limit(l, MaxConns)) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Start loads src's map, then follows it (a router kept current as o
// says: listening to the catalog, with a slow poll as a safety net, is
// the usual choice) and serves it on l until ctx ends. wait returns once
// all of it has stopped, with the first error that was not ctx's.
//
// The replies carry the identity of src's catalog when src has one (a
// *catalog.Catalog is a Verifier); a catalog without one (made before
// catalog version 13) is catalog.ErrNoIdentity.
func Start(ctx context.Context, src router.Source, l net.Listener, o router.WatchOptions) (s *Server, wait func() error, err error) {
	var id string
	if v, ok := src.(Verifier); ok {
		st, err := v.Stamp(ctx)
		if err != nil {
			_ = l.Close()
			return nil, nil, err
		}
		id = st.ID
	}
	r, err := router.New(ctx, src)
	if err != nil {
		_ = l.Close()
		return nil, nil, err
	}
	s = NewServer(r, id)
	errs := make(chan error, 3)
	for _, run := range []func() error{
		func() error { return r.WatchWith(ctx, o) },
		func() error { return s.Run(ctx) },
		func() error { return s.Serve(ctx, l) },
	} {
		go func() { errs <- run() }()
	}
	wait = func() error {
		var first error
		for range 3 {
			if err := <-errs; err != nil && !errors.Is(err, context.Canceled) && first == nil {
				first = err
			}
		}
		return first
	}
	return s, wait, nil
}

// Version returns the map version the server serves.
func (s *Server) Version() int64 { return s.newest().Version }
