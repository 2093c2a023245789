package plugin

import (
	"fmt"
	"reflect"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/shardkit/shardkit/internal/pgorder"
)

// The plan stage of a read of several shards (read.go runs the stages in
// order): what each shard runs, how the shards are batched, and how the
// answers merge, decided once before anything is rendered.

// readShape is what a multi-shard read returns, and so how its units'
// answers merge.
type readShape uint8

const (
	shapeRows      readShape = iota // rows into a slice, or the first of them into a struct or map
	shapeCount                      // a plain count: the shards' counts add up
	shapeAggregate                  // aggregates, GROUP BY, DISTINCT: partials combined per group
)

// readPlan is a multi-shard read planned before any shard is read.
type readPlan struct {
	d     *decision
	shape readShape
	units [][]int                  // positions in d.shards, one server's batch each, in plan order
	base  map[string]clause.Clause // the clauses of each shard's statement
	raise bool                     // the statement's RaiseErrorOnNotFound (First, Take, Last)

	// shapeRows
	sliceTyp reflect.Type // a slice of the destination's rows
	single   bool         // the destination is one row
	keys     []orderKey   // ORDER BY, resolved against the rows
	limit    int          // -1: none
	offset   int
	pushed   int // the rows each shard returns (LIMIT+OFFSET); -1: all
	// hidden: every key is a hidden column of the answers, the last
	// len(keys); hiddenTypes are their Postgres types, from the first
	// answer (read on the caller's goroutine).
	hidden      bool
	hiddenTypes []string

	agg *aggPlan // shapeAggregate

	// raw: the read serves its merged rows as the driver returned them
	// (Row, Rows, Scan) instead of scanning them into a destination;
	// shapeRows' rows are then [][]any, ordered by hidden keys.
	raw bool
	// late: shapeRows' rows are merged as the driver returned them and
	// only the page is scanned (read_scan_late.go)
	late  bool
	kinds []pgorder.Kind // late: the kind of each key's raw values
}

// planRead plans a multi-shard read of the statement saved in s.
func (p *Plugin) planRead(db *gorm.DB, d *decision, s saved) (*readPlan, error) {
	stmt := db.Statement
	rp := &readPlan{d: d, raise: stmt.RaiseErrorOnNotFound, limit: -1, pushed: -1, base: s.clauses}
	dest := reflect.Indirect(s.rv)
	ap, ok, err := planAggregate(stmt, d.m, dest)
	switch {
	case err != nil:
		return nil, err
	case ok:
		rp.shape, rp.agg, rp.base = shapeAggregate, ap, ap.shardClauses(s.clauses)
	default:
		if err := p.planRows(db, rp, dest); err != nil {
			return nil, err
		}
	}
	batch := p.batch()
	if !unionable(stmt) {
		batch = 1
	}
	rp.units = d.units(batch)
	return rp, nil
}

// planRows plans a read of rows or a count: the destination's shape, the
// ORDER BY keys the merge sorts by, and the LIMIT each shard gets.
func (p *Plugin) planRows(db *gorm.DB, rp *readPlan, dest reflect.Value) error {
	stmt, m := db.Statement, rp.d.m
	if err := p.colocatedJoins(stmt, m); err != nil {
		return err
	}
	switch dest.Kind() {
	case reflect.Slice:
		rp.sliceTyp = dest.Type()
	case reflect.Struct, reflect.Map:
		rp.sliceTyp, rp.single = reflect.SliceOf(dest.Type()), true
	case reflect.Int64, reflect.Int:
		if !isCount(stmt) || hasFunctions(stmt, true) {
			return fmt.Errorf("%w: only a count adds up across shards; scope other aggregates to one shard", ErrUnroutableSQL)
		}
		rp.shape = shapeCount
		return nil
	default:
		return fmt.Errorf("%w: cannot merge a %s result across shards; use Find into a slice, or scope the query to one shard", ErrUnroutableSQL, dest.Kind())
	}
	if hasFunctions(stmt, false) {
		if err := windowsPerShard(stmt, m); err != nil {
			return err
		}
	}
	var err error
	if rp.keys, err = orderKeys(db, m, rp.sliceTyp.Elem()); err != nil {
		// The rows do not carry what they are ordered by: each shard
		// selects it under a hidden alias (hiddenOrderKeys).
		keys, herr := hiddenOrderKeys(db, m)
		if herr != nil {
			return herr
		}
		sel, herr := hiddenSelect(db, m, keys)
		if herr != nil {
			return herr
		}
		rp.keys, rp.hidden = keys, true
		rp.base = cloneWith(rp.base, "SELECT", sel)
	}
	c, ok := rp.base["LIMIT"]
	if !ok {
		return nil
	}
	l, ok := c.Expression.(clause.Limit)
	if ok && l.Limit != nil && *l.Limit < 0 {
		l.Limit = nil // Limit(-1) cancels the limit, as GORM writes none
	}
	if !ok || l.Limit == nil && l.Offset <= 0 {
		return nil
	}
	// Each shard returns the rows up to the end of the page; OFFSET alone
	// needs every shard's rows.
	rp.offset = l.Offset
	var e clause.Expression = literalLimit(-1)
	if l.Limit != nil {
		rp.limit = *l.Limit
		rp.pushed = rp.limit + rp.offset
		e = literalLimit(rp.pushed)
	}
	rp.base = cloneWith(rp.base, "LIMIT", clause.Clause{Name: c.Name, Expression: e, BeforeExpression: c.BeforeExpression, AfterExpression: c.AfterExpression, AfterNameExpression: c.AfterNameExpression})
	return nil
}

// batch is the most shards one statement of a multi-shard read covers.
func (p *Plugin) batch() int {
	if p.unionBatch > 0 {
		return p.unionBatch
	}
	return unionBatch
}

func cloneWith(m map[string]clause.Clause, k string, v clause.Clause) map[string]clause.Clause {
	out := make(map[string]clause.Clause, len(m)+1)
	for key, val := range m {
		out[key] = val
	}
	out[k] = v
	return out
}
