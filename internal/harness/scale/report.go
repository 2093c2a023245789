package scale

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shardkit/shardkit/internal/harness/procmem"
)

// Result is what one run measured.
type Result struct {
	Options Options

	// Per OS process.
	IDs, Duplicates, Misplaced int
	GoPath, DBPath             int // processes whose IDs were made in Go / by next_id()
	Writes, Reads, Errors      int
	TakenDown                  int // times a process's plugin took a server as down, all processes
	ErrorSamples               []string
	Startup                    []time.Duration            // spawn to ready, each process
	Phases                     [numPhases][]time.Duration // each process's time in each step of its start (phaseNames)
	AllReady                   time.Duration              // first spawn to the last process's start-up done
	FirstRead                  []time.Duration            // each process's first read across all shards
	RSSStart, RSSEnd           []float64                  // MB, each process
	RSSMid, RSSLate            []float64                  // MB, each process, read from outside before the moves and at the end of the load
	HeapStart, HeapEnd         []float64                  // MB, each process

	// Per router (the stand-ins included).
	Routers      int
	Flips        int             // map versions announced during the load
	Propagation  []time.Duration // flip → router serves it, every (router, flip)
	Stale        int             // routers not on the final version at the end
	NeverReached int             // (router, flip) pairs the router never served
	FinalVersion int64

	// The catalog, over Window (all processes ready to the end of the load).
	CatalogCPU      float64 // seconds, the cluster and its pooler
	Window          time.Duration
	CatalogBackends int     // most client backends seen on the catalog
	CatalogClients  int     // most client connections seen on its pooler; 0 when direct
	RelayCPU        float64 // seconds, all relay processes, over Window

	// The shard servers' client backends, and their poolers' clients
	// (most seen, all servers; 0 when direct).
	ServerClients              int
	ServerStartCPU             float64 // seconds, all shard servers, first spawn to every process ready
	ServerCPU                  float64 // seconds, all shard servers, over Window
	BackendsStart, BackendsEnd procmem.Backends
	MoveTimes                  []time.Duration
}

// OK reports whether the run found no duplicate or misplaced ID, no
// request error, no server taken as down and no router left on an old
// map; else why not.
func (r *Result) OK() error {
	var why []string
	if r.Duplicates > 0 {
		why = append(why, fmt.Sprintf("%d duplicate IDs", r.Duplicates))
	}
	if r.Misplaced > 0 {
		why = append(why, fmt.Sprintf("%d IDs outside their key's shard", r.Misplaced))
	}
	if r.Errors > 0 {
		why = append(why, fmt.Sprintf("%d request errors (%s)", r.Errors, strings.Join(r.ErrorSamples, "; ")))
	}
	if r.TakenDown > 0 {
		why = append(why, fmt.Sprintf("servers taken as down %d times", r.TakenDown))
	}
	if r.Stale > 0 || r.NeverReached > 0 {
		why = append(why, fmt.Sprintf("%d routers left on an old map, %d flips never served", r.Stale, r.NeverReached))
	}
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("scale: %s", strings.Join(why, ", "))
}

func (r *Result) summarise(procs []*proc, flips map[int64]int64) {
	var ids []int64
	first := procs[0].spawned
	for _, p := range procs {
		rep := p.report
		ids = append(ids, rep.IDs...)
		r.Misplaced += rep.Misplaced
		if rep.Path == "go" {
			r.GoPath++
		} else {
			r.DBPath++
		}
		r.Writes += rep.Writes
		r.Reads += rep.Reads
		r.Errors += rep.Errors
		r.TakenDown += rep.TakenDown
		for _, s := range rep.Samples {
			if len(r.ErrorSamples) < 5 {
				r.ErrorSamples = append(r.ErrorSamples, s)
			}
		}
		r.Startup = append(r.Startup, rep.Startup)
		for i, d := range rep.phases() {
			r.Phases[i] = append(r.Phases[i], d)
		}
		r.AllReady = max(r.AllReady, p.spawned.Sub(first)+rep.Startup)
		if rep.FirstRead > 0 {
			r.FirstRead = append(r.FirstRead, rep.FirstRead)
		}
		r.RSSStart, r.RSSEnd = append(r.RSSStart, rep.Start.RSSMB), append(r.RSSEnd, rep.End.RSSMB)
		r.HeapStart, r.HeapEnd = append(r.HeapStart, rep.Start.HeapMB), append(r.HeapEnd, rep.End.HeapMB)
		for i := range rep.Routers {
			rl := &rep.Routers[i]
			r.Routers++
			if rl.Final < r.FinalVersion {
				r.Stale++
			}
			for v, at := range flips {
				if rl.First >= v {
					continue // it started on this version or later
				}
				i := slices.IndexFunc(rl.Versions, func(x int64) bool { return x >= v })
				if i < 0 {
					r.NeverReached++
					continue
				}
				r.Propagation = append(r.Propagation, max(0, time.Duration(rl.At[i]-at)))
			}
		}
	}
	r.Flips = len(flips)
	r.IDs = len(ids)
	slices.Sort(ids)
	for i := 1; i < len(ids); i++ {
		if ids[i] == ids[i-1] {
			r.Duplicates++
		}
	}
	slices.Sort(r.Propagation)
	slices.Sort(r.Startup)
	for _, p := range r.Phases {
		slices.Sort(p)
	}
	slices.Sort(r.FirstRead)
}

// The steps of an app process's start, in order.
const (
	phaseCatalog = iota // the catalog pool opened and pinged (the plugin's router's)
	phaseMap            // every router's first map load (and the other routers' catalogs)
	phaseLease          // the ID slot leased (or refused)
	phaseGORM           // gorm.Open on the catalog database
	phaseUse            // db.Use: the servers' pools, table check, collations
	numPhases
)

var phaseNames = [numPhases]string{"catalog open", "map loaded", "ID lease", "GORM open", "plugin Use"}

// phases splits a process's start-up into the time each step took.
func (rep *appReport) phases() [numPhases]time.Duration {
	marks := [numPhases]time.Duration{rep.CatOpened, rep.Routed, rep.Leased, rep.Opened, rep.Startup}
	var out [numPhases]time.Duration
	var prev time.Duration
	for i, m := range marks {
		out[i], prev = m-prev, m
	}
	return out
}

// quantile returns the q-quantile of sorted values (0 for none).
func quantile[T any](sorted []T, q float64) T {
	var zero T
	if len(sorted) == 0 {
		return zero
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%d ms", d.Milliseconds()) }

func mbStats(v []float64) string {
	s := slices.Clone(v)
	slices.Sort(s)
	return fmt.Sprintf("%.1f / %.1f MB", quantile(s, 0.5), quantile(s, 1))
}

// Table is the run's report, one row per figure, with where each figure
// comes from.
func (r *Result) Table() string {
	o := r.Options
	var b strings.Builder
	watch := fmt.Sprintf("poll %v", o.Poll)
	if o.Relays > 0 {
		watch = fmt.Sprintf("%d relays", o.Relays)
	}
	fmt.Fprintf(&b, "### %d processes × %d routers = %d routers; %d servers, %d shards, %s, warm-up %s, %s, a write and a read per process every %v\n\n",
		o.Procs, o.Routers, r.Routers, o.Servers, o.Shards, map[bool]string{true: "direct", false: "through PgBouncer"}[o.Direct],
		o.WarmUp, watch, o.Every)
	b.WriteString("| figure | value | from |\n|---|---|---|\n")
	row := func(name, value, from string) { fmt.Fprintf(&b, "| %s | %s | %s |\n", name, value, from) }
	row("IDs issued / duplicates / outside their shard", fmt.Sprintf("%d / %d / %d", r.IDs, r.Duplicates, r.Misplaced), "processes")
	row("ID path (processes)", fmt.Sprintf("Go-made %d, next_id() %d", r.GoPath, r.DBPath), "processes")
	row("requests / errors", fmt.Sprintf("%d / %d", r.Writes+r.Reads, r.Errors), "processes")
	row("servers taken as down (times, all processes)", fmt.Sprint(r.TakenDown), "processes")
	row("shard moves (each)", durations(r.MoveTimes), "harness")
	row("flip → every router (p50 / p99 / max)", fmt.Sprintf("%s / %s / %s over %d flips × routers",
		ms(quantile(r.Propagation, 0.5)), ms(quantile(r.Propagation, 0.99)), ms(quantile(r.Propagation, 1)), len(r.Propagation)), "routers")
	row("routers on an old map at the end", fmt.Sprint(r.Stale), "routers")
	clients := "direct"
	if !o.Direct {
		clients = fmt.Sprint(r.CatalogClients)
	}
	row("catalog: backends (most) / pooler clients (most)", fmt.Sprintf("%d / %s", r.CatalogBackends, clients), "routers")
	perRouter := 0.0
	if r.Routers > 0 && r.Window > 0 {
		perRouter = r.CatalogCPU / r.Window.Seconds() / float64(r.Routers) * 1000
	}
	row("catalog CPU (cluster + pooler)", fmt.Sprintf("%.1f s in %.0f s = %.1f%% of a core; %.3f ms/s per router",
		r.CatalogCPU, r.Window.Seconds(), 100*r.CatalogCPU/max(r.Window.Seconds(), 1e-9), perRouter), "routers")
	if o.Relays > 0 {
		perRouter := 0.0
		if r.Routers > 0 && r.Window > 0 {
			perRouter = r.RelayCPU / r.Window.Seconds() / float64(r.Routers) * 1000
		}
		row(fmt.Sprintf("relays' CPU (%d processes)", o.Relays), fmt.Sprintf("%.1f s in %.0f s = %.1f%% of a core; %.3f ms/s per router",
			r.RelayCPU, r.Window.Seconds(), 100*r.RelayCPU/max(r.Window.Seconds(), 1e-9), perRouter), "routers")
	}
	startup := "start-up: spawn → plugin ready (p50 / max; first spawn → last ready)"
	if o.Together {
		startup = "start-up, all let go at once: go → plugin ready (p50 / max; go → last ready)"
	}
	row(startup, fmt.Sprintf("%s / %s; %s", ms(quantile(r.Startup, 0.5)), ms(quantile(r.Startup, 1)), ms(r.AllReady)), "processes")
	var phases []string
	for i, name := range phaseNames {
		phases = append(phases, fmt.Sprintf("%s %s / %s", name, ms(quantile(r.Phases[i], 0.5)), ms(quantile(r.Phases[i], 1))))
	}
	row("… each step of it (p50 / max)", strings.Join(phases, ", "), "processes")
	row("shard servers' CPU: start-up (per process) / load", fmt.Sprintf("%.1f s (%.0f ms) / %.1f s in %.0f s = %.1f%% of a core",
		r.ServerStartCPU, 1000*r.ServerStartCPU/float64(max(o.Procs, 1)), r.ServerCPU, r.Window.Seconds(), 100*r.ServerCPU/max(r.Window.Seconds(), 1e-9)), "servers")
	if len(r.FirstRead) > 0 {
		row("first read across all shards (p50 / max)", fmt.Sprintf("%s / %s", ms(quantile(r.FirstRead, 0.5)), ms(quantile(r.FirstRead, 1))), "processes")
	}
	row("process RSS start → before the move → end of the load (p50 / max)", mbStats(r.RSSStart)+" → "+mbStats(r.RSSMid)+" → "+mbStats(r.RSSLate), "processes")
	row("process Go heap start → end (p50 / max)", mbStats(r.HeapStart)+" → "+mbStats(r.HeapEnd), "processes")
	row("server backends start → end (count, private MB total / largest)", fmt.Sprintf("%d, %.0f / %.1f → %d, %.0f / %.1f",
		r.BackendsStart.Count, r.BackendsStart.TotalMB, r.BackendsStart.MaxMB, r.BackendsEnd.Count, r.BackendsEnd.TotalMB, r.BackendsEnd.MaxMB), "servers")
	if !o.Direct {
		row("server poolers: client connections (most, all servers)", fmt.Sprint(r.ServerClients), "processes")
	}
	return b.String()
}

func durations(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = d.Round(100 * time.Millisecond).String()
	}
	return strings.Join(s, ", ")
}
