package plugin

import (
	"reflect"
	"sort"
	"sync"
)

// pageMerger merges the rows of a multi-shard read as each unit (one
// server's statement over a batch of its shards) answers, instead of
// holding every unit's rows until the last one is in. With a LIMIT it
// keeps only the best LIMIT+OFFSET rows seen so far, so a read holds at
// most a page per server in flight plus the page being built, however
// many shards it reads. Rows that tie on the ORDER BY keys keep the order
// of their units in the plan (then their order within the unit), so the
// answer does not depend on which server answers first: it is the answer
// of concatenating every unit's rows in plan order, sorting stably and
// cutting, which is what a read held before it merged as it went.
//
// Without an ORDER BY, any LIMIT rows are a right answer: once the page
// is full, the units not yet sent are skipped (full).
type pageMerger struct {
	mu   sync.Mutex
	keys []orderKey
	keep int           // LIMIT+OFFSET; negative: every row
	rows reflect.Value // a slice of the destination's type
	unit []int         // the unit of each row in rows
}

func newPageMerger(sliceTyp reflect.Type, keys []orderKey, keep int) *pageMerger {
	return &pageMerger{keys: keys, keep: keep, rows: reflect.MakeSlice(sliceTyp, 0, max(keep, 0)+16)}
}

// add merges a unit's rows (a slice of the destination's type).
func (m *pageMerger) add(u int, part reflect.Value) {
	if !part.IsValid() || part.Len() == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rows = reflect.AppendSlice(m.rows, part)
	for range part.Len() {
		m.unit = append(m.unit, u)
	}
	if m.keep < 0 || m.rows.Len() <= m.keep {
		return // nothing to cut: sorted once, at the end
	}
	m.sort()
	if m.rows.Len() > m.keep {
		m.rows = m.rows.Slice(0, m.keep)
		m.unit = m.unit[:m.keep]
	}
}

// full reports whether the page is complete whatever the units not yet
// read hold: a LIMIT without ORDER BY, with LIMIT+OFFSET rows in.
func (m *pageMerger) full() bool {
	if m.keep < 0 || len(m.keys) > 0 {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rows.Len() >= m.keep
}

// page returns the merged rows, sorted, OFFSET and LIMIT applied.
func (m *pageMerger) page(offset, limit int) reflect.Value {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sort()
	acc := m.rows
	if offset > 0 {
		acc = acc.Slice(min(offset, acc.Len()), acc.Len())
	}
	if limit >= 0 && acc.Len() > limit {
		acc = acc.Slice(0, limit)
	}
	return acc
}

// sort orders the rows by the ORDER BY keys, then by unit; rows of one
// unit that tie keep their order.
func (m *pageMerger) sort() {
	sortRows(m.rows, m.keys, m.unit)
}

// sortRows sorts merged rows (structs of the model, pointers to them, or
// maps) stably by the ORDER BY keys, then, when units is not nil, by the
// unit each row came from (units is permuted with the rows).
func sortRows(rows reflect.Value, keys []orderKey, units []int) {
	get := func(i int, k orderKey) reflect.Value {
		row := reflect.Indirect(rows.Index(i))
		if k.scalar {
			return row
		}
		switch row.Kind() {
		case reflect.Struct:
			if k.field != nil {
				return reflect.Indirect(row.FieldByIndex(k.field.StructField.Index))
			}
		case reflect.Map:
			if v := row.MapIndex(reflect.ValueOf(k.name)); v.IsValid() {
				return reflect.Indirect(reflect.ValueOf(v.Interface()))
			}
		}
		return reflect.Value{}
	}
	n := rows.Len()
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		for _, k := range keys {
			if c := compare(get(idx[a], k), get(idx[b], k)); c != 0 {
				return (c < 0) != k.desc
			}
		}
		return units != nil && units[idx[a]] < units[idx[b]]
	})
	sorted := true
	for i, j := range idx {
		sorted = sorted && i == j
	}
	if sorted {
		return
	}
	tmp := make([]reflect.Value, n)
	for i := range tmp {
		tmp[i] = reflect.ValueOf(rows.Index(i).Interface())
	}
	var u []int
	if units != nil {
		u = append([]int(nil), units...)
	}
	for i, j := range idx {
		rows.Index(i).Set(tmp[j])
		if units != nil {
			units[i] = u[j]
		}
	}
}
