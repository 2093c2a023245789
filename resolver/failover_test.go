package resolver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/pglocal"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/shardschema"
	"github.com/shardkit/shardkit/router"
)

// TestResolverAfterParticipantFailover: server b fails over (its
// synchronous standby promoted, the promotion recorded) with a prepared
// part of a committed atomic transaction on it, and its old primary comes
// back writable on its old timeline, with the same part. The resolver
// reaches b only on its recorded primary: through a DSN naming the old
// primary alone it is refused (router.ErrNotPrimary) and touches nothing
// there; through the DSN naming both hosts it commits the part on the
// promoted standby. The old primary's copy of the part stays prepared:
// committing it there would commit nothing the server now serves.
func TestResolverAfterParticipantFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	set := pgtest.Set(t)
	old, err := set.Add(ctx, pglocal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = old.Stop() })
	c := &cluster{dsn: map[string]string{"a": pgtest.NewDatabase(t, 0), "b": pgtest.NewDatabase(t, len(set.Clusters)-1)}}
	for _, dsn := range c.dsn {
		pgtest.Exec(t, dsn, `CREATE TABLE t (note text)`)
		if err := shardschema.EnsureServer(ctx, pgtest.Connect(t, dsn), idgen.DefaultLayout()); err != nil {
			t.Fatal(err)
		}
	}
	standby, err := set.AddStandby(ctx, old, pglocal.StandbyOptions{Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = standby.Stop() })
	pc, err := pgconn.ParseConfig(c.dsn["b"])
	if err != nil {
		t.Fatal(err)
	}
	hostDSN := func(ports ...int) string {
		hosts, ps := "127.0.0.1", fmt.Sprint(ports[0])
		for _, p := range ports[1:] {
			hosts, ps = hosts+",127.0.0.1", ps+","+fmt.Sprint(p)
		}
		return fmt.Sprintf("host=%s port=%s user=postgres dbname=%s sslmode=disable target_session_attrs=read-write", hosts, ps, pc.Database)
	}

	// The atomic transaction: coordinated on a, a part prepared on b
	// (on the standby too, synchronously), the decision committed.
	tx, d := c.coordinate(t)
	gid := d.Part(1).String()
	c.prepare(t, "b", gid, "both")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	// b fails over; its old primary comes back as it was (no longer
	// waiting for its synchronous standby, which is a primary now).
	if err := old.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if err := old.Configure(ctx, map[string]string{"synchronous_standby_names": "''"}); err != nil {
		t.Fatal(err)
	}
	if err := old.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	newDSN, oldDSN := hostDSN(standby.Port), hostDSN(old.Port)
	t.Cleanup(func() { // so that the database drops
		for _, dsn := range []string{oldDSN, newDSN} {
			conn := pgtest.Connect(t, dsn)
			_, _ = conn.Exec(context.Background(), `ROLLBACK PREPARED '`+gid+`'`)
		}
	})
	rec, err := router.ReadPrimary(ctx, pgtest.Connect(t, newDSN).PgConn())
	if err != nil {
		t.Fatal(err)
	}
	prepared := func(dsn string) int {
		var n int
		if err := pgtest.Connect(t, dsn).QueryRow(ctx, `SELECT count(*) FROM pg_prepared_xacts WHERE gid = $1`, gid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if prepared(oldDSN) != 1 || prepared(newDSN) != 1 {
		t.Fatalf("the part is prepared %d times on the old primary, %d on the promoted standby: want once on each", prepared(oldDSN), prepared(newDSN))
	}
	resolverFor := func(bDSN string) *Resolver {
		snap, err := router.NewSnapshot(1, 2, []router.Server{{Name: "a", DSN: c.dsn["a"]}, {Name: "b", DSN: bDSN, Primary: rec}},
			[]router.Placement{{Shard: 0, Server: "a", State: router.StateActive}, {Shard: 1, Server: "b", State: router.StateActive}})
		if err != nil {
			t.Fatal(err)
		}
		r, err := router.NewFixed(snap)
		if err != nil {
			t.Fatal(err)
		}
		return New(Config{Servers: r, ServersOnly: true, KeepDecisions: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}

	// Only the old primary named: refused, nothing run there.
	rep, err := resolverFor(oldDSN).Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var npe *router.NotPrimaryError
	if len(rep.Errors) != 1 || !errors.Is(rep.Errors[0], router.ErrNotPrimary) || !errors.As(rep.Errors[0], &npe) || npe.Server != "b" {
		t.Fatalf("pass on a DSN naming the old primary only: errors %v, committed %d; want one *router.NotPrimaryError for b", rep.Errors, rep.Committed)
	}
	if rep.Committed != 0 || prepared(oldDSN) != 1 {
		t.Fatalf("the pass committed %d parts, %d left on the old primary: want it untouched", rep.Committed, prepared(oldDSN))
	}
	if n := c.count(t, "a", `SELECT count(*) FROM shardkit.tx_decisions`); n != 1 {
		t.Fatalf("%d decision rows left after a pass that could not reach b, want 1", n)
	}

	// Both hosts named, the old one first: the part is committed on the
	// promoted standby.
	rep = pass(t, resolverFor(hostDSN(old.Port, standby.Port)))
	if rep.Committed != 1 || len(rep.InDoubt) != 0 {
		t.Fatalf("pass on the DSN naming both hosts: %+v; want b's part committed", rep)
	}
	var notes int
	if err := pgtest.Connect(t, newDSN).QueryRow(ctx, `SELECT count(*) FROM t WHERE note = 'both'`).Scan(&notes); err != nil {
		t.Fatal(err)
	}
	if notes != 1 || prepared(newDSN) != 0 {
		t.Fatalf("on the promoted standby: %d rows of the transaction, %d parts prepared; want 1, 0", notes, prepared(newDSN))
	}
	if prepared(oldDSN) != 1 {
		t.Fatal("the old primary's part was finished: a pass reached the old primary")
	}
}
