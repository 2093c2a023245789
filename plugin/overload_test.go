package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/shardkit/shardkit/internal/harness/testkit"
)

// holdProxy is a TCP proxy on loopback in front of a server. While it
// holds, it accepts connections and sends nothing on them (their startup
// waits, as on a server whose CPU is saturated by session starts) until
// released; then it passes them on to the server.
type holdProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cur   *holding // the hold in force; nil: not holding
	conns []net.Conn
}

// holding is one hold: the connections it holds, counted apart from an
// earlier hold's that are still on their way out.
type holding struct {
	release chan struct{} // closed when the held connections may go on
	held    int           // connections held now
	most    int           // most held at once
	from    time.Time     // when the first connection arrived
}

func startHoldProxy(t *testing.T, target string) *holdProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{ln: ln, target: target}
	t.Cleanup(p.close)
	go p.serve()
	return p
}

func (p *holdProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		h := p.cur
		if h != nil {
			if h.from.IsZero() {
				h.from = time.Now()
			}
			h.held++
			h.most = max(h.most, h.held)
		}
		p.mu.Unlock()
		go func() {
			if h != nil {
				<-h.release
				p.mu.Lock()
				h.held--
				p.mu.Unlock()
			}
			p.pass(c)
		}()
	}
}

// pass forwards c to the server until either side closes.
func (p *holdProxy) pass(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer s.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(s, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, s); done <- struct{}{} }()
	<-done
}

// hold makes new connections wait, counted afresh.
func (p *holdProxy) hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cur = &holding{release: make(chan struct{})}
}

// letGo passes the held connections on and stops holding.
func (p *holdProxy) letGo() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur != nil {
		close(p.cur.release)
		p.cur = nil
	}
}

// state returns the connections the hold in force holds now, the most it
// held at once, and how long since the first of them arrived.
func (p *holdProxy) state() (held, most int, since time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.cur
	if h == nil {
		return 0, 0, 0
	}
	if !h.from.IsZero() {
		since = time.Since(h.from)
	}
	return h.held, h.most, since
}

// close stops accepting (the port then refuses) and cuts every connection.
func (p *holdProxy) close() {
	_ = p.ln.Close()
	p.letGo()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

// heldConnectTimeout is the ConnectTimeout of the tests that hold b's
// startups. Their every statement dials anew (MaxIdleConns -1), a's too,
// and only b's held startups may outlast the bound. At 100 ms a dial of
// a's 127.0.0.1 port timed out once in the setup, while make test ran the
// plugin's plain and race suites beside a busy loop on two cores; the
// kernel counted no listen overflow or drop, so the connection was made
// and the test process saw it late.
const heldConnectTimeout = time.Second

// TestSlowStartupIsBackpressure puts server b behind a proxy that accepts
// its connections and holds their startup for longer than ConnectTimeout,
// as a server saturated by a fleet's session starts does, and checks what
// the plugin makes of it: a caller whose deadline passes gets a
// *BusyError matching its context's deadline, not a *ServerError, and b
// is not taken as down (the next statement tries it); callers with time
// to wait get their rows once the startups go through, with no more
// attempts under way at once than MaxConnecting; a's shards answer
// throughout. Then the proxy's port closes (refused, as a stopped
// server's): that is an outage, reported at once and taking b down.
func TestSlowStartupIsBackpressure(t *testing.T) {
	const connectTimeout = heldConnectTimeout
	const maxConnecting = 2
	var proxy *holdProxy
	e := newEnv(t, envOpts{
		appDSN: holdB(t, &proxy),
		cfg: func(c *Config) {
			c.ConnectTimeout = connectTimeout
			c.MaxConnecting = maxConnecting
			c.MaxIdleConns = -1 // every statement opens its own connection
		},
	})
	ua, ub := e.photoPerShard(t)
	if ua == 0 || ub == 0 {
		t.Fatal("want users on both servers")
	}
	health := func() ServerState {
		for _, h := range e.p.State().Servers {
			if h.Name == "b" {
				return h
			}
		}
		t.Fatal("State does not report server b")
		return ServerState{}
	}
	notDown := func(when string) {
		t.Helper()
		if h := health(); !h.Up || h.TakenDown != 0 {
			t.Fatalf("%s: server b is taken as down: %+v", when, h)
		}
	}
	read := func(ctx context.Context, user int64) error {
		var p Photo
		return e.db.WithContext(ctx).Where("user_id = ?", user).Take(&p).Error
	}

	// A caller whose deadline passes while b's startup is held.
	proxy.hold()
	const callerDeadline = 3 * connectTimeout
	ctx, cancel := context.WithTimeout(context.Background(), callerDeadline)
	start := time.Now()
	err := read(ctx, ub)
	took := time.Since(start)
	cancel()
	var be *BusyError
	if !errors.As(err, &be) || be.Server != "b" || !errors.Is(err, ErrServerBusy) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrServerUnavailable) {
		t.Fatalf("read past the caller's deadline: %v, want a *BusyError for b matching context.DeadlineExceeded and not ErrServerUnavailable", err)
	}
	if took < callerDeadline {
		t.Fatalf("read returned after %v, before the caller's deadline %v: it did not wait", took, callerDeadline)
	}
	t.Logf("caller's deadline: %v after %v", err, took.Round(time.Millisecond))
	notDown("after a caller's deadline")
	if err := read(context.Background(), ua); err != nil {
		t.Fatalf("read on a while b is slow: %v", err)
	}
	proxy.letGo()

	// Callers with time: they wait past ConnectTimeout, MaxConnecting at a
	// time reach b, and all get their rows once b starts the sessions.
	proxy.hold()
	const callers = 6
	errs := make(chan error, callers)
	for range callers {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), testkit.Wait)
			defer cancel()
			errs <- read(ctx, ub)
		}()
	}
	testkit.Until(t, testkit.Wait, func() error {
		if held, _, since := proxy.state(); held < maxConnecting || since < 3*connectTimeout {
			return fmt.Errorf("%d startups held for %v, want %d held for more than %v", held, since, maxConnecting, 3*connectTimeout)
		}
		return nil
	})
	notDown("while startups are held past ConnectTimeout")
	_, most, _ := proxy.state()
	proxy.letGo()
	for range callers {
		if err := <-errs; err != nil {
			t.Fatalf("read on b once its startups went through: %v", err)
		}
	}
	if most > maxConnecting {
		t.Fatalf("%d connection attempts to b under way at once, want at most MaxConnecting = %d", most, maxConnecting)
	}
	notDown("after the held startups went through")

	// A port that refuses is an outage: at once, and b taken as down.
	proxy.close()
	start = time.Now()
	err = read(context.Background(), ub)
	wantUnavailable(t, err, "b", "read on a refusing b")
	if h := health(); h.Up || h.TakenDown != 1 {
		t.Fatalf("a refusing b: %+v, want it taken as down once", h)
	}
	t.Logf("refused: %v after %v", err, time.Since(start).Round(time.Millisecond))
}

// TestFrozenStartupIsAnOutage holds b's startups without end, as a frozen
// server's kernel accepts connections that nothing answers: a statement
// whose caller has no deadline of its own gets a *ServerError once
// StatementTimeout (plus its grace) has passed, and b is taken as down, so
// the statements after fail at once until a retry finds it back. With no
// bound on statements (a negative StatementTimeout) a session's start is
// still bounded: the wait has an end (shortened here through the
// configuration's seam from defaultStatementTimeout plus a second).
func TestFrozenStartupIsAnOutage(t *testing.T) {
	for _, tt := range []struct {
		name             string
		statementTimeout time.Duration
		startupBound     time.Duration // the seam; 0: none
		want             time.Duration // the least a failure may take
	}{
		{"bounded statements", time.Second, 0, time.Second},
		{"no bound on statements", -1, 1500 * time.Millisecond, 1500 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var proxy *holdProxy
			e := newEnv(t, envOpts{
				appDSN: holdB(t, &proxy),
				cfg: func(c *Config) {
					c.ConnectTimeout = heldConnectTimeout
					c.StatementTimeout = tt.statementTimeout
					c.unboundedStartup = tt.startupBound
					c.ServerRetry = time.Hour // no retry within the test
					c.MaxIdleConns = -1       // every statement opens its own connection
				},
			})
			ub := e.userOn(t, "b", 1)
			if err := e.db.Create(&Photo{UserID: ub, Caption: "x"}).Error; err != nil {
				t.Fatal(err)
			}
			proxy.hold()
			defer proxy.letGo()
			start := time.Now()
			var p Photo
			err := e.db.Where("user_id = ?", ub).Take(&p).Error
			took := time.Since(start)
			wantUnavailable(t, err, "b", "read on a frozen b")
			if took < tt.want {
				t.Fatalf("read on a frozen b failed after %v, before its bound %v", took, tt.want)
			}
			t.Logf("frozen startup: %v after %v", err, took.Round(time.Millisecond))
			err = e.db.Where("user_id = ?", ub).Take(&p).Error
			if !knownDown(err) {
				t.Fatalf("read on b taken as down: %v, want the fast failure of a server known down", err)
			}
			if h := e.p.State().Servers; len(h) != 2 || h[1].Up || h[1].TakenDown != 1 {
				t.Fatalf("state %+v: want b down, taken down once", h)
			}
		})
	}
}

// holdB puts a holdProxy (*proxy) in front of server b's DSN.
func holdB(t *testing.T, proxy **holdProxy) func(server, direct string) string {
	return func(server, direct string) string {
		if server != "b" {
			return ""
		}
		u, err := url.Parse(direct)
		if err != nil {
			t.Fatal(err)
		}
		*proxy = startHoldProxy(t, u.Host)
		u.Host = (*proxy).ln.Addr().String()
		return u.String()
	}
}
