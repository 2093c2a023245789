package resolver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/pglocal"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/shardschema"
	"github.com/shardkit/shardkit/router"
)

// failedOver is a server's database on a primary of its own with a
// synchronous standby, each with a table t and shardkit's server schema.
type failedOver struct {
	old, standby *pglocal.Cluster
	db           string
	rec          router.Primary // the promoted standby, once failOver ran
}

func newFailedOver(t *testing.T, ctx context.Context) *failedOver {
	t.Helper()
	set := pgtest.Set(t)
	old, err := set.Add(ctx, pglocal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = old.Stop() })
	dsn := pgtest.NewDatabase(t, len(set.Clusters)-1)
	serverDB(t, ctx, dsn)
	standby, err := set.AddStandby(ctx, old, pglocal.StandbyOptions{Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = standby.Stop() })
	pc, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return &failedOver{old: old, standby: standby, db: pc.Database}
}

// serverDB gives a database the table t and shardkit's server schema.
func serverDB(t *testing.T, ctx context.Context, dsn string) {
	t.Helper()
	pgtest.Exec(t, dsn, `CREATE TABLE t (note text)`)
	if err := shardschema.EnsureServer(ctx, pgtest.Connect(t, dsn), idgen.DefaultLayout()); err != nil {
		t.Fatal(err)
	}
}

// dsn names the hosts of the given clusters, in order, with
// target_session_attrs=read-write.
func (f *failedOver) dsn(cs ...*pglocal.Cluster) string {
	var hosts, ports []string
	for _, c := range cs {
		hosts, ports = append(hosts, "127.0.0.1"), append(ports, fmt.Sprint(c.Port))
	}
	return fmt.Sprintf("host=%s port=%s user=postgres dbname=%s sslmode=disable target_session_attrs=read-write",
		strings.Join(hosts, ","), strings.Join(ports, ","), f.db)
}

// failOver kills the primary, promotes the standby, records it, and
// restarts the old primary as it was (writable on its old timeline, no
// longer waiting for its synchronous standby, which is a primary now).
func (f *failedOver) failOver(t *testing.T, ctx context.Context) {
	t.Helper()
	if err := f.old.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.old.Configure(ctx, map[string]string{"synchronous_standby_names": "''"}); err != nil {
		t.Fatal(err)
	}
	if err := f.old.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	var err error
	if f.rec, err = router.ReadPrimary(ctx, pgtest.Connect(t, f.dsn(f.standby)).PgConn()); err != nil {
		t.Fatal(err)
	}
}

// rollbackAtEnd rolls gid back on the clusters when the test ends, so
// that their databases drop.
func (f *failedOver) rollbackAtEnd(t *testing.T, gid string) {
	t.Cleanup(func() {
		for _, c := range []*pglocal.Cluster{f.old, f.standby} {
			_, _ = pgtest.Connect(t, f.dsn(c)).Exec(context.Background(), `ROLLBACK PREPARED '`+gid+`'`)
		}
	})
}

func prepared(t *testing.T, dsn, gid string) int {
	t.Helper()
	var n int
	if err := pgtest.Connect(t, dsn).QueryRow(context.Background(), `SELECT count(*) FROM pg_prepared_xacts WHERE gid = $1`, gid).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// resolverOn is a resolver of servers a and b at the given DSNs, b's (or
// a's) primary recorded.
func resolverOn(t *testing.T, servers ...router.Server) *Resolver {
	t.Helper()
	snap, err := router.NewSnapshot(1, 2, servers,
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
	f := newFailedOver(t, ctx)
	c := &cluster{dsn: map[string]string{"a": pgtest.NewDatabase(t, 0), "b": f.dsn(f.old)}}
	serverDB(t, ctx, c.dsn["a"])

	// The atomic transaction: coordinated on a, a part prepared on b
	// (on the standby too, synchronously), the decision committed.
	tx, d := c.coordinate(t)
	gid := d.Part(1).String()
	c.prepare(t, "b", gid, "both")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	f.failOver(t, ctx)
	f.rollbackAtEnd(t, gid)
	oldDSN, newDSN := f.dsn(f.old), f.dsn(f.standby)
	if prepared(t, oldDSN, gid) != 1 || prepared(t, newDSN, gid) != 1 {
		t.Fatalf("the part is prepared %d times on the old primary, %d on the promoted standby: want once on each",
			prepared(t, oldDSN, gid), prepared(t, newDSN, gid))
	}
	a := router.Server{Name: "a", DSN: c.dsn["a"]}

	// Only the old primary named: refused, nothing run there.
	rep, err := resolverOn(t, a, router.Server{Name: "b", DSN: oldDSN, Primary: f.rec}).Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var npe *router.NotPrimaryError
	if len(rep.Errors) != 1 || !errors.Is(rep.Errors[0], router.ErrNotPrimary) || !errors.As(rep.Errors[0], &npe) || npe.Server != "b" {
		t.Fatalf("pass on a DSN naming the old primary only: errors %v, committed %d; want one *router.NotPrimaryError for b", rep.Errors, rep.Committed)
	}
	if rep.Committed != 0 || prepared(t, oldDSN, gid) != 1 {
		t.Fatalf("the pass committed %d parts, %d left on the old primary: want it untouched", rep.Committed, prepared(t, oldDSN, gid))
	}
	if n := c.count(t, "a", `SELECT count(*) FROM shardkit.tx_decisions`); n != 1 {
		t.Fatalf("%d decision rows left after a pass that could not reach b, want 1", n)
	}

	// Both hosts named, the old one first: the part is committed on the
	// promoted standby.
	rep = pass(t, resolverOn(t, a, router.Server{Name: "b", DSN: f.dsn(f.old, f.standby), Primary: f.rec}))
	if rep.Committed != 1 || len(rep.InDoubt) != 0 {
		t.Fatalf("pass on the DSN naming both hosts: %+v; want b's part committed", rep)
	}
	var notes int
	if err := pgtest.Connect(t, newDSN).QueryRow(ctx, `SELECT count(*) FROM t WHERE note = 'both'`).Scan(&notes); err != nil {
		t.Fatal(err)
	}
	if notes != 1 || prepared(t, newDSN, gid) != 0 {
		t.Fatalf("on the promoted standby: %d rows of the transaction, %d parts prepared; want 1, 0", notes, prepared(t, newDSN, gid))
	}
	if prepared(t, oldDSN, gid) != 1 {
		t.Fatal("the old primary's part was finished: a pass reached the old primary")
	}
}

// TestResolverAfterCoordinatorFailover: the coordinator a fails over and
// its old primary comes back writable; an atomic transaction coordinated
// on the promoted standby commits its decision there, its part on b left
// prepared. A pass asks the recorded primary for the decision and commits
// the part. Asked on the old primary, where the decision's transaction ID
// is another transaction's (here one rolled back), the part was rolled
// back while the decision had committed: half an atomic transaction.
func TestResolverAfterCoordinatorFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := newFailedOver(t, ctx)
	f.failOver(t, ctx)
	c := &cluster{dsn: map[string]string{"a": f.dsn(f.standby), "b": pgtest.NewDatabase(t, 0)}}
	serverDB(t, ctx, c.dsn["b"])

	tx, d := c.coordinate(t)
	gid := d.Part(1).String()
	c.prepare(t, "b", gid, "both")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pgtest.Connect(t, c.dsn["b"]).Exec(context.Background(), `ROLLBACK PREPARED '`+gid+`'`) })
	// The old primary uses the decision's transaction ID for another
	// transaction, which rolls back.
	old := pgtest.Connect(t, f.dsn(f.old))
	var next uint64
	if err := old.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&next); err != nil {
		t.Fatal(err)
	}
	if next <= d.XID { // one statement of as many transactions as it takes
		burn := strings.Repeat("BEGIN; SELECT pg_current_xact_id(); ROLLBACK; ", int(d.XID-next)+1)
		if _, err := old.Exec(ctx, burn, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatal(err)
		}
	}
	var status string
	if err := old.QueryRow(ctx, `SELECT coalesce(pg_xact_status($1::text::xid8), '')`, fmt.Sprint(d.XID)).Scan(&status); err != nil || status != "aborted" {
		t.Fatalf("the decision's transaction on the old primary: %q (err %v), want aborted", status, err)
	}

	rep := pass(t, resolverOn(t, router.Server{Name: "a", DSN: f.dsn(f.old, f.standby), Primary: f.rec}, router.Server{Name: "b", DSN: c.dsn["b"]}))
	if rep.Committed != 1 || rep.RolledBack != 0 || c.notes(t, "b", "both") != 1 {
		t.Fatalf("pass after the coordinator's failover: %+v, %d rows on b; want b's part committed (the decision committed on a's primary)",
			rep, c.notes(t, "b", "both"))
	}
}
