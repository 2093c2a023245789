package plugin

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/shardkit/shardkit/internal/harness/pgbouncer"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
)

// knownBroken are the classes of wrong answers the typed differential
// finds on the current code, each named by the axis a fix turns on. A
// case that matches an entry is skipped (and counted) unless
// SHARDKIT_DIFF_AXES names the entry, or is "all"; once the fix is in,
// its entry goes. A case is of the first entry it meets, so the narrow
// entries come before the broad ones.
var knownBroken = []struct {
	name string             // what SHARDKIT_DIFF_AXES names it by
	bug  string             // the wrong answer, and where it is tracked
	in   func(c tcase) bool // whether a case meets it
}{
	// Empty: every class found so far is fixed (issue 56: per-schema
	// enums, Limit(-1), rows past a limit, joins ordered by an expression,
	// nondeterministic collations, NULLs in plain fields, order by the Go
	// field, C columns on an ICU database, rows outside the page scanned
	// into the destination). A new class goes here, with the failing case
	// that confirms it, until its fix lands.
}

// enabledAxes is the set of known-broken entries SHARDKIT_DIFF_AXES
// turns on ("all": every one).
func enabledAxes() map[string]bool {
	on := map[string]bool{}
	for _, a := range strings.Split(os.Getenv("SHARDKIT_DIFF_AXES"), ",") {
		if a = strings.TrimSpace(a); a != "" {
			on[a] = true
		}
	}
	return on
}

// brokenBy names the first known-broken entry a case meets and the run
// does not turn on, or "".
func brokenBy(c tcase, on map[string]bool) string {
	if on["all"] {
		return ""
	}
	for _, kb := range knownBroken {
		if !on[kb.name] && kb.in(c) {
			return kb.name
		}
	}
	return ""
}

func newRand(seed, stream uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, stream)) }

// typedCases is the typed differential's number of cases: the photos'
// knob (SHARDKIT_DIFF_N, -diff.n), else a short default.
func typedCases() int {
	if casesGiven() {
		return diffCases()
	}
	switch {
	case testing.Short():
		return 150
	case raceEnabled:
		return 200
	}
	return 600
}

// casesGiven reports whether the run names its number of cases.
func casesGiven() bool { return *diffN > 0 || os.Getenv("SHARDKIT_DIFF_N") != "" }

// TestDifferentialTypes runs the typed differential on two servers of
// 64 shards, each connected directly.
func TestDifferentialTypes(t *testing.T) {
	runTyped(t, newTypedEnv(t, nil), typedCases())
}

// TestDifferentialTypesPooled is TestDifferentialTypes with every shard
// server behind a PgBouncer in transaction pool mode.
func TestDifferentialTypesPooled(t *testing.T) {
	te := newTypedEnv(t, func(o *envOpts) { o.appDSN = viaPooler(t, pgbouncer.Options{}) })
	runTyped(t, te, typedCases())
}

// crossShard reports whether a case reads several shards, so that the
// plugin merges their rows.
func (c tcase) crossShard() bool { return c.All || c.Where.Kind == 1 }

// shardkitOf is the shardkit plugin registered on db, if any.
func shardkitOf(db *gorm.DB) (*Plugin, bool) {
	p, ok := db.Config.Plugins[(&Plugin{}).Name()].(*Plugin)
	return p, ok
}

// TestDifferentialTypesICU is TestDifferentialTypes on databases whose
// default collation is ICU (en-US), the plain side's too: text without a
// COLLATE of its own (varchar, text expressions) orders linguistically.
func TestDifferentialTypesICU(t *testing.T) {
	te := newTypedEnv(t, func(o *envOpts) {
		o.dsnOf = func(server string) string { return icuDatabase(t, map[string]int{"a": 0, "b": 1}[server]) }
	})
	runTyped(t, te, typedCases()/2)
}

// TestDifferentialTypesLocale is TestDifferentialTypes on servers, the
// plain side's too, that word their errors in German (lc_messages and
// LANGUAGE, as germanServer): every refusal, every failure both sides
// share and every error the merge classifies is judged on a server that
// does not speak English. A third of the default cases (SHARDKIT_DIFF_N
// sets them all): the classifying paths are few, the cases that reach
// them many.
func TestDifferentialTypesLocale(t *testing.T) {
	set := pgtest.Set(t)
	c, err := set.Add(context.Background(), germanServer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	i := len(set.Clusters) - 1
	dsn := map[string]string{"a": pgtest.NewDatabase(t, i), "b": pgtest.NewDatabase(t, i)}
	mustSpeakGerman(t, dsn["a"])
	te := newTypedEnvOn(t, func(o *envOpts) { o.dsnOf = func(server string) string { return dsn[server] } },
		func() string { return pgtest.NewDatabase(t, i) })
	n := typedCases()
	if !casesGiven() {
		n = max(n/3, 50)
	}
	runTyped(t, te, n)
}

var icuDatabases atomic.Int64

// icuDatabase creates a database on cluster i whose default collation
// is ICU's en-US (PostgreSQL 15: datlocprovider 'i'), dropped when the
// test ends.
func icuDatabase(t testing.TB, i int) string {
	t.Helper()
	c := pgtest.Cluster(t, i)
	name := fmt.Sprintf("t_icu_%d_%d", os.Getpid(), icuDatabases.Add(1))
	admin := c.DSN("postgres")
	pgtest.Exec(t, admin, "CREATE DATABASE "+name+" TEMPLATE template0 ENCODING 'UTF8' LOCALE 'C.UTF-8' LOCALE_PROVIDER icu ICU_LOCALE 'en-US'")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Logf("drop %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("drop %s: %v", name, err)
		}
	})
	return c.DSN(name)
}
