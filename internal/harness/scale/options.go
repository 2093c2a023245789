package scale

import (
	"fmt"
	"time"

	"github.com/shardkit/shardkit/router"
)

// Options configure one run of the harness (one size).
type Options struct {
	// Procs is the number of app processes (OS processes). 0 means 20.
	Procs int
	// Routers is the number of routers in each app process. The first
	// serves the plugin; each other stands in for a process of its own
	// for the properties that are not per process (map propagation,
	// catalog load): it opens its own catalog pool, so it makes its own
	// version checks, as a router in another process would. 0 means 1.
	Routers int
	// Servers is the number of shard servers (each a cluster). 0 means 2.
	Servers int
	// Shards is the logical shard count. 0 means 2000.
	Shards int
	// Moves is the number of shards moved, one after the other, from the
	// first server to the last in the middle of the load. 0 means 1.
	Moves int
	// Load is how long the load runs before and after the moves, each.
	// 0 means 10s.
	Load time.Duration
	// Every is the interval of each process's write-and-read. 0 means 500ms.
	Every time.Duration
	// Poll is the routers' map-version interval (router.WatchOptions.Poll).
	// 0 means router.DefaultPoll.
	Poll time.Duration
	// WarmUp is the plugin's start-up warm-up: "off" (the default, the
	// plugin's: the first read across shards opens the tables), "bounded"
	// (plugin.Config.WarmUpTimeout's default, 2s), "background" or "full" (no bound).
	WarmUp string
	// Direct connects the app processes to the servers and the catalog
	// directly instead of through a PgBouncer in front of each.
	Direct bool
	// Together holds every app process, once spawned, until all are, and
	// then lets them start at one moment: a fleet restarted at once, whose
	// start is not spread by the spawning (on a loaded machine the harness
	// takes seconds to spawn hundreds of processes). Start-up is then
	// timed from that moment.
	Together bool
	// FirstRead makes each process read across every shard once, timed,
	// right after start-up: the cost the warm-up is there to hide.
	FirstRead bool
	// LeaseBits is the width of each process's ID lease
	// (catalog.LeaserConfig.LeaseBits): 6, the default, leases whole slots
	// (63 processes make IDs in Go); 10 leases a 1024th of the sequence
	// space (1008 processes).
	LeaseBits int
	// Relays is the number of relay processes (package relay, one per
	// host in a deployment): 0 means none, the routers poll the catalog;
	// with relays, every router waits on one of them for each new map
	// version (the routers in turn, across the relays) and only the
	// plugin's router of each process opens the catalog, for its ID lease.
	Relays int
	// OwnGORMPool has each app process open GORM on a pool of its own on
	// the catalog database, as a process whose unsharded tables live
	// there might, instead of on the pool its router and ID lease use:
	// one more new backend on the catalog for each process's start.
	OwnGORMPool bool
	// Ready bounds the wait for every process to start. 0 means 5 minutes.
	Ready time.Duration
}

func (o Options) withDefaults() Options {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Procs, 20)
	def(&o.Routers, 1)
	def(&o.Servers, 2)
	def(&o.Shards, 2000)
	def(&o.Moves, 1)
	dur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	dur(&o.Load, 10*time.Second)
	dur(&o.Every, 500*time.Millisecond)
	dur(&o.Poll, router.DefaultPoll)
	dur(&o.Ready, 5*time.Minute)
	if o.WarmUp == "" {
		o.WarmUp = "off"
	}
	return o
}

func (o Options) validate() error {
	switch o.WarmUp {
	case "bounded", "background", "full", "off":
	default:
		return fmt.Errorf("scale: warm-up %q: want bounded, background, full or off", o.WarmUp)
	}
	if o.Servers < 2 {
		return fmt.Errorf("scale: %d servers: a move needs at least 2", o.Servers)
	}
	if o.Relays < 0 {
		return fmt.Errorf("scale: %d relays: want 0 or more", o.Relays)
	}
	if o.Procs < 1 || o.Routers < 1 || o.Shards < o.Servers || o.Moves < 0 {
		return fmt.Errorf("scale: %d processes, %d routers each, %d shards, %d moves: want at least 1, 1, one per server, 0", o.Procs, o.Routers, o.Shards, o.Moves)
	}
	return nil
}
