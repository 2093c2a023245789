package plugin

import (
	"reflect"
	"slices"
	"sync/atomic"

	"gorm.io/gorm"

	"github.com/shardkit/shardkit/internal/memrows"
	"github.com/shardkit/shardkit/internal/pgorder"
)

// A read of rows with a LIMIT across shards gets up to LIMIT+OFFSET rows
// from every statement and keeps LIMIT of them: of the 20 statements of a
// read of 2000 shards, 19 pages' worth of rows are read only to be
// dropped. Scanning each answer with GORM before the merge cost as much
// client CPU as the rest of the read together (reflection, a struct per
// row, conversions per column). So such a read merges the rows as the
// driver returned them, ordered by the raw values of its ORDER BY
// columns, and GORM scans only the page, once, at the end: with the same
// scanning, from the same driver values, as before.
//
// A raw value orders a row only where it is the value GORM would scan
// into the key's field, of the kind pgorder reads from that field (an
// int8 column for an int64 field, text for a string, ...). An answer
// whose key columns are not, or cannot be found by name, is scanned as it
// arrives, as every answer was, and its rows carry their scanned keys.

// lateRow is a row of such a read: the driver's values and the columns
// they came with (an index into readResults.colsets), or, with cols -1, a
// row scanned as its answer arrived.
type lateRow struct {
	vals []any
	cols int
	row  reflect.Value
}

var lateRowsType = reflect.TypeOf([]lateRow(nil))

// lateScan reports whether the planned read merges its rows unscanned: a
// read of rows into structs, or of plucked values, with a LIMIT or an
// OFFSET, ordered by fields (or the plucked value) whose raw values order
// them as their scanned values do (or unordered), merged in Go. It
// returns with it the kind of each key's raw values, as the merge reads
// them (a numeric column's text as numeric).
func (rp *readPlan) lateScan() ([]pgorder.Kind, bool) {
	if rp.shape != shapeRows || rp.raw || rp.hidden || rp.limit < 0 && rp.offset <= 0 || rp.pgOrder() {
		return nil, false
	}
	elem := rp.sliceTyp.Elem()
	for elem.Kind() == reflect.Pointer {
		elem = elem.Elem()
	}
	scalar := elem.Kind() != reflect.Struct
	if scalar && elem.Kind() == reflect.Map {
		return nil, false
	}
	kinds := make([]pgorder.Kind, len(rp.keys))
	for j, k := range rp.keys {
		if k.scalar != scalar || !scalar && k.field == nil {
			return nil, false
		}
		t := elem
		if !scalar {
			t = k.field.IndirectFieldType
		}
		if kinds[j] = orderKind(t, k.as); kinds[j] == pgorder.Other {
			return nil, false
		}
	}
	return kinds, true
}

// orderKind is the kind pgorder reads from a key's Go values of type t,
// read as as (0: as they are); Other where a raw value may order
// differently from the scanned one (a float32 rounds a float8 column's
// values).
func orderKind(t reflect.Type, as pgorder.Kind) pgorder.Kind {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Float32 {
		return pgorder.Other
	}
	if as != 0 {
		return as
	}
	return pgorder.FromReflect(reflect.Zero(t)).Kind()
}

// keyName is the column a key's values are read from in the answers.
func keyName(k orderKey) string {
	if k.field != nil {
		return k.field.DBName
	}
	return k.name
}

// lateRows keeps the rows of an answer of unit u that can still enter
// the page, for the merge, with their ORDER BY values: read raw where
// every key column is found and holds values of its key's kind, else
// scanned now (see above). Once the page is full, a row that its last
// row goes before cannot enter it (the page only gains rows that go
// before it), and is not kept: of a read of 2000 shards' 20 answers of
// a page each, most rows are dropped here instead of in the merge.
func (p *Plugin) lateRows(db *gorm.DB, rp *readPlan, res *readResults, u int, pt partials) ([]lateRow, [][]pgorder.Value, bool) {
	c := res.colset(rp.keys, pt.cols)
	nk := len(rp.keys)
	edge := res.page.last()
	if nk == 0 {
		edge = pageEdge{} // without ORDER BY, full() skips the units not needed
	}
	if at := res.keyCols[c]; at != nil || nk == 0 {
		var rows []lateRow
		var hk [][]pgorder.Value
		if !edge.full {
			rows, hk = make([]lateRow, 0, len(pt.rows)), make([][]pgorder.Value, 0, len(pt.rows))
		}
		scratch := make([]pgorder.Value, nk)
		var block []pgorder.Value // kept rows' keys, a few rows' to an allocation
		ok := true
		for _, row := range pt.rows {
			for j := range rp.keys {
				v := pgorder.FromReflect(reflect.ValueOf(row[at[j]])).As(rp.keys[j].as)
				if !v.IsNull() && v.Kind() != rp.kinds[j] {
					ok = false
					break
				}
				scratch[j] = v
			}
			if !ok {
				break
			}
			if edge.excludes(scratch, u) {
				continue
			}
			var kv []pgorder.Value
			if nk > 0 {
				if len(block) < nk {
					block = make([]pgorder.Value, nk*min(len(pt.rows), 16))
				}
				kv, block = block[:nk:nk], block[nk:]
				copy(kv, scratch)
			}
			rows, hk = append(rows, lateRow{vals: row, cols: c}), append(hk, kv)
		}
		if ok {
			return rows, hk, true
		}
	}
	tmp := reflect.New(rp.sliceTyp)
	if !p.scanAnswer(db, pt, tmp.Interface()) {
		return nil, nil, false
	}
	scanned := tmp.Elem()
	rows, hk := make([]lateRow, 0, scanned.Len()), make([][]pgorder.Value, 0, scanned.Len())
	for i := range scanned.Len() {
		kv := rowKeys(scanned.Index(i), rp.keys)
		if !edge.excludes(kv, u) {
			rows, hk = append(rows, lateRow{cols: -1, row: scanned.Index(i)}), append(hk, kv)
		}
	}
	return rows, hk, true
}

// scansPage reports whether the read's rows are merged as the driver
// returned them and only its page is scanned: a read merged late, one
// ordered by hidden values (their keys are the hidden columns', never the
// scanned rows'), or one not ordered at all (nothing of a row is read
// before the cut). A row is then converted into the destination only if
// it is returned, so a value past the page that the destination cannot
// hold (a NULL into an int32 that GORM's Pluck scans) fails no read, as
// it fails none on one table, where Postgres never returns that row; one
// in the page fails the read as it fails plain GORM.
func (rp *readPlan) scansPage() bool {
	return rp.shape == shapeRows && !rp.raw && (rp.late || rp.hidden || len(rp.keys) == 0)
}

// unscanned returns an answer's rows as rows of a page scanned at the end.
func (r *readResults) unscanned(pt partials) []lateRow {
	c := r.colset(nil, pt.cols)
	rows := make([]lateRow, len(pt.rows))
	for i, row := range pt.rows {
		rows[i] = lateRow{vals: row, cols: c}
	}
	return rows
}

// colset returns the index of cols among the column sets answers came
// with, adding it (and where its key columns are) if it is new. Answers
// of one read have the same columns but while a schema change is under
// way on some of its shards.
func (r *readResults) colset(keys []orderKey, cols []memrows.Column) int {
	for i, have := range r.colsets {
		if slices.Equal(have, cols) {
			return i
		}
	}
	r.colsets = append(r.colsets, cols)
	r.keyCols = append(r.keyCols, keyColumns(keys, cols))
	return len(r.colsets) - 1
}

// keyColumns finds each key's column by its field's name (a plucked
// value's: the answer's one column); nil if one is missing or named
// twice, or a key has no field (a hidden one).
func keyColumns(keys []orderKey, cols []memrows.Column) []int {
	names := make([]string, len(keys))
	for j, k := range keys {
		switch {
		case k.scalar && len(cols) == 1:
			names[j] = cols[0].Name
		case k.field == nil && !k.scalar:
			return nil
		default:
			names[j] = keyName(k)
		}
	}
	return columnsNamed(names, cols)
}

// columnsNamed finds each name's column; nil if one is missing or named
// twice (or there are no names).
func columnsNamed(names []string, cols []memrows.Column) []int {
	if len(names) == 0 {
		return nil
	}
	at := make([]int, len(names))
	for j, name := range names {
		at[j] = -1
		for i, c := range cols {
			if c.Name != name {
				continue
			}
			if at[j] >= 0 {
				return nil
			}
			at[j] = i
		}
		if at[j] < 0 {
			return nil
		}
	}
	return at
}

// pageFilter is what the goroutine that reads a statement's rows needs
// to drop, as they arrive, the rows that cannot enter the page of a read
// merged in Go (lateRows drops them too, later and after converting every
// value): the page, whose last row it reads under the page's lock, and
// the ORDER BY keys' columns, kinds and orders. It holds no GORM state.
type pageFilter struct {
	page    *pageMerger
	names   []string
	kinds   []pgorder.Kind
	as      []pgorder.Kind // what each key's values are read as (orderKey.as)
	dropped *atomic.Int64  // counts the rows dropped (Plugin.cutRows)
}

// pageFilter returns the read's pageFilter; nil for a read that has none
// (no ORDER BY, no LIMIT, not merged late).
func (r *readResults) pageFilter(rp *readPlan, dropped *atomic.Int64) *pageFilter {
	if !rp.late || len(rp.keys) == 0 || r.page == nil || r.page.keep <= 0 {
		return nil
	}
	f := &pageFilter{page: r.page, kinds: rp.kinds, dropped: dropped}
	for _, k := range rp.keys {
		f.names, f.as = append(f.names, keyName(k)), append(f.as, k.as)
	}
	return f
}

// pageCut is a pageFilter applied to one statement's rows of unit u.
type pageCut struct {
	f    *pageFilter
	u    int
	at   []int       // the key columns
	conv []valueFunc // of every column
	kv   []pgorder.Value
	n    int // rows dropped
	seen int // rows looked at: the page's edge is read again every 16
	edge pageEdge
	stop bool // a key value did not convert or is of another kind: keep every row
}

// cut returns the pageCut of a statement of unit u whose rows come with
// cols and are converted by conv; nil where the key columns are not all
// found once by name (every row is kept, as lateRows then scans them).
func (f *pageFilter) cut(cols []memrows.Column, conv []valueFunc, u int) *pageCut {
	at := columnsNamed(f.names, cols)
	if at == nil {
		return nil
	}
	return &pageCut{f: f, u: u, at: at, conv: conv, kv: make([]pgorder.Value, len(at))}
}

// drop reports whether a row (its values on the wire) cannot enter the
// page: the page is full and its last row goes before this one. The page
// only gains rows that go before its last, so a row dropped on a page
// read earlier is one the page would drop now. A key value that does not
// convert, or is not of its key's kind, stops the cut: the row and every
// later one are kept, for lateRows to handle as it does every row.
func (c *pageCut) drop(raw [][]byte) bool {
	if c.out(raw) {
		c.n++
		return true
	}
	return false
}

// done counts the statement's dropped rows.
func (c *pageCut) done() {
	c.f.dropped.Add(int64(c.n))
}

func (c *pageCut) out(raw [][]byte) bool {
	if c.stop {
		return false
	}
	if c.seen%16 == 0 {
		c.edge = c.f.page.last()
	}
	c.seen++
	if !c.edge.full {
		return false
	}
	for j, i := range c.at {
		var v any
		if raw[i] != nil {
			var err error
			if v, err = c.conv[i](raw[i]); err != nil {
				c.stop = true // the row's conversion fails where it is kept
				return false
			}
		}
		c.kv[j] = pgorder.FromReflect(reflect.ValueOf(v))
		if j < len(c.f.as) {
			c.kv[j] = c.kv[j].As(c.f.as[j])
		}
		if !c.kv[j].IsNull() && c.kv[j].Kind() != c.f.kinds[j] {
			c.stop = true
			return false
		}
	}
	return c.edge.excludes(c.kv, c.u)
}

// scanPage scans the merged page's rows into a slice of the read's
// destination type: each run of raw rows with the same columns in one
// scan, rows scanned on arrival as they are.
func (p *Plugin) scanPage(db *gorm.DB, rp *readPlan, res *readResults, page []lateRow) (reflect.Value, bool) {
	acc := reflect.MakeSlice(rp.sliceTyp, 0, len(page))
	for i := 0; i < len(page); {
		if page[i].cols < 0 {
			acc = reflect.Append(acc, page[i].row)
			i++
			continue
		}
		c, j := page[i].cols, i
		var run [][]any
		for ; j < len(page) && page[j].cols == c; j++ {
			run = append(run, page[j].vals)
		}
		tmp := reflect.New(rp.sliceTyp)
		if !p.scanAnswer(db, partials{cols: res.colsets[c], rows: run}, tmp.Interface()) {
			return acc, false
		}
		acc = reflect.AppendSlice(acc, tmp.Elem())
		i = j
	}
	return acc, true
}
