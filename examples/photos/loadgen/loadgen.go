// Package loadgen drives the photo API with a mix of users, photo uploads,
// likes, follows and feed reads, and measures throughput, latency
// percentiles and request errors.
//
//	res, err := loadgen.Run(ctx, loadgen.Config{URL: "http://localhost:8080", Users: 100, Duration: 30 * time.Second})
//	res.Print(os.Stdout)
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Operations, as named in the results.
const (
	OpCreateUser = "create_user"
	OpFollow     = "follow"
	OpUpload     = "upload"
	OpGetPhoto   = "get_photo"
	OpListPhotos = "list_photos"
	OpLike       = "like"
	OpLikes      = "list_likes"
	OpFeed       = "feed"
)

// Config configures a run. The zero value of each field means its default.
type Config struct {
	URL           string        // base URL of the photo service; required
	Users         int           // users created at setup; 0 means 100
	Follows       int           // follows per user at setup; 0 means 10
	Workers       int           // concurrent clients; 0 means 8
	Duration      time.Duration // length of the mixed phase; 0 means until ctx ends
	Progress      io.Writer     // progress lines while running; nil means none
	ProgressEvery time.Duration // 0 means 1s
	Client        *http.Client  // nil means a client with a 30 s timeout
	Seed          uint64        // random seed; 0 means random
}

func (c Config) withDefaults() Config {
	if c.Users == 0 {
		c.Users = 100
	}
	if c.Follows == 0 {
		c.Follows = 10
	}
	c.Follows = min(c.Follows, c.Users-1)
	if c.Workers == 0 {
		c.Workers = 8
	}
	if c.ProgressEvery == 0 {
		c.ProgressEvery = time.Second
	}
	if c.Client == nil {
		c.Client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	return c
}

// Runner is one load run: Setup creates users and follows, Run drives the mix.
type Runner struct {
	cfg    Config
	c      *client
	users  []string // user IDs (as the API writes them)
	photos ring
	made   atomic.Int64
	start  time.Time
}

// New returns a runner.
func New(cfg Config) *Runner {
	cfg = cfg.withDefaults()
	return &Runner{cfg: cfg, c: &client{base: cfg.URL, http: cfg.Client, stats: newStats()}}
}

// Run sets up and runs a load with cfg.
func Run(ctx context.Context, cfg Config) (Result, error) {
	r := New(cfg)
	if err := r.Setup(ctx); err != nil {
		return r.Result(), err
	}
	return r.Run(ctx), nil
}

// Counts returns the requests made so far and how many failed.
func (r *Runner) Counts() (requests, errors int) { return r.c.stats.counts() }

// MarkWindow starts (true) or ends (false) a window in which the longest
// write is remembered: the demo marks its shard moves.
func (r *Runner) MarkWindow(on bool) {
	r.c.stats.mu.Lock()
	r.c.stats.windowOn = on
	r.c.stats.mu.Unlock()
}

// WindowMaxWrite is the longest write seen inside marked windows.
func (r *Runner) WindowMaxWrite() time.Duration {
	r.c.stats.mu.Lock()
	defer r.c.stats.mu.Unlock()
	return r.c.stats.windowMx
}

// Users returns the IDs of the users made at setup.
func (r *Runner) Users() []string { return r.users }

type idOnly struct {
	ID string `json:"id"`
}

// Setup creates the users, each with an avatar photo, and the follows.
func (r *Runner) Setup(ctx context.Context) error {
	r.start = time.Now()
	r.users = make([]string, r.cfg.Users)
	err := r.parallel(ctx, r.cfg.Users, func(ctx context.Context, rng *rand.Rand, i int) error {
		var u idOnly
		if err := r.c.call(ctx, OpCreateUser, "POST", "/users", map[string]string{"name": "user " + strconv.Itoa(i)}, &u); err != nil {
			return err
		}
		r.users[i] = u.ID
		return r.upload(ctx, rng, u.ID)
	})
	if err != nil {
		return fmt.Errorf("loadgen: create users: %w", err)
	}
	err = r.parallel(ctx, r.cfg.Users, func(ctx context.Context, rng *rand.Rand, i int) error {
		for _, j := range rng.Perm(r.cfg.Users)[:r.cfg.Follows+1] {
			if j == i {
				continue
			}
			if err := r.follow(ctx, r.users[i], r.users[j]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("loadgen: follows: %w", err)
	}
	return nil
}

// parallel runs fn for 0..n-1 on the workers; it returns the first error
// once all are done. Errors are also counted in the stats.
func (r *Runner) parallel(ctx context.Context, n int, fn func(context.Context, *rand.Rand, int) error) error {
	var (
		next  atomic.Int64
		first error
		once  sync.Once
		wg    sync.WaitGroup
	)
	for w := 0; w < r.cfg.Workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(w)))
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(ctx, rng, i); err != nil {
					once.Do(func() { first = err })
				}
			}
		}(w)
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

func (r *Runner) upload(ctx context.Context, rng *rand.Rand, user string) error {
	var p idOnly
	in := map[string]any{
		"caption": fmt.Sprintf("photo %d", rng.IntN(1_000_000)),
		"url":     fmt.Sprintf("https://cdn.example.com/%s/%d.jpg", user, rng.Uint32()),
		"width":   1080, "height": 1350,
	}
	if err := r.c.call(ctx, OpUpload, "POST", "/users/"+user+"/photos", in, &p); err != nil {
		return err
	}
	r.photos.add(p.ID)
	r.made.Add(1)
	return nil
}

func (r *Runner) follow(ctx context.Context, a, b string) error {
	err := r.c.call(ctx, OpFollow, "POST", "/users/"+a+"/follows", map[string]string{"followee_id": b}, nil, http.StatusConflict)
	return okConflict(err)
}

func okConflict(err error) error {
	var se *StatusError
	if errors.As(err, &se) && se.Status == http.StatusConflict {
		return nil
	}
	return err
}

type page struct {
	Items      []idOnly `json:"items"`
	NextBefore string   `json:"next_before"`
}

// step runs one random operation for a random user.
func (r *Runner) step(ctx context.Context, rng *rand.Rand) {
	user := r.users[rng.IntN(len(r.users))]
	switch x := rng.IntN(100); {
	case x < 30:
		_ = r.upload(ctx, rng, user)
	case x < 52:
		if id, ok := r.photos.pick(rng); ok {
			err := r.c.call(ctx, OpLike, "POST", "/photos/"+id+"/likes", map[string]string{"user_id": user}, nil, http.StatusConflict)
			_ = okConflict(err)
		}
	case x < 77:
		_ = r.c.call(ctx, OpFeed, "GET", "/users/"+user+"/feed?limit=20", nil, nil)
	case x < 87:
		var p page
		if r.c.call(ctx, OpListPhotos, "GET", "/users/"+user+"/photos?limit=5", nil, &p) == nil && p.NextBefore != "" {
			_ = r.c.call(ctx, OpListPhotos, "GET", "/users/"+user+"/photos?limit=5&before="+p.NextBefore, nil, nil)
		}
	case x < 94:
		if id, ok := r.photos.pick(rng); ok {
			_ = r.c.call(ctx, OpGetPhoto, "GET", "/photos/"+id, nil, nil)
		}
	case x < 98:
		if id, ok := r.photos.pick(rng); ok {
			_ = r.c.call(ctx, OpLikes, "GET", "/photos/"+id+"/likes?limit=20", nil, nil)
		}
	default:
		if other := r.users[rng.IntN(len(r.users))]; other != user {
			_ = r.follow(ctx, user, other)
		}
	}
}

// Run drives the mixed load until cfg.Duration passes or ctx ends, printing
// progress, and returns the figures of the whole run (setup included).
func (r *Runner) Run(ctx context.Context) Result {
	if r.start.IsZero() {
		r.start = time.Now()
	}
	if len(r.users) == 0 {
		return r.Result()
	}
	if r.cfg.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.cfg.Duration)
		defer cancel()
	}
	done := make(chan struct{})
	go r.progress(done)
	var wg sync.WaitGroup
	for w := 0; w < r.cfg.Workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(1000+w)))
			for ctx.Err() == nil {
				r.step(ctx, rng)
			}
		}(w)
	}
	wg.Wait()
	close(done)
	res := r.Result()
	if r.cfg.Progress != nil {
		fmt.Fprintln(r.cfg.Progress)
	}
	return res
}

func (r *Runner) progress(done <-chan struct{}) {
	if r.cfg.Progress == nil {
		return
	}
	tty := isTerminal(r.cfg.Progress)
	t := time.NewTicker(r.cfg.ProgressEvery)
	defer t.Stop()
	last, lastAt := 0, time.Now()
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			n, errs := r.Counts()
			rate := float64(n-last) / now.Sub(lastAt).Seconds()
			last, lastAt = n, now
			line := fmt.Sprintf("load: %5.1fs  %7d requests  %6.0f req/s  %d errors  %d photos",
				now.Sub(r.start).Seconds(), n, rate, errs, r.made.Load())
			if tty {
				fmt.Fprintf(r.cfg.Progress, "\r%s   ", line)
			} else {
				fmt.Fprintln(r.cfg.Progress, line)
			}
		}
	}
}

// Result returns the figures so far.
func (r *Runner) Result() Result {
	n, errs := r.Counts()
	r.c.stats.mu.Lock()
	first := append([]string(nil), r.c.stats.firstErrs...)
	r.c.stats.mu.Unlock()
	return Result{Elapsed: time.Since(r.start), Requests: n, Errors: errs, Ops: r.c.stats.ops(),
		FirstErrors: first, Users: len(r.users), Photos: int(r.made.Load())}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// ring keeps the IDs of recent photos for likes and reads.
type ring struct {
	mu  sync.Mutex
	ids []string
	n   int
}

const ringSize = 4096

func (g *ring) add(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.ids) < ringSize {
		g.ids = append(g.ids, id)
	} else {
		g.ids[g.n%ringSize] = id
	}
	g.n++
}

func (g *ring) pick(rng *rand.Rand) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.ids) == 0 {
		return "", false
	}
	return g.ids[rng.IntN(len(g.ids))], true
}
