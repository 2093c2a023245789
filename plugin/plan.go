package plugin

import (
	"errors"
	"fmt"
	"reflect"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/shardkit/shardkit/router"
)

// statementShards finds the shards a query, update, delete or row
// statement may touch: from the model value's primary key (GORM adds it
// to the WHERE clause) and from the WHERE conditions.
func (m *model) statementShards(db *gorm.DB, o op, snap *router.Snapshot) (shardSet, error) {
	stmt := db.Statement
	var set shardSet
	rv := stmt.ReflectValue
	switch {
	case rv.Kind() == reflect.Struct && rv.Type() == m.schema.ModelType:
		pk := m.pk.ReflectValueOf(stmt.Context, rv)
		if pk.IsZero() {
			break
		}
		id := intOf(pk)
		s, err := shardOfID(id, snap)
		if err != nil {
			return set, err
		}
		if o == opUpdate || o == opDelete {
			if ks, err := m.shardOfRow(db, rv, snap); err == nil && ks != s {
				return set, fmt.Errorf("%w: ID %d is in shard %d, the row's %s is in shard %d", ErrIDShardMismatch, id, s, m.key.Name, ks)
			}
		}
		set = one(s)
	case (o == opUpdate || o == opDelete) && rv.Kind() == reflect.Slice:
		for i := 0; i < rv.Len(); i++ {
			row := reflect.Indirect(rv.Index(i))
			if row.Type() != m.schema.ModelType {
				break
			}
			pk := m.pk.ReflectValueOf(stmt.Context, row)
			if pk.IsZero() {
				continue
			}
			s, err := shardOfID(intOf(pk), snap)
			if err != nil {
				return set, err
			}
			set.known = true
			set.list = add(set.list, s)
		}
	}
	if c, ok := stmt.Clauses["WHERE"]; ok {
		if w, ok := c.Expression.(clause.Where); ok {
			ws, err := m.exprShards(stmt, w.Exprs, snap)
			if err != nil {
				return set, err
			}
			set = set.and(ws)
		}
	}
	return set, nil
}

// createShards groups the rows of a Create by shard. rows is nil when
// they all belong to one shard.
func (m *model) createShards(db *gorm.DB, snap *router.Snapshot) (shardSet, map[int][]int, error) {
	rv := db.Statement.ReflectValue
	if rv.Kind() == reflect.Struct {
		s, err := m.shardOfRow(db, rv, snap)
		if err != nil {
			return shardSet{}, nil, zeroKey(err)
		}
		return one(s), nil, nil
	}
	if rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
		return shardSet{}, nil, fmt.Errorf("%w: Create from a %s", ErrUnroutableSQL, rv.Kind())
	}
	set := shardSet{known: true}
	var rows map[int][]int
	first := -1
	for i := 0; i < rv.Len(); i++ {
		s, err := m.shardOfRow(db, reflect.Indirect(rv.Index(i)), snap)
		if err != nil {
			return shardSet{}, nil, zeroKey(err)
		}
		if first < 0 {
			first = s
		}
		if s != first && rows == nil {
			rows = map[int][]int{first: make([]int, 0, i)}
			for j := 0; j < i; j++ {
				rows[first] = append(rows[first], j)
			}
		}
		if rows != nil {
			rows[s] = append(rows[s], i)
		}
		set.list = add(set.list, s)
	}
	return set, rows, nil
}

func zeroKey(err error) error {
	if errors.Is(err, errZeroKey) {
		return ErrMissingShardKey
	}
	return err
}
