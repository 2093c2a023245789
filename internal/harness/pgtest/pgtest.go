// Package pgtest gives a package's tests real PostgreSQL clusters:
//
//	func TestMain(m *testing.M) { pgtest.Main(m, 2) }
//
//	func TestX(t *testing.T) {
//		dsn := pgtest.NewDatabase(t, 0) // a fresh database on cluster 0
//	}
//
// Clusters are started by internal/harness/pglocal on first use (so pure unit
// tests and fuzz workers of the same package start none) and removed when
// the tests end. Each NewDatabase is a new, empty database,
// dropped at the end of the test, so tests do not see each other's rows.
// What many tests start from (a provisioned catalog and shards) is built
// once into a template database (NewTemplate, Seal) and copied for each
// test (CloneDatabase).
package pgtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/internal/harness/pglocal"
)

// DurableEnv, set to 1, starts the clusters with fsync and synchronous
// commit on (pglocal.Options.Durable).
const DurableEnv = "SHARDKIT_PG_DURABLE"

var (
	want     int // clusters to start, set by Main
	startErr error
	once     sync.Once
	set      *pglocal.Set
	seq      atomic.Int64
)

// Main runs the tests with n clusters available, stops whatever was
// started and exits.
func Main(m *testing.M, n int) {
	want = n
	code := m.Run()
	if set != nil {
		set.Stop()
	}
	os.Exit(code)
}

// Set returns the running clusters, starting them on first use.
func Set(t testing.TB) *pglocal.Set {
	t.Helper()
	if want == 0 {
		t.Fatal("pgtest: no clusters; call pgtest.Main from TestMain")
	}
	once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		// Benchmarks of commits (two-phase commit above all) mean
		// something only with fsync on: SHARDKIT_PG_DURABLE=1.
		set, startErr = pglocal.Start(ctx, pglocal.Options{N: want, Durable: os.Getenv(DurableEnv) == "1"})
	})
	if startErr != nil {
		t.Fatalf("pgtest: %v", startErr)
	}
	return set
}

// Cluster returns cluster i.
func Cluster(t testing.TB, i int) *pglocal.Cluster {
	t.Helper()
	set := Set(t)
	if i >= len(set.Clusters) {
		t.Fatalf("pgtest: cluster %d requested, %d started", i, len(set.Clusters))
	}
	return set.Clusters[i]
}

// NewDatabase creates an empty database on cluster i and returns its DSN.
// The database is dropped when the test ends.
func NewDatabase(t testing.TB, i int) string {
	t.Helper()
	return createDatabase(t, i, "")
}

// CloneDatabase creates a database on cluster i as a copy of the template
// database tmpl (see NewTemplate) and returns its DSN. The database is
// dropped when the test ends. The copy is of files (STRATEGY FILE_COPY):
// on these clusters, without fsync, that is the fastest way to a
// database that already holds a package's catalog or shards.
func CloneDatabase(t testing.TB, i int, tmpl string) string {
	t.Helper()
	return createDatabase(t, i, tmpl)
}

// NewTemplate creates an empty database on cluster i that lasts as long
// as the clusters, for a package's tests to fill once (through the DSN)
// and then copy with CloneDatabase once Seal has closed it. It returns
// the database's name and DSN.
func NewTemplate(t testing.TB, i int) (name, dsn string) {
	t.Helper()
	c := Cluster(t, i)
	name = fmt.Sprintf("tmpl_%d", seq.Add(1))
	Exec(t, c.DSN("postgres"), "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	return name, c.DSN(name)
}

// Seal makes a filled template database ready to copy: Postgres copies a
// database only while no session is connected to it, so Seal refuses new
// connections and ends those left (a pool's connections outlive its
// Close for a moment on the server).
func Seal(t testing.TB, i int, name string) {
	t.Helper()
	id := pgx.Identifier{name}.Sanitize()
	admin := Cluster(t, i).DSN("postgres")
	Exec(t, admin, "ALTER DATABASE "+id+" WITH ALLOW_CONNECTIONS false IS_TEMPLATE true")
	Exec(t, admin, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", name)
}

func createDatabase(t testing.TB, i int, tmpl string) string {
	t.Helper()
	c := Cluster(t, i)
	name := fmt.Sprintf("t_%s_%d", sanitize(t.Name()), seq.Add(1))
	if len(name) > 60 {
		name = fmt.Sprintf("t_%d_%s", seq.Load(), name[len(name)-40:])
	}
	create := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if tmpl != "" {
		create += " TEMPLATE " + pgx.Identifier{tmpl}.Sanitize() + " STRATEGY FILE_COPY"
	}
	Exec(t, c.DSN("postgres"), create)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := dropDatabase(ctx, c, name); err != nil {
			t.Logf("pgtest: drop database %s: %v", name, err)
		}
	})
	return c.DSN(name)
}

// dropDatabase drops a test database. Postgres refuses to drop a database
// that holds subscriptions, and a subscription left behind keeps its apply
// worker, one of the cluster's few logical replication workers, for the
// rest of the run: later tests' subscriptions then get no worker and their
// replication never catches up. So subscriptions go first, detached from
// their slots (the publisher's database is dropped on its own).
func dropDatabase(ctx context.Context, c *pglocal.Cluster, name string) error {
	db, err := pgx.Connect(ctx, c.DSN(name))
	if err == nil {
		rows, err := db.Query(ctx, `SELECT subname FROM pg_subscription WHERE subdbid = (SELECT oid FROM pg_database WHERE datname = current_database())`)
		var subs []string
		if err == nil {
			subs, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		for _, sub := range subs {
			id := pgx.Identifier{sub}.Sanitize()
			for _, q := range []string{"ALTER SUBSCRIPTION " + id + " DISABLE", "ALTER SUBSCRIPTION " + id + " SET (slot_name = NONE)", "DROP SUBSCRIPTION " + id} {
				if _, e := db.Exec(ctx, q); e != nil && err == nil {
					err = e
				}
			}
		}
		_ = db.Close(ctx)
		if err != nil {
			return err
		}
	}
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	// Replication slots in the database (a move a failed test left
	// half-way, or a reversible move's reverse slot) block the drop, and
	// their names, which are the cluster's, would meet the same names in a
	// later test's database. New connections are refused first, so that a
	// subscriber in a database not yet dropped cannot reconnect; then the
	// senders go, then the slots.
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH ALLOW_CONNECTIONS false"); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err = conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = $1 AND active_pid IS NOT NULL`, name)
		if err == nil {
			_, err = conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1`, name)
		}
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // a terminated sender may still hold its slot for a moment
	}
	if err != nil {
		return err
	}
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	return err
}

// Exec runs SQL on dsn and fails the test on error.
func Exec(t testing.TB, dsn, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("pgtest: %s: %v", sql, err)
	}
}

// Connect opens a direct connection (not through any shardkit code), closed
// at the end of the test: the way tests check where rows really are.
func Connect(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}
