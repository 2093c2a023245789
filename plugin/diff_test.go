package plugin

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"
	"gorm.io/plugin/dbresolver"

	"github.com/shardkit/shardkit/internal/harness/pgbouncer"
)

// The differential test: random GORM statements run through the plugin on
// 64 shards over two servers and through plain GORM on one unsharded
// table holding the same rows. Each outcome must equal the plain one
// (rows, in order where the query orders them totally; RowsAffected; the
// data of every schema after a write, read with direct SQL) or be a typed
// refusal that changed nothing. A failing case is shrunk and printed as
// the GORM chain that reproduces it.
//
//	go test ./plugin -run TestDifferential                 # the fixed-seed run of make test
//	go test ./plugin -run TestDifferential -diff.n 5000    # more cases (or SHARDKIT_DIFF_N=5000)
//	go test ./plugin -run '^$' -fuzz FuzzDifferential      # fuzzing (make fuzz)
//
// With SHARDKIT_DIFF_CORPUS=testdata/fuzz/FuzzDifferential the run keeps
// the first failing input of each class as a fuzz corpus entry.

var (
	diffN    = flag.Int("diff.n", 0, "differential test: number of cases (0: the short fixed-seed run, or $SHARDKIT_DIFF_N)")
	diffSeed = flag.Uint64("diff.seed", 1, "differential test: seed of the case stream")
)

// refusals are the plugin's typed refusals. An error that matches one of
// them (errors.Is) may stand in for the plain answer, if the data is
// unchanged. Add new sentinels here.
var refusals = []struct {
	name string
	err  error
}{
	{"ErrMissingShardKey", ErrMissingShardKey},
	{"ErrUnroutableSQL", ErrUnroutableSQL},
	{"ErrCrossShard", ErrCrossShard},
	{"ErrIDShardMismatch", ErrIDShardMismatch},
	{"ErrShardKeyChange", ErrShardKeyChange},
	{"ErrLookupUnroutable", ErrLookupUnroutable},
	{"ErrLookupWrite", ErrLookupWrite},
	{"ErrLookupInTransaction", ErrLookupInTransaction},
}

// refusal reports whether err is a typed refusal: one of refusals, or a
// *ShardError (a sentinel not listed yet) that carries no database error
// and no timeout.
func refusal(err error) bool {
	for _, r := range refusals {
		if errors.Is(err, r.err) {
			return true
		}
	}
	var se *ShardError
	var pg *pgconn.PgError
	return errors.As(err, &se) && !errors.As(err, &pg) &&
		!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled)
}

// failure is a case whose outcome the plugin got wrong.
type failure struct {
	c        dcase
	kind     string
	detail   string
	sharded  result
	plain    result
	input    []byte // the generator input of the original case
	index    int    // the case's number in the seeded run, -1 in fuzzing
	shrunkOf string // the original case's code, when shrunk
}

func (f *failure) class() string { return f.c.Op.String() + ": " + f.kind }

// check runs a case on both sides and judges the outcome. The data of both
// sides is the seed before and after.
func (d *diffEnv) check(t testing.TB, c dcase) *failure {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	defCalls := d.e.defPool.calls.Load()
	rs := c.run(ctx, d.e.db, nil)
	defCalls = d.e.defPool.calls.Load() - defCalls
	var ids []int64
	if rs.err == nil && rs.panicked == "" {
		ids = rs.ids
	}
	rp := c.run(ctx, d.plain, ids)
	fl := &failure{c: c, sharded: rs, plain: rp, index: -1}
	bad := func(kind, detail string, args ...any) *failure {
		fl.kind, fl.detail = kind, fmt.Sprintf(detail, args...)
		return fl
	}
	if rp.panicked != "" {
		t.Fatalf("plain GORM panicked on %s: %s", c.code(), rp.panicked)
	}
	var st state
	seed := d.seedOf(c.Pins)
	if c.Op.write() {
		st = d.state(t, c.Pins)
		if !slices.Equal(st.sharded, seed) || !slices.Equal(st.plain, seed) || c.Pins && !slices.Equal(st.orphans, d.seedOrphanRows) {
			defer d.reset(t, c.Pins)
		}
	}
	switch {
	case rs.panicked != "":
		return bad("panic", "%s", trimStack(rs.panicked))
	case defCalls != 0:
		return bad("statement reached the default connection", "%d calls on the default connection, which has no photos table", defCalls)
	case errors.Is(rs.err, gorm.ErrRecordNotFound) && rp.err == nil:
		return bad("rows differ", "plugin: record not found\n%s", diffRows(rp.rows, nil))
	case rs.err != nil && rp.err == nil && !refusal(rs.err) && !claimedForNoRow(c, rs, rp):
		return bad("error that is not a typed refusal", "%v", rs.err)
	case rs.err == nil && rp.err != nil:
		return bad("success where plain GORM failed", "plain: %v", rp.err)
	case rs.err != nil && c.Op.write() && !slices.Equal(st.sharded, seed):
		kind := "refusal changed the data"
		if rp.err != nil {
			kind = "failed statement changed the data"
		}
		return bad(kind, "%s", diffRows(seed, st.sharded))
	case rs.err != nil && c.Op.write() && (len(st.misplaced) > 0 || len(d.newOrphans(st)) > 0):
		return bad("failed write left lookup rows behind", "%s", strings.Join(append(st.misplaced, d.newOrphans(st)...), "\n"))
	case rs.err != nil && rp.err != nil:
		d.outcome(c, "both failed")
		return nil
	case claimedForNoRow(c, rs, rp):
		d.outcome(c, "ErrDuplicateLookup for an update of no row")
		return nil
	case rs.err != nil:
		d.outcome(c, "refused: "+refusalName(rs.err))
		return nil
	}
	if c.Op.write() {
		if len(st.misplaced) > 0 {
			return bad("row stranded outside its shard", "%s", strings.Join(st.misplaced, "\n"))
		}
		if !slices.Equal(st.sharded, st.plain) {
			return bad("data differs after the write", "%s", diffRows(st.plain, st.sharded))
		}
		// A delete by conditions does not have the values in hand, and
		// leaves its rows' lookup rows as orphans (see "Lookup columns").
		if o := d.newOrphans(st); len(o) > 0 && c.Op != dDelete && c.Op != dDeleteIDs {
			return bad("write left an orphaned lookup row", "%s", strings.Join(o, "\n"))
		}
	}
	ordered, exact := c.ordered()
	switch {
	case exact && ordered && !slices.Equal(rs.rows, rp.rows):
		if slices.Equal(sorted(rs.rows), sorted(rp.rows)) {
			return bad("rows in the wrong order", "plugin: %v\nplain:  %v", rs.rows, rp.rows)
		}
		return bad("rows differ", "%s", diffRows(rp.rows, rs.rows))
	case exact && !ordered && !slices.Equal(sorted(rs.rows), sorted(rp.rows)):
		return bad("rows differ", "%s", diffRows(sorted(rp.rows), sorted(rs.rows)))
	case !exact:
		// LIMIT/OFFSET (or Take) over an order that is not total: as many
		// rows as plain GORM, each one a row of the unlimited answer.
		all := c.clone()
		all.Limit, all.Offset = 0, 0
		if all.Op == dTake {
			all.Op = dFind
		}
		ra := all.run(ctx, d.plain, nil)
		if ra.err != nil {
			t.Fatalf("plain GORM, unlimited %s: %v", all.code(), ra.err)
		}
		if len(rs.rows) != len(rp.rows) {
			return bad("rows differ", "plugin has %d rows, plain GORM %d\n%s", len(rs.rows), len(rp.rows), diffRows(rp.rows, rs.rows))
		}
		if extra := minus(rs.rows, ra.rows); len(extra) > 0 {
			return bad("rows differ", "rows that do not match the conditions: %v", extra)
		}
	}
	if rs.affected != rp.affected {
		return bad("RowsAffected differs", "plugin %d, plain GORM %d", rs.affected, rp.affected)
	}
	d.outcome(c, "same answer")
	return nil
}

// outcome counts a case's outcome, and those of aggregate cases apart.
func (d *diffEnv) outcome(c dcase, kind string) {
	d.stats[kind]++
	if c.Pins {
		d.stats["pin, "+kind]++
	}
	if strings.HasPrefix(c.Order, "caption") && (c.All || len(c.Calls) > 0) {
		d.stats["ordered by caption, "+kind]++
	}
	if strings.HasPrefix(c.Order, "score") {
		d.stats["ordered by a float with NaN and NULL, "+kind]++
	}
	if c.Agg != nil {
		d.stats["aggregate, "+kind]++
		if c.All {
			d.stats["aggregate on all shards, "+kind]++
		}
	}
}

// claimedForNoRow reports an Update that gives a lookup column a value
// another row holds, and whose conditions match no row: plain GORM
// changes nothing and succeeds, the plugin claims the value before the
// row is written, finds it taken and returns ErrDuplicateLookup (see
// "Lookup columns" in the README). The data must still be unchanged.
func claimedForNoRow(c dcase, rs, rp result) bool {
	return c.Op == dUpdate && errors.Is(rs.err, ErrDuplicateLookup) && rp.err == nil && rp.affected == 0
}

// refusalName names the refusal an error matches.
func refusalName(err error) string {
	for _, r := range refusals {
		if errors.Is(err, r.err) {
			return r.name
		}
	}
	return "ShardError"
}

// trimStack keeps a panic's message and the plugin's own frames.
func trimStack(s string) string {
	lines := strings.Split(s, "\n")
	out := lines[:1]
	for i := 1; i+1 < len(lines); i++ {
		fn, file := lines[i], strings.TrimSpace(lines[i+1])
		if strings.Contains(fn, "shardkit/plugin.") && !strings.Contains(file, "_test.go") {
			out = append(out, "  "+fn, "    "+file)
			i++
		}
	}
	return strings.Join(out, "\n")
}

func sorted(xs []string) []string { return slices.Sorted(slices.Values(xs)) }

// minus returns the elements of a not in b, as multisets.
func minus(a, b []string) []string {
	left := map[string]int{}
	for _, x := range b {
		left[x]++
	}
	var out []string
	for _, x := range a {
		if left[x] > 0 {
			left[x]--
			continue
		}
		out = append(out, x)
	}
	return out
}

// diffRows describes how got differs from want, as multisets.
func diffRows(want, got []string) string {
	var b strings.Builder
	for _, x := range minus(want, got) {
		b.WriteString("  missing: " + x + "\n")
	}
	for _, x := range minus(got, want) {
		b.WriteString("  extra:   " + x + "\n")
	}
	if b.Len() == 0 {
		return "  same rows, different order"
	}
	return strings.TrimRight(b.String(), "\n")
}

// shrink makes a failure's case smaller while it fails the same way.
func (d *diffEnv) shrink(t testing.TB, fl *failure, budget int) *failure {
	t.Helper()
	orig := fl.c.code()
	for progress := true; progress && budget > 0; {
		progress = false
		for _, s := range fl.c.shrinks() {
			if budget--; budget < 0 {
				break
			}
			if g := d.check(t, s); g != nil && g.kind == fl.kind {
				g.input, g.index = fl.input, fl.index
				fl, progress = g, true
				break
			}
		}
	}
	if code := fl.c.code(); code != orig {
		fl.shrunkOf = orig
	}
	return fl
}

func (f *failure) report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", f.class())
	fmt.Fprintf(&b, "reproduction (IDs and keys are this run's seed rows, see newDiffEnv):\n\t%s\n", f.c.code())
	fmt.Fprintf(&b, "features: %s\n", strings.Join(f.c.features(), ", "))
	fmt.Fprintf(&b, "plugin: %s\nplain:  %s\n", f.sharded, f.plain)
	if f.detail != "" {
		fmt.Fprintf(&b, "%s\n", f.detail)
	}
	if f.shrunkOf != "" {
		fmt.Fprintf(&b, "shrunk from: %s\n", f.shrunkOf)
	}
	if f.index >= 0 {
		fmt.Fprintf(&b, "case %d of seed %d; corpus entry for testdata/fuzz/FuzzDifferential:\n\tgo test fuzz v1\n\t[]byte(%q)\n", f.index, *diffSeed, f.input)
	}
	return b.String()
}

func (r result) String() string {
	if r.panicked != "" {
		return "panic: " + strings.SplitN(r.panicked, "\n", 2)[0]
	}
	rows := r.rows
	more := ""
	if len(rows) > 6 {
		rows, more = rows[:6], fmt.Sprintf(" …%d more", len(r.rows)-6)
	}
	return fmt.Sprintf("err=%v RowsAffected=%d rows=%v%s", r.err, r.affected, rows, more)
}

// caseOf turns generator input into a case.
func (d *diffEnv) caseOf(input []byte) dcase {
	g := gen{c: &byteChooser{b: input}, d: d.data}
	c := g.dcase()
	if d.adjust != nil {
		d.adjust(&c)
	}
	return c
}

// diffCases is the number of cases of the fixed-seed run.
func diffCases() int {
	if *diffN > 0 {
		return *diffN
	}
	if n, err := strconv.Atoi(os.Getenv("SHARDKIT_DIFF_N")); err == nil && n > 0 {
		return n
	}
	switch {
	case testing.Short():
		return 200
	case raceEnabled:
		return 300
	}
	return 1000
}

// TestDifferential runs the fixed-seed stream of cases and reports the
// failures grouped by class (operation and kind of failure), each with
// the shrunk reproduction of its first case.
func TestDifferential(t *testing.T) {
	runDifferential(t, newDiffEnv(t), diffCases())
}

// TestDifferentialPooled is TestDifferential with every shard server
// behind a real PgBouncer in transaction pool mode, the plugin's default
// configuration, GORM's PrepareStmt on and dbresolver registered beside
// the plugin (the model's BeforeCreate hook runs on every Create), with
// the same cases and pass criteria.
func TestDifferentialPooled(t *testing.T) {
	d := newDiffEnvWith(t, func(o *envOpts) {
		o.appDSN = viaPooler(t, pgbouncer.Options{})
		o.gorm = func(c *gorm.Config) { c.PrepareStmt = true }
		o.beside = func(db *gorm.DB) error { return db.Use(dbresolver.Register(dbresolver.Config{})) }
	})
	runDifferential(t, d, diffCases())
}

// TestDifferentialPreparedPooler is TestDifferential with every shard
// server behind a PgBouncer that carries prepared statements (1.21 or
// later) and PreparedReadsAlways: reads across shards go through the
// pooler as named statements, a server's pipelined (plugin/internal/readexec), with
// the server connections shared by the pool's clients.
func TestDifferentialPreparedPooler(t *testing.T) {
	if _, err := pgbouncer.PreparedBinary(); err != nil {
		t.Skip(err)
	}
	d := newDiffEnvWith(t, func(o *envOpts) {
		o.appDSN = viaPooler(t, pgbouncer.Options{PreparedStatements: 200})
		o.cfg = func(c *Config) { c.PreparedReads = PreparedReadsAlways }
	})
	runDifferential(t, d, diffCases()/2)
}

// TestDifferentialCollated is TestDifferential with the photos' caption
// in an ICU collation on both sides, so that reads across shards ordered
// by it are ordered in Postgres (read_merge_coll.go).
func TestDifferentialCollated(t *testing.T) {
	d := newCollatedDiffEnv(t)
	// Most ordered cases order by the caption, so that merges of rows in
	// its collation are many.
	collated := []string{"caption, id desc", "caption desc, id", "caption, likes, id", "likes desc, caption, id"}
	d.adjust = func(c *dcase) {
		if c.Order != "" && !strings.HasPrefix(c.Order, "score") && c.Op != dPluckID && !c.Op.write() {
			c.Order = collated[(len(c.Calls)+c.Limit)%len(collated)]
			c.All = true
		}
	}
	runDifferential(t, d, diffCases()/2)
}

// runDifferential runs n cases of the fixed-seed stream on d.
func runDifferential(t *testing.T, d *diffEnv, n int) {
	rng := rand.New(rand.NewPCG(*diffSeed, 0x5eed))
	byClass := map[string][]*failure{}
	perOp := map[dop]int{}
	start := time.Now()
	// Reads across shards run with the default batch and with small ones
	// (a server's 32 shards in units of 5: seven statements whose pages
	// the client merges; in units of 30: a folded group of 25 and one of
	// 5, then a unit of 2), so that every case's merge meets several units.
	defer func() { d.e.p.unionBatch = 0 }()
	batches := []int{unionBatch, 5, 30}
	for i := 0; i < n; i++ {
		d.e.p.unionBatch = batches[i%len(batches)]
		input := make([]byte, 48)
		for j := range input {
			input[j] = byte(rng.UintN(256))
		}
		c := d.caseOf(input)
		perOp[c.Op]++
		if fl := d.check(t, c); fl != nil {
			fl.input, fl.index = input, i
			byClass[fl.class()] = append(byClass[fl.class()], fl)
		}
	}
	t.Logf("%d cases in %v; operations %v; outcomes %v", n, time.Since(start).Round(time.Millisecond), perOp, d.stats)
	classes := make([]string, 0, len(byClass))
	for k := range byClass {
		classes = append(classes, k)
	}
	sort.Strings(classes)
	failed := 0
	for _, k := range classes {
		failed += len(byClass[k])
	}
	if failed > 0 {
		var sum strings.Builder
		for _, k := range classes {
			fmt.Fprintf(&sum, "\n\t%4d  %s", len(byClass[k]), k)
		}
		t.Errorf("%d of %d cases failed, in %d classes:%s", failed, n, len(classes), sum.String())
	}
	if dir := os.Getenv("SHARDKIT_DIFF_CORPUS"); dir != "" {
		// Keep the first failing input of each class as a fuzz corpus
		// entry, so that it stays a regression test once fixed.
		for _, k := range classes {
			in := byClass[k][0].input
			entry := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", in)
			name := filepath.Join(dir, fmt.Sprintf("seed%d-case%d", *diffSeed, byClass[k][0].index))
			if err := os.WriteFile(name, []byte(entry), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, k := range classes {
		t.Run(k, func(t *testing.T) {
			fl := d.shrink(t, byClass[k][0], 80)
			t.Errorf("%d failing cases; the first, shrunk:\n%s", len(byClass[k]), fl.report())
		})
	}
}

// FuzzDifferential drives the generator with fuzz input; each input is one
// case. Inputs that once failed live in testdata/fuzz/FuzzDifferential.
func FuzzDifferential(f *testing.F) {
	if fuzzWorker() {
		prepareFuzzWorker(f)
	}
	d := newDiffEnv(f)
	for i := range 8 {
		f.Add([]byte{byte(i * 2), 0, 1, 2, 3, 4, 5, 6, 7})
	}
	f.Fuzz(func(t *testing.T, input []byte) {
		c := d.caseOf(input)
		if fl := d.check(t, c); fl != nil {
			fl.input = input
			fl = d.shrink(t, fl, 40)
			t.Fatalf("%s", fl.report())
		}
	})
}
