package plugin

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"

	"gorm.io/gorm/schema"
)

// TestPageMergerMatchesSortingEverything checks the merge that keeps only
// a page against its specification: concatenate every unit's rows in plan
// order, sort stably by the ORDER BY keys, apply OFFSET and LIMIT. Units
// answer in random orders (servers answer when they answer), keys tie
// often, and the answer must not change with the arrival order.
func TestPageMergerMatchesSortingEverything(t *testing.T) {
	type row struct {
		A    int
		B    string
		Unit int
		Pos  int
	}
	s, err := schema.Parse(&row{}, &sync.Map{}, schema.NamingStrategy{})
	if err != nil {
		t.Fatal(err)
	}
	keyA := orderKey{field: s.LookUpField("a"), name: "a"}
	keyB := orderKey{field: s.LookUpField("b"), name: "b"}
	orders := map[string][]orderKey{
		"none":        nil,
		"a":           {keyA},
		"a desc":      {{field: keyA.field, name: "a", desc: true}},
		"a, b desc":   {keyA, {field: keyB.field, name: "b", desc: true}},
		"b desc, a":   {{field: keyB.field, name: "b", desc: true}, keyA},
		"b (ties) ":   {keyB},
		"a desc, b":   {{field: keyA.field, name: "a", desc: true}, keyB},
		"a, b, (all)": {keyA, keyB},
	}
	rng := rand.New(rand.NewPCG(7, 11))
	sliceTyp := reflect.TypeOf([]row{})
	for name, keys := range orders {
		for trial := range 300 {
			nunits := 1 + rng.IntN(8)
			limit, offset := -1, 0
			if rng.IntN(4) > 0 {
				limit = rng.IntN(12)
				offset = rng.IntN(4)
			}
			keep := -1
			if limit >= 0 {
				keep = limit + offset
			}
			units := make([][]row, nunits)
			for u := range units {
				n := rng.IntN(keep + 8)
				for i := range n {
					units[u] = append(units[u], row{A: rng.IntN(4), B: string(rune('a' + rng.IntN(3))), Unit: u, Pos: i})
				}
				// each unit's rows come from Postgres in the statement's order
				sortRows(reflect.ValueOf(units[u]), keys, nil)
				if keep >= 0 && len(units[u]) > keep {
					units[u] = units[u][:keep] // the pushed-down LIMIT
				}
			}
			// the specification
			var all []row
			for _, part := range units {
				all = append(all, part...)
			}
			want := reflect.ValueOf(slices.Clone(all))
			sortRows(want, keys, nil)
			lo := min(offset, want.Len())
			want = want.Slice(lo, want.Len())
			if limit >= 0 && want.Len() > limit {
				want = want.Slice(0, limit)
			}
			for range 3 {
				m := newPageMerger(sliceTyp, keys, keep)
				for _, u := range rng.Perm(nunits) {
					m.add(u, reflect.ValueOf(slices.Clone(units[u])), nil, nil)
				}
				got := m.page(offset, limit).Interface().([]row)
				if len(keys) == 0 && limit >= 0 {
					// any rows are right without an order: as many as the
					// specification's, each one a row read
					if len(got) != want.Len() {
						t.Fatalf("%s, trial %d: %d rows, want %d", name, trial, len(got), want.Len())
					}
					for _, r := range got {
						if !slices.Contains(all, r) {
							t.Fatalf("%s, trial %d: row %+v was never read", name, trial, r)
						}
					}
					continue
				}
				if !reflect.DeepEqual(got, want.Interface().([]row)) && !(len(got) == 0 && want.Len() == 0) {
					t.Fatalf("%s, trial %d (limit %d offset %d):\n got %+v\nwant %+v", name, trial, limit, offset, got, want.Interface())
				}
			}
		}
	}
}

// TestPageMergerFull: without an ORDER BY, a page is complete once it
// holds LIMIT+OFFSET rows, and the read stops sending statements; with an
// ORDER BY it never is (a later unit may hold better rows).
func TestPageMergerFull(t *testing.T) {
	typ := reflect.TypeOf([]int64{})
	unordered := newPageMerger(typ, nil, 3)
	ordered := newPageMerger(typ, []orderKey{{scalar: true, name: "v"}}, 3)
	for _, m := range []*pageMerger{unordered, ordered} {
		m.add(0, reflect.ValueOf([]int64{5, 4}), nil, nil)
		if m.full() {
			t.Fatal("full with 2 of 3 rows")
		}
		m.add(1, reflect.ValueOf([]int64{3, 2}), nil, nil)
	}
	if !unordered.full() {
		t.Error("unordered page of 3 with 4 rows read is not full")
	}
	if ordered.full() {
		t.Error("ordered page reported full: a later unit may hold a smaller value")
	}
	if got := ordered.page(0, 3).Interface().([]int64); !slices.Equal(got, []int64{2, 3, 4}) {
		t.Errorf("ordered page %v, want [2 3 4]", got)
	}
	if got := unordered.page(1, 2).Len(); got != 2 {
		t.Errorf("unordered page of 2 after OFFSET 1: %d rows", got)
	}
}
