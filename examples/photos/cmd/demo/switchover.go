package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/examples/photos/app"
	"github.com/shardkit/shardkit/examples/photos/loadgen"
	"github.com/shardkit/shardkit/failover"
	"github.com/shardkit/shardkit/internal/harness/benchout"
	"github.com/shardkit/shardkit/internal/harness/pglocal"
)

// switchedServer is the server whose primary the -switchover run
// switches over to its standby.
const switchedServer = "pg1"

// addStandby gives server name's local cluster a synchronous standby and
// returns a DSN naming both hosts with target_session_attrs=read-write,
// and the standby's host:port.
func addStandby(ctx context.Context, set *pglocal.Set, primary *pglocal.Cluster) (dsn, to string, err error) {
	sb, err := set.AddStandby(ctx, primary, pglocal.StandbyOptions{Sync: true})
	if err != nil {
		return "", "", err
	}
	dsn = fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d user=postgres dbname=photos sslmode=disable target_session_attrs=read-write",
		primary.Port, sb.Port)
	return dsn, fmt.Sprintf("127.0.0.1:%d", sb.Port), nil
}

// loadAndSwitch is the -switchover run: the load, and in its middle a
// planned switchover of server pg1's primary to a synchronous standby
// made after the warm-up (failover.Switchover, as `shardctl server
// switchover` runs it). It prints the requests, their errors and the
// longest write during the switchover, writes them for make figures, and
// fails when a request failed.
func loadAndSwitch(ctx context.Context, o options, out io.Writer, c cluster, op *catalog.Catalog, a *app.App, url string, say func(string, ...any)) error {
	if c.standby == nil {
		return errors.New("demo: -switchover needs the local clusters (it makes a standby of one)")
	}
	runner := loadgen.New(loadgen.Config{URL: url, Users: o.users, Workers: o.workers, Progress: out, ProgressEvery: 2 * time.Second})
	say("load: creating %d users, their first photos and follows", o.users)
	if err := runner.Setup(ctx); err != nil {
		return err
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	loadDone := make(chan loadgen.Result, 1)
	go func() { loadDone <- runner.Run(loadCtx) }()
	say("load: running (uploads, likes, follows, feed reads) with %d workers", o.workers)
	if err := sleep(ctx, o.warmup); err != nil {
		return err
	}
	rep, err := switchUnderLoad(ctx, c, op, a, runner, say)
	if err != nil {
		stopLoad()
		<-loadDone
		return err
	}
	if err := sleep(ctx, o.cooldown); err != nil {
		return err
	}
	stopLoad()
	res := <-loadDone
	say("load stopped")
	res.Print(out)
	longest, wait := runner.WindowMaxWrite(), a.Metrics.MaxFenceWait()
	fmt.Fprintf(out, "\nswitchover of %s: writes held %v (fence to release); longest write request during it %v; longest fence wait in the plugin %v; request errors %d of %d\n",
		switchedServer, rep.Fenced.Round(time.Millisecond), longest.Round(time.Millisecond), wait.Round(time.Millisecond), res.Errors, res.Requests)
	millis := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	if err := benchout.Write("DemoSwitchover",
		benchout.Metric{Value: float64(res.Requests), Unit: "requests"},
		benchout.Metric{Value: res.Throughput(), Unit: "req/s"},
		benchout.Metric{Value: float64(res.Errors), Unit: "errors"},
		benchout.Metric{Value: millis(rep.Fenced), Unit: "fenced-ms"},
		benchout.Metric{Value: millis(longest), Unit: "longest-write-ms"},
		benchout.Metric{Value: millis(wait), Unit: "fence-wait-ms"},
	); err != nil {
		return err
	}
	if res.Errors > 0 {
		return fmt.Errorf("demo: %d requests failed across the switchover: %v", res.Errors, res.FirstErrors)
	}
	return nil
}

// switchUnderLoad makes the standby of pg1, registers pg1 under both
// hosts with its primary recorded, waits until the service uses that,
// and runs the switchover with the load generator's window marked.
func switchUnderLoad(ctx context.Context, c cluster, op *catalog.Catalog, a *app.App, runner *loadgen.Runner, say func(string, ...any)) (*failover.Report, error) {
	say("making a synchronous standby of %s (pg_basebackup under the load)", switchedServer)
	dsn, to, err := c.standby(ctx, switchedServer)
	if err != nil {
		return nil, err
	}
	// The service's DSN is its login's, the operator's the superuser's:
	// both name the two hosts.
	cat := op
	appDSN := strings.Replace(dsn, "user=postgres", "user="+appLogin, 1)
	if err := cat.Update(ctx, func(ctx context.Context, tx *catalog.Tx) error {
		return tx.SetServerDSN(ctx, switchedServer, appDSN, dsn)
	}); err != nil {
		return nil, err
	}
	rec, _, err := cat.RecordServerPrimary(ctx, switchedServer)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if srv, _ := a.Router.Snapshot().Server(switchedServer); srv.Primary == rec {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("demo: the service did not see %s's primary recorded", switchedServer)
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return nil, err
		}
	}
	say("%s registered under both hosts, primary recorded (%s); load on the new pools for 3 s", switchedServer, rec)
	if err := sleep(ctx, 3*time.Second); err != nil {
		return nil, err
	}
	say("shardctl server switchover %s --to %s", switchedServer, to)
	runner.MarkWindow(true)
	rep, err := failover.Switchover(ctx, cat, switchedServer, failover.Options{To: to, Progress: func(s failover.Step) { say("  %s", s) }})
	if err != nil {
		runner.MarkWindow(false)
		return nil, err
	}
	// A request counts in the window when it ends: the writes the fence
	// held end after the release, within the service's fence wait.
	err = sleep(ctx, 2*time.Second)
	runner.MarkWindow(false)
	if err != nil {
		return nil, err
	}
	say("switchover done: %s is the primary of %s", rep.New, switchedServer)
	return rep, nil
}
