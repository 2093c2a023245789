package plugin

import (
	"reflect"
	"slices"
	"sort"
	"sync"

	"github.com/shardkit/shardkit/internal/pgorder"
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
// cutting (the specification read_merge_page_test.go checks it against).
//
// Without an ORDER BY, any LIMIT rows are a right answer: once the page
// is full, the units not yet sent are skipped (full).
type pageMerger struct {
	mu   sync.Mutex
	keys []orderKey
	ords []pgorder.Order // each key's order
	keep int             // LIMIT+OFFSET; negative: every row
	rows reflect.Value   // a slice of the destination's type
	unit []int           // the unit of each row in rows
	// kv holds each row's ORDER BY values, read once per row: with a
	// LIMIT the page stays sorted and each unit's rows are merged into
	// it in one pass, instead of sorting the page again by reflection
	// for every unit.
	kv [][]pgorder.Value
	// raw holds each row's hidden ORDER BY values as the driver returned
	// them, for a read ordered by what its rows do not carry (see
	// hiddenOrderKeys): kv is read from them, not from the rows, and they
	// are sent to Postgres where it orders the rows.
	raw [][]any
}

func newPageMerger(sliceTyp reflect.Type, keys []orderKey, keep int) *pageMerger {
	return &pageMerger{keys: keys, ords: ordsOf(keys), keep: keep, rows: reflect.MakeSlice(sliceTyp, 0, max(keep, 0)+16)}
}

// add merges a unit's rows (a slice of the destination's type), with
// their hidden ORDER BY values when the read has them (hk and raw, one per
// row; nil otherwise).
func (m *pageMerger) add(u int, part reflect.Value, hk [][]pgorder.Value, raw [][]any) {
	if !part.IsValid() || part.Len() == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.keep < 0 {
		m.rows = reflect.AppendSlice(m.rows, part)
		for range part.Len() {
			m.unit = append(m.unit, u)
		}
		if hk != nil {
			m.kv = append(m.kv, hk...)
		}
		if raw != nil {
			m.raw = append(m.raw, raw...)
		}
		return // nothing to cut: sorted once, at the end
	}
	// The unit's rows in key order (a stable sort of the few that are
	// not already: the unit's statement sorted them), merged with the
	// page, which is sorted by keys, then unit: rows of different units
	// that tie go in unit order, rows of this unit that tie keep theirs.
	n := part.Len()
	pk := hk
	if pk == nil {
		pk = make([][]pgorder.Value, n)
		for i := range n {
			pk[i] = rowKeys(part.Index(i), m.keys)
		}
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return compareKeys(pk[idx[a]], pk[idx[b]], m.ords) < 0 })
	have := m.rows.Len()
	if m.edge().excludes(pk[idx[0]], u) {
		// A full page keeps its rows unless the unit's best row goes
		// before its last one: most answers of a read of many shards
		// change nothing, and are not copied.
		return
	}
	size := min(m.keep, have+n)
	rows := reflect.MakeSlice(m.rows.Type(), 0, max(size, m.rows.Cap()))
	units := make([]int, 0, size)
	kv := make([][]pgorder.Value, 0, size)
	var rv [][]any
	if raw != nil {
		rv = make([][]any, 0, size)
	}
	i, j := 0, 0
	for len(units) < size {
		take := j == n
		if !take && i < have {
			take = goesBefore(m.kv[i], m.unit[i], pk[idx[j]], u, m.ords)
		}
		if take {
			rows = reflect.Append(rows, m.rows.Index(i))
			units, kv = append(units, m.unit[i]), append(kv, m.kv[i])
			if raw != nil {
				rv = append(rv, m.raw[i])
			}
			i++
			continue
		}
		rows = reflect.Append(rows, part.Index(idx[j]))
		units, kv = append(units, u), append(kv, pk[idx[j]])
		if raw != nil {
			rv = append(rv, raw[idx[j]])
		}
		j++
	}
	m.rows, m.unit, m.kv, m.raw = rows, units, kv, rv
}

// pageEdge is the last row of a full page (one of LIMIT+OFFSET rows): a
// row it goes before cannot enter the page, now or later, as the page
// only ever gains rows that go before its last. The zero pageEdge, of a
// page not full, excludes nothing.
type pageEdge struct {
	kv   []pgorder.Value // the last row's ORDER BY values
	unit int             // and its unit
	ords []pgorder.Order
	full bool
}

// excludes reports whether a row of ORDER BY values kv from unit u cannot
// enter the page: the page is full and its last row goes before the row.
// It is the one place the merge, lateRows and pageCut decide that.
func (e pageEdge) excludes(kv []pgorder.Value, u int) bool {
	return e.full && goesBefore(e.kv, e.unit, kv, u, e.ords)
}

// last returns the page's edge, read under its lock (the zero pageEdge
// for a nil page).
func (m *pageMerger) last() pageEdge {
	if m == nil {
		return pageEdge{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.edge()
}

// edge is last with m.mu held.
func (m *pageMerger) edge() pageEdge {
	n := m.rows.Len()
	if m.keep <= 0 || n < m.keep || len(m.kv) < n {
		return pageEdge{}
	}
	return pageEdge{kv: m.kv[n-1], unit: m.unit[n-1], ords: m.ords, full: true}
}

// full reports whether the page is complete whatever the units not yet
// read hold: a LIMIT without ORDER BY, with LIMIT+OFFSET rows in.
func (m *pageMerger) full() bool {
	if !m.canFill() {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rows.Len() >= m.keep
}

// canFill reports whether the page can be full before every unit is
// added: a LIMIT with no ORDER BY.
func (m *pageMerger) canFill() bool { return m.keep >= 0 && len(m.keys) == 0 }

// page returns the merged rows, sorted, OFFSET and LIMIT applied.
func (m *pageMerger) page(offset, limit int) reflect.Value {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.keep < 0 {
		m.sort() // with a LIMIT, add kept the page sorted
	}
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
	if m.kv != nil {
		// the rows' keys came with them (hidden values, or the raw
		// values of rows scanned late: read_scan_late.go)
		sortRowsBy(m.rows, m.kv, m.keys, m.unit, m.raw)
		return
	}
	sortRows(m.rows, m.keys, m.unit)
}

// sortRows sorts merged rows (structs of the model, pointers to them, or
// maps) stably by the ORDER BY keys, then, when units is not nil, by the
// unit each row came from (units is permuted with the rows).
func sortRows(rows reflect.Value, keys []orderKey, units []int) {
	kv := make([][]pgorder.Value, rows.Len())
	for i := range kv {
		kv[i] = rowKeys(rows.Index(i), keys)
	}
	sortRowsBy(rows, kv, keys, units, nil)
}

// sortRowsBy is sortRows with each row's ORDER BY values given (kv),
// and permutes kv and, when not nil, raw with the rows.
func sortRowsBy(rows reflect.Value, kv [][]pgorder.Value, keys []orderKey, units []int, raw [][]any) {
	n := rows.Len()
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	ords := ordsOf(keys)
	sort.SliceStable(idx, func(a, b int) bool {
		if units == nil {
			return compareKeys(kv[idx[a]], kv[idx[b]], ords) < 0
		}
		return goesBefore(kv[idx[a]], units[idx[a]], kv[idx[b]], units[idx[b]], ords)
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
	kvs, raws := slices.Clone(kv), slices.Clone(raw)
	for i, j := range idx {
		rows.Index(i).Set(tmp[j])
		if units != nil {
			units[i] = u[j]
		}
		kv[i] = kvs[j]
		if raw != nil {
			raw[i] = raws[j]
		}
	}
}

// rowKeys reads a row's ORDER BY values (NULL where a map row lacks
// the key).
func rowKeys(row reflect.Value, keys []orderKey) []pgorder.Value {
	row = reflect.Indirect(row)
	out := make([]pgorder.Value, len(keys))
	for i, k := range keys {
		switch {
		case k.scalar:
			out[i] = pgorder.FromReflect(row).As(k.as)
		case row.Kind() == reflect.Struct && k.field != nil:
			out[i] = pgorder.FromReflect(row.FieldByIndex(k.field.StructField.Index)).As(k.as)
		case row.Kind() == reflect.Map:
			out[i] = pgorder.FromReflect(row.MapIndex(reflect.ValueOf(k.name))).As(k.as)
		}
	}
	return out
}

// compareKeys orders two rows' ORDER BY values as Postgres does
// (pgorder.Compare), each by its key's order: negative when a comes first.
func compareKeys(a, b []pgorder.Value, ords []pgorder.Order) int {
	for i, o := range ords {
		if c := pgorder.Compare(a[i], b[i], o); c != 0 {
			return c
		}
	}
	return 0
}

// goesBefore is the order of a merged page: a row of ORDER BY values a
// from unit ua goes before a row of values b from unit ub when its keys
// do, or they tie and its unit comes first in the plan. Of two rows of
// one unit that tie, neither goes before the other: they keep the order
// the unit's statement gave them.
func goesBefore(a []pgorder.Value, ua int, b []pgorder.Value, ub int, ords []pgorder.Order) bool {
	if c := compareKeys(a, b, ords); c != 0 {
		return c < 0
	}
	return ua < ub
}

// ordsOf returns each key's order.
func ordsOf(keys []orderKey) []pgorder.Order {
	ords := make([]pgorder.Order, len(keys))
	for i, k := range keys {
		ords[i] = k.ord()
	}
	return ords
}
