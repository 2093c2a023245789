package plugin

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"math/rand/v2"
	"os"
	"slices"
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
	{"enum-per-schema", "a read across shards of a column whose type each schema defines fails with an untyped 42846 (UNION could not convert type shard_0001.mood to shard_0000.mood); issue 56",
		func(c tcase) bool { return c.Moods && c.crossShard() }},
	{"pluck-past-the-page", "a limited Pluck across shards read in several statements scans rows past the page into the destination: a NULL there, in a field that cannot hold it (GORM's Pluck into []*T or []T), fails with sql: converting NULL to float64 is unsupported where plain GORM, which never reads that row, succeeds; issue 56",
		func(c tcase) bool {
			return c.Op == tPluck && c.crossShard() && (c.HasLimit && c.Limit >= 0 || c.HasOffset) && c.Dest != dsNull && c.Dest != dsScanner
		}},
	{"group-nondeterministic", "across shards, Group or Distinct of a column in a nondeterministic collation without an Order by it dedupes byte-wise: 7 groups of tnd where Postgres makes 4 ('Alice', 'alice', 'ALICE' are one); issue 56",
		func(c tcase) bool {
			return c.crossShard() && (c.Op == tGroup || c.Op == tDistinct) && c.Unordered && c.Col == "tnd"
		}},
	{"order-nondeterministic", "across shards, a key in a nondeterministic collation or citext is merged byte-wise: 'ALICE' and 'alice' are equal in Postgres, so the next key decides; issue 56",
		func(c tcase) bool { return c.crossShard() && c.ordersBy("text-nondeterministic", "citext") }},
	{"null-as-zero", "across shards, a NULL read into a plain or string field (zero, \"\") is merged as that zero value, not where Postgres puts NULL (last ASC, first DESC); issue 56",
		func(c tcase) bool {
			return c.crossShard() && (c.Dest == dsPlain || c.Dest == dsString) && c.destRead() && c.ordersByColumn()
		}},
	{"order-by-go-type", "across shards, the merge compares an order key as its Go field (text, float) instead of by its column's type: jsonb, inet, interval, arrays, a shared enum, and every column but text and uuid read into a string; issue 56",
		func(c tcase) bool { return c.crossShard() && c.ordersByGoType() }},
}

// destRead reports whether the case scans whole rows into its
// destination type (the merge then meets the destination's fields).
func (c tcase) destRead() bool {
	switch c.Op {
	case tFind, tFirst, tLast, tTake, tPluck, tScanSmall, tRows:
		return true
	}
	return false
}

// ordersByColumn reports whether the case orders by a column other than
// the ID (each has NULLs), or First/Last add the ID after its order.
func (c tcase) ordersByColumn() bool {
	for _, o := range c.Order {
		if f := strings.Fields(o)[0]; f != "id" && !strings.ContainsAny(f, "(:*+-|") {
			return true
		}
	}
	return false
}

// goOrderDiffers are the column types whose values read into the
// model's fields (strings, floats) do not order in Go as in Postgres.
var goOrderDiffers = []string{"jsonb", "inet", "interval", "array-int", "array-text", "enum-shared", "enum-per-schema"}

// ordersByGoType reports whether the case orders by a column whose Go
// field orders apart from its Postgres type: one of goOrderDiffers, or
// any column but text read into a string.
func (c tcase) ordersByGoType() bool {
	for _, o := range c.Order {
		a := orderAxis(o)
		switch {
		case slices.Contains(goOrderDiffers, strings.TrimPrefix(a, "expr-")):
			return true
		case c.Dest == dsString && c.destRead() && !strings.HasPrefix(a, "text-") && a != "varchar" && a != "uuid" && a != "id" && !strings.HasPrefix(a, "expr-"):
			return true
		}
	}
	return false
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
	if *diffN > 0 || os.Getenv("SHARDKIT_DIFF_N") != "" {
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
