package plugin

import (
	"bytes"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Goroutines that run a read's statements never touch GORM state: every
// statement is built on the caller's goroutine (read_render.go). These tests
// hold the plugin to it.

// goid returns the current goroutine's number.
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	n, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return n
}

// reorderingWhere is a WHERE clause built the way clause.Where builds
// one: a leading lone Or is moved behind the first other condition by
// swapping entries of the clause's own slice, which every copy of the
// clause shares. Between reading the slice and swapping there is a seam:
// a build off the goroutine that made the clause waits there until a
// second such build arrives, then both swap, and the conditions come out
// in the wrong order. Built on the caller's goroutine, one build after
// another, the first swaps and the next finds the order made.
type reorderingWhere struct {
	exprs  []clause.Expression
	caller uint64 // the goroutine that runs the read
	seam   *meeting
}

// meeting lets two builds meet: the first waits for the second, for at
// most a minute (a build that meets no other goes on alone).
type meeting struct {
	mu      sync.Mutex
	arrived int
	all     chan struct{}
	offCall int // builds that ran off the caller's goroutine
}

func (m *meeting) meet() {
	m.mu.Lock()
	m.arrived++
	m.offCall++
	if m.arrived == 2 {
		close(m.all)
	}
	m.mu.Unlock()
	select {
	case <-m.all:
	case <-time.After(time.Minute):
	}
}

// Name is part of clause.Interface.
func (reorderingWhere) Name() string { return "WHERE" }

// MergeClause is part of clause.Interface.
func (w reorderingWhere) MergeClause(c *clause.Clause) { c.Expression = w }

// Build is part of clause.Expression.
func (w reorderingWhere) Build(b clause.Builder) {
	idx := 0
	for i, e := range w.exprs {
		if or, ok := e.(clause.OrConditions); !ok || len(or.Exprs) > 1 {
			idx = i
			break
		}
	}
	if goid() != w.caller {
		w.seam.meet()
	}
	if idx != 0 {
		w.exprs[0], w.exprs[idx] = w.exprs[idx], w.exprs[0]
	}
	for i, e := range w.exprs {
		if i > 0 {
			if or, ok := e.(clause.OrConditions); ok && len(or.Exprs) == 1 {
				b.WriteString(" OR ")
			} else {
				b.WriteString(" AND ")
			}
		}
		e.Build(b)
	}
}

// TestReadBuildsOnCallersGoroutine reads two users on two servers with a
// WHERE that reorders itself in place as GORM's does (user A OR user B,
// the Or first): built by two goroutines at once, both swap and each
// server gets "user B AND user A", which finds nothing. The plugin builds
// every statement on the caller's goroutine, so the answer is both
// users' photos, and no build runs elsewhere.
func TestReadBuildsOnCallersGoroutine(t *testing.T) {
	e := newEnv(t, envOpts{})
	ua, ub := e.userOn(t, "a", 1), e.userOn(t, "b", 1)
	var want []int64
	for _, u := range []int64{ua, ub, ua, ub} {
		p := Photo{UserID: u, Caption: "meet"}
		if err := e.db.Create(&p).Error; err != nil {
			t.Fatal(err)
		}
		want = append(want, p.ID)
	}
	slices.Sort(want)
	for _, batch := range []int{0, 1} { // unions, and one statement per shard
		e.p.unionBatch = batch
		w := reorderingWhere{
			exprs: []clause.Expression{
				clause.OrConditions{Exprs: []clause.Expression{clause.Expr{SQL: "user_id = ?", Vars: []any{ub}}}},
				clause.Expr{SQL: "user_id = ?", Vars: []any{ua}},
			},
			caller: goid(),
			seam:   &meeting{all: make(chan struct{})},
		}
		var got []Photo
		err := e.db.Session(&gorm.Session{SkipDefaultTransaction: true}).Clauses(AllShards(), w).Order("id").Find(&got).Error
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]int64, len(got))
		for i, p := range got {
			ids[i] = p.ID
		}
		if !slices.Equal(ids, want) {
			t.Errorf("batch %d: read photos %v, want %v (a statement built off the caller's goroutine, %d such builds)", batch, ids, want, w.seam.offCall)
		}
		if w.seam.offCall != 0 {
			t.Errorf("batch %d: %d builds ran off the caller's goroutine", batch, w.seam.offCall)
		}
	}
	e.p.unionBatch = 0
}
