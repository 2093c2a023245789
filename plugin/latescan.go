package plugin

import (
	"database/sql"
	"reflect"

	"gorm.io/gorm"

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
// read of rows into structs, with a LIMIT, ordered by fields whose raw
// values order them as their scanned values do (or unordered), merged in
// Go. It returns with it the kind of each key's raw values.
func (rp *readPlan) lateScan() ([]pgorder.Kind, bool) {
	if rp.shape != shapeRows || rp.raw || rp.hidden || rp.pushed < 0 || rp.pgOrder() {
		return nil, false
	}
	elem := rp.sliceTyp.Elem()
	for elem.Kind() == reflect.Pointer {
		elem = elem.Elem()
	}
	if elem.Kind() != reflect.Struct {
		return nil, false
	}
	kinds := make([]pgorder.Kind, len(rp.keys))
	for j, k := range rp.keys {
		if k.field == nil || k.scalar {
			return nil, false
		}
		if kinds[j] = orderKind(k); kinds[j] == pgorder.Other {
			return nil, false
		}
	}
	return kinds, true
}

// orderKind is the kind pgorder reads from a key's field; Other where a
// raw value may order differently from the scanned one (a float32 field
// rounds a float8 column's values).
func orderKind(k orderKey) pgorder.Kind {
	t := k.field.IndirectFieldType
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Float32 {
		return pgorder.Other
	}
	return pgorder.FromReflect(reflect.Zero(t)).Kind()
}

// lateRows keeps an answer's rows for the merge with their ORDER BY
// values: read raw where every key column is found and holds values of
// its key's kind, else scanned now (see above).
func (p *Plugin) lateRows(db *gorm.DB, rp *readPlan, res *readResults, pt partials) ([]lateRow, [][]pgorder.Value, bool) {
	c := res.colset(rp.keys, pt.cols)
	out := make([]lateRow, len(pt.rows))
	hk := make([][]pgorder.Value, len(pt.rows))
	if at := res.keyCols[c]; at != nil || len(rp.keys) == 0 {
		ok := true
		nk := len(rp.keys)
		block := make([]pgorder.Value, nk*len(pt.rows)) // every row's keys, in one allocation
		for i, row := range pt.rows {
			out[i] = lateRow{vals: row, cols: c}
			if nk == 0 {
				continue
			}
			kv := block[i*nk : (i+1)*nk : (i+1)*nk]
			for j := range rp.keys {
				v := pgorder.FromReflect(reflect.ValueOf(row[at[j]]))
				if !v.IsNull() && v.Kind() != rp.kinds[j] {
					ok = false
					break
				}
				kv[j] = v
			}
			if !ok {
				break
			}
			hk[i] = kv
		}
		if ok {
			return out, hk, true
		}
	}
	tmp := reflect.New(rp.sliceTyp)
	if !p.scanAnswer(db, pt, tmp.Interface()) {
		return nil, nil, false
	}
	scanned := tmp.Elem()
	out, hk = out[:scanned.Len()], hk[:scanned.Len()]
	for i := range out {
		out[i] = lateRow{cols: -1, row: scanned.Index(i)}
		hk[i] = rowKeys(out[i].row, rp.keys)
	}
	return out, hk, true
}

// colset returns the index of cols among the column sets answers came
// with, adding it (and where its key columns are) if it is new. Answers
// of one read have the same columns but while a schema change is under
// way on some of its shards.
func (r *readResults) colset(keys []orderKey, cols []*sql.ColumnType) int {
	for i, have := range r.colsets {
		if sameColumns(have, cols) {
			return i
		}
	}
	r.colsets = append(r.colsets, cols)
	r.keyCols = append(r.keyCols, keyColumns(keys, cols))
	return len(r.colsets) - 1
}

func sameColumns(a, b []*sql.ColumnType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name() != b[i].Name() || a[i].DatabaseTypeName() != b[i].DatabaseTypeName() {
			return false
		}
	}
	return true
}

// keyColumns finds each key's column by its field's name; nil if one is
// missing or named twice.
func keyColumns(keys []orderKey, cols []*sql.ColumnType) []int {
	if len(keys) == 0 {
		return nil
	}
	at := make([]int, len(keys))
	for j, k := range keys {
		at[j] = -1
		for i, c := range cols {
			if c.Name() != k.field.DBName {
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
