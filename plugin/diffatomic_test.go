package plugin

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"
)

// errGroupRollback ends a group of the atomic differential that rolls back.
var errGroupRollback = errors.New("the group rolls back")

// TestDifferentialAtomic runs groups of two to five random cases of the
// differential test in one transaction: db.Clauses(Atomic()).Transaction
// through the plugin (the cases' rows are on 64 shards over two servers,
// so most groups commit by two-phase commit) and a plain GORM Transaction
// on one table. One group in four rolls back at its end. A case the
// plugin refuses with a typed refusal is skipped on the plain side and the
// group goes on: a refusal inside a transaction must change nothing; a
// group with a case that fails otherwise rolls back on both sides, and
// plain GORM must fail that case too. After each group the
// data of both sides must be equal, read with direct SQL, and no
// prepared transaction may be left. Each case's RowsAffected, and the rows
// of reads whose order is total, must be plain GORM's: reads inside the
// transaction see its earlier writes on every server.
//
//	go test ./plugin -run TestDifferentialAtomic -diff.n 500
func TestDifferentialAtomic(t *testing.T) {
	d := newDiffEnv(t)
	groups := max(*diffN/5, 40)
	if testing.Short() || raceEnabled {
		groups = 15
	}
	rng := rand.New(rand.NewPCG(*diffSeed, 0xa70))
	before := d.count(t, "a", `SELECT count(*) FROM shardkit.tx_decisions`) + d.count(t, "b", `SELECT count(*) FROM shardkit.tx_decisions`)
	outcomes := map[string]int{}
	for i := 0; i < groups; i++ {
		var cs []dcase
		for n := 2 + rng.IntN(4); len(cs) < n; {
			input := make([]byte, 48)
			for j := range input {
				input[j] = byte(rng.UintN(256))
			}
			if c := d.caseOf(input); !c.Pins { // lookup columns are refused in transactions
				cs = append(cs, c)
			}
		}
		rollback := rng.IntN(4) == 0
		outcomes[d.atomicGroup(t, i, cs, rollback)]++
	}
	committed := d.count(t, "a", `SELECT count(*) FROM shardkit.tx_decisions`) + d.count(t, "b", `SELECT count(*) FROM shardkit.tx_decisions`) - before
	t.Logf("%d groups: %v; %d committed by two-phase commit", groups, outcomes, committed)
	if committed == 0 {
		t.Fatal("no group committed across servers: the test did not exercise two-phase commit")
	}
}

// atomicGroup runs one group on both sides, checks it and returns its
// outcome's name.
func (d *diffEnv) atomicGroup(t *testing.T, i int, cs []dcase, rollback bool) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var code strings.Builder
	for _, c := range cs {
		code.WriteString("\n\t" + c.code())
	}
	fail := func(format string, args ...any) {
		t.Fatalf("group %d (rollback %v):%s\n%s", i, rollback, code.String(), fmt.Sprintf(format, args...))
	}
	var rs []result
	stop := -1
	errS := d.e.db.WithContext(ctx).Clauses(Atomic()).Transaction(func(tx *gorm.DB) error {
		for j, c := range cs {
			r := c.run(ctx, tx, nil)
			if r.panicked != "" {
				fail("plugin panicked: %s", trimStack(r.panicked))
			}
			rs = append(rs, r)
			if r.err != nil && !refusal(r.err) {
				stop = j
				return r.err
			}
		}
		if rollback {
			return errGroupRollback
		}
		return nil
	})
	errP := d.plain.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		for j, c := range cs {
			if j != stop && rs[j].err != nil {
				continue // refused: it must have changed nothing
			}
			r := c.run(ctx, tx, rs[j].ids)
			if r.panicked != "" {
				fail("plain GORM panicked: %s", r.panicked)
			}
			if j == stop {
				if r.err == nil {
					fail("case %d: error that is not a typed refusal: %v", j, rs[j].err)
				}
				return errGroupRollback
			}
			if r.err != nil {
				fail("case %d: success where plain GORM failed: %v", j, r.err)
			}
			if r.affected != rs[j].affected {
				fail("case %d: RowsAffected plugin %d, plain GORM %d", j, rs[j].affected, r.affected)
			}
			if ordered, exact := c.ordered(); exact && !c.Op.write() {
				a, b := rs[j].rows, r.rows
				if !ordered {
					a, b = sorted(a), sorted(b)
				}
				if !slices.Equal(a, b) {
					fail("case %d: rows differ\n%s", j, diffRows(b, a))
				}
			}
		}
		if rollback {
			return errGroupRollback
		}
		return nil
	})
	outcome := "committed"
	refused := 0
	for _, r := range rs {
		if r.err != nil && refusal(r.err) {
			refused++
		}
	}
	if refused > 0 {
		outcome = "committed, some cases refused"
	}
	switch {
	case stop >= 0:
		outcome = "failed on both sides"
	case rollback:
		outcome = "rolled back"
		if refused > 0 {
			outcome = "rolled back, with cases refused"
		}
		if !errors.Is(errS, errGroupRollback) {
			fail("plugin: %v", errS)
		}
	case errS != nil:
		fail("plugin's commit: %v", errS)
	}
	if errP != nil && !errors.Is(errP, errGroupRollback) {
		fail("plain GORM's transaction: %v", errP)
	}
	st := d.state(t, false)
	if len(st.misplaced) > 0 {
		fail("rows stranded:\n%s", strings.Join(st.misplaced, "\n"))
	}
	if !slices.Equal(st.sharded, st.plain) {
		fail("data differs after the group (%s):\n%s", outcome, diffRows(st.plain, st.sharded))
	}
	for _, srv := range d.e.servers {
		if n := d.count(t, srv, `SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()`); n != 0 {
			fail("%d prepared transactions left on %s", n, srv)
		}
	}
	if !slices.Equal(st.sharded, d.seed) {
		d.reset(t, false)
	}
	return outcome
}

// count runs a count on a server over the test's cached connection.
func (d *diffEnv) count(t *testing.T, server, sql string) int {
	t.Helper()
	var n int
	if err := d.conn(t, d.e.dsn[server]).QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
