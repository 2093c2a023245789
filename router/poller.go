package router

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"sync"
	"time"
)

// pollers holds the version checks shared by the polling routers of this
// process: routers that watch the same Source at the same interval share
// one check, one reload of the changed rows per map change, and so one
// catalog connection at a time, however many of them there are. The
// catalog's load then grows with the number of processes, not routers.
var pollers = struct {
	sync.Mutex
	m map[pollKey]*poller
}{m: map[pollKey]*poller{}}

type pollKey struct {
	src   Source
	every time.Duration
}

// poller is one shared version check: a goroutine that runs while at
// least one router is a member.
type poller struct {
	key     pollKey
	members map[*Router]int // router → how many of its WatchWith calls joined
	stop    context.CancelFunc
	done    chan struct{}
}

// shareable reports whether src can key the shared pollers: a Source
// whose dynamic type is not comparable (a struct holding a map, say)
// polls on its own.
func shareable(src Source) bool {
	return src != nil && reflect.TypeOf(src).Comparable()
}

// joinPoller makes r a member of the shared check of (src, every),
// starting it if r is the first, and returns the function that leaves
// it; the last to leave stops the check and waits for it to end.
func joinPoller(r *Router, every time.Duration) (leave func()) {
	key := pollKey{src: r.cat, every: every}
	pollers.Lock()
	p := pollers.m[key]
	if p == nil {
		ctx, cancel := context.WithCancel(context.Background())
		p = &poller{key: key, members: map[*Router]int{}, stop: cancel, done: make(chan struct{})}
		pollers.m[key] = p
		go p.run(ctx)
	}
	p.members[r]++
	pollers.Unlock()
	return func() {
		pollers.Lock()
		p.members[r]--
		if p.members[r] == 0 {
			delete(p.members, r)
		}
		last := len(p.members) == 0
		if last {
			delete(pollers.m, key)
		}
		pollers.Unlock()
		if last {
			p.stop()
			<-p.done
		}
	}
}

// routers returns the members and the newest snapshot any of them holds:
// the base the next reload of changed rows starts from.
func (p *poller) routers() ([]*Router, *Snapshot) {
	pollers.Lock()
	defer pollers.Unlock()
	rs := make([]*Router, 0, len(p.members))
	var newest *Snapshot
	for r := range p.members {
		rs = append(rs, r)
		if s := r.snap.Load(); s != nil && (newest == nil || s.Version > newest.Version) {
			newest = s
		}
	}
	return rs, newest
}

// run checks the map version every interval, the first time after a
// random part of it, so that processes started together (a fleet deployed
// at once) do not all ask at the same moment; each next check an interval
// after the previous one ended.
func (p *poller) run(ctx context.Context) {
	defer close(p.done)
	t := time.NewTimer(rand.N(p.key.every) + 1)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := p.check(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !failing:
			slog.Warn("shardkit: shard-map version check failed; trying again every interval", "err", err, "interval", p.key.every)
		case err == nil && failing:
			slog.Info("shardkit: shard-map version check works again")
		}
		failing = err != nil
		t.Reset(p.key.every)
	}
}

// check reads the newest map once, when the catalog has a newer version
// than the newest a member holds, and installs it in every member. A
// member behind the newest a member holds (one that joined after the
// others took a change) is brought to it first: the version check starts
// from the newest, so it would never see that member's map as old.
func (p *poller) check(ctx context.Context) error {
	rs, base := p.routers()
	if base == nil {
		return nil
	}
	for _, r := range rs {
		r.install(base)
	}
	s, err := newer(ctx, p.key.src, base)
	if err != nil || s == nil {
		return err
	}
	for _, r := range rs {
		r.install(s)
	}
	return nil
}

// newer returns the map in force at src when it is newer than cur, nil
// when it is not: a version check and the rows that changed when src can
// say which, the whole map otherwise.
func newer(ctx context.Context, src Source, cur *Snapshot) (*Snapshot, error) {
	vs, ok := src.(VersionSource)
	if !ok {
		s, err := src.Load(ctx)
		if err != nil || s.Version <= cur.Version {
			return nil, err
		}
		return s, nil
	}
	v, err := vs.MapVersion(ctx)
	if err != nil || v <= cur.Version {
		return nil, err
	}
	s, err := vs.LoadChanges(ctx, cur)
	if err != nil {
		return nil, err
	}
	return s, nil
}
