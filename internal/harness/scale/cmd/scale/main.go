// Command scale runs the scale harness (make scale) at one or more sizes
// and prints one table per size: go run ./internal/harness/scale/cmd/scale
// -procs 20,100,300 -routers 4.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/shardkit/shardkit/internal/harness/scale"
)

func main() {
	scale.AppMain() // the app processes are this binary
	var o scale.Options
	procs := flag.String("procs", "20,100", "app processes (OS processes), one run per comma-separated size")
	flag.IntVar(&o.Routers, "routers", 4, "routers per process; all but one stand in for routers of other processes")
	flag.IntVar(&o.Servers, "servers", 2, "shard servers")
	flag.IntVar(&o.Shards, "shards", 2000, "logical shards")
	flag.IntVar(&o.Moves, "moves", 1, "shards moved in the middle of the load")
	flag.DurationVar(&o.Load, "load", 0, "load before and after the moves, each (0: 10s)")
	flag.DurationVar(&o.Every, "every", 0, "each process's write-and-read interval (0: 500ms)")
	flag.DurationVar(&o.Poll, "poll", 0, "the routers' map-version interval (0: router.DefaultPoll)")
	flag.StringVar(&o.WarmUp, "warmup", "off", "the plugin's start-up warm-up: off (the plugin's default), bounded, background or full")
	flag.BoolVar(&o.Direct, "direct", false, "connect the processes to the servers and the catalog directly, not through PgBouncers")
	flag.IntVar(&o.LeaseBits, "lease-bits", 0, "each process's ID lease width, 6 (whole slots: 63 processes) to 10 (1008 processes); 0: 6")
	flag.BoolVar(&o.Together, "together", false, "hold the spawned processes until all are, then start them at one moment (a fleet restarted at once); start-up is timed from it")
	flag.BoolVar(&o.FirstRead, "first-read", false, "time each process's first read across all shards")
	flag.IntVar(&o.Relays, "relays", 0, "relay processes (one per host in a deployment) that the routers wait on, instead of polling the catalog")
	flag.BoolVar(&o.OwnGORMPool, "own-gorm-pool", false, "open each process's GORM on a pool of its own on the catalog database, not on the catalog's pool")
	flag.Parse()
	if o.LeaseBits != 0 && (o.LeaseBits < 6 || o.LeaseBits > 10) {
		fmt.Fprintf(os.Stderr, "scale: -lease-bits %d: want 6 to 10 (or 0 for 6)\n", o.LeaseBits)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	failed := false
	for _, s := range strings.Split(*procs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			fmt.Fprintf(os.Stderr, "scale: -procs %q: %v\n", *procs, err)
			os.Exit(2)
		}
		o.Procs = n
		res, err := scale.Run(ctx, o, log)
		if err != nil {
			fmt.Fprintf(os.Stderr, "scale: %d processes: %v\n", n, err)
			os.Exit(1)
		}
		fmt.Println(res.Table())
		if err := res.OK(); err != nil {
			fmt.Println("FAILED:", err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}
