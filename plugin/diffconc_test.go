package plugin

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"
)

// The concurrency differential: K goroutines run the same generated read
// chains at the same time, on the one shared *gorm.DB and on chains
// shared the way GORM allows (built once, then Session), and every answer
// must equal the serial run's. The serial answers are the differential's
// (TestDifferential holds them to plain GORM on one table); here they are
// checked against plain GORM too, and a case whose serial answer differs
// is left to that test.
//
//	go test ./plugin -run TestDifferentialConcurrent -race                          # make test's run
//	go test ./plugin -run TestDifferentialConcurrent -race -diff.callers 8 -diff.chains 2000

var (
	diffCallers = flag.Int("diff.callers", 0, "concurrency differential: concurrent callers (0: 8)")
	diffChains  = flag.Int("diff.chains", 0, "concurrency differential: chains each caller runs (0: the short run, or $SHARDKIT_DIFF_CHAINS)")
)

func concChains() int {
	if *diffChains > 0 {
		return *diffChains
	}
	if n, err := strconv.Atoi(os.Getenv("SHARDKIT_DIFF_CHAINS")); err == nil && n > 0 {
		return n
	}
	if testing.Short() || raceEnabled {
		return 150
	}
	return 300
}

// TestDifferentialConcurrent is the concurrency differential on two
// servers, direct.
func TestDifferentialConcurrent(t *testing.T) {
	runConcurrentDifferential(t, newDiffEnv(t), max(*diffCallers, 8), concChains())
}

// concCase is a read case with its serial answer.
type concCase struct {
	c     dcase
	want  result
	steps int      // the steps of its chain
	share *gorm.DB // its chain but the last step, after Session: shared by every caller
}

func runConcurrentDifferential(t *testing.T, d *diffEnv, callers, chains int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// Small units: every read of several shards runs several statements
	// per server, the servers at once.
	d.e.p.unionBatch = 5
	defer func() { d.e.p.unionBatch = 0 }()
	rng := rand.New(rand.NewPCG(*diffSeed, 0xc0c))
	var cases []concCase
	skipped := 0
	for len(cases) < chains {
		input := make([]byte, 48)
		for j := range input {
			input[j] = byte(rng.UintN(256))
		}
		c := d.caseOf(input)
		if _, exact := c.ordered(); c.Op.write() || !exact {
			continue // writes change what the others read; a LIMIT over a partial order has many right answers
		}
		want := c.run(ctx, d.e.db, nil)
		plain := c.run(ctx, d.plain, nil)
		if msg := sameOutcome(c, want, plain); msg != "" && !(want.err != nil && refusal(want.err) && want.panicked == "") {
			skipped++ // TestDifferential reports it
			continue
		}
		var count chain
		c.build(&count, d.e.db, nil)
		cc := concCase{c: c, want: want, steps: count.steps}
		pre := chain{q: d.e.db.WithContext(ctx), upTo: count.steps - 1}
		c.build(&pre, d.e.db, nil)
		cc.share = pre.q.Session(&gorm.Session{})
		cases = append(cases, cc)
	}
	start := time.Now()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		bad  []string
		runs int
	)
	for w := range callers {
		wg.Go(func() {
			for i := range cases {
				k := (i + w*len(cases)/callers) % len(cases) // each caller starts elsewhere
				cc := &cases[k]
				var got result
				shared := (i+w)%2 == 1
				if shared {
					got = cc.runShared(ctx, d.e.db)
				} else {
					got = cc.c.run(ctx, d.e.db, nil)
				}
				msg := sameOutcome(cc.c, got, cc.want)
				mu.Lock()
				runs++
				if msg != "" && len(bad) < 10 {
					bad = append(bad, fmt.Sprintf("caller %d, shared chain %v: %s\n\t%s", w, shared, cc.c.code(), msg))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("%d callers × %d chains (%d runs) in %v; %d cases left to TestDifferential", callers, len(cases), runs, time.Since(start).Round(time.Millisecond), skipped)
	for _, b := range bad {
		t.Error(b)
	}
}

// runShared runs the last step of the case's chain on the shared chain.
func (cc *concCase) runShared(ctx context.Context, root *gorm.DB) (res result) {
	defer func() {
		if r := recover(); r != nil {
			res.panicked = fmt.Sprintf("%v\n%s", r, debug.Stack())
		}
	}()
	ch := chain{q: cc.share, from: cc.steps - 1}
	return cc.c.build(&ch, root, nil)
}

// sameOutcome says how two outcomes of a read differ, "" when they do
// not: the same error text, the same rows (in the same order where the
// case orders them totally), the same RowsAffected.
func sameOutcome(c dcase, got, want result) string {
	switch {
	case got.panicked != "" || want.panicked != "":
		return fmt.Sprintf("panic: %s%s", got.panicked, want.panicked)
	case (got.err == nil) != (want.err == nil) || got.err != nil && got.err.Error() != want.err.Error():
		return fmt.Sprintf("error %v, want %v", got.err, want.err)
	}
	ordered, _ := c.ordered()
	g, w := got.rows, want.rows
	if !ordered {
		g, w = sorted(g), sorted(w)
	}
	if !slices.Equal(g, w) {
		return fmt.Sprintf("rows differ:\n%s", diffRows(w, g))
	}
	if got.affected != want.affected {
		return fmt.Sprintf("RowsAffected %d, want %d", got.affected, want.affected)
	}
	return ""
}
