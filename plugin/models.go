package plugin

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/router"
)

// keyKind says how a model's shard field maps to a logical shard.
type keyKind uint8

const (
	keyInt    keyKind = iota + 1 // signed integer key: key mod shards
	keyUint                      // unsigned integer key: key mod shards
	keyString                    // string key: HashString(key) mod shards
	keyID                        // another sharded ID: its shard bits
)

// model is a registered sharded table.
type model struct {
	table     string
	schema    *schema.Schema
	pk        *schema.Field // 64-bit integer primary key
	key       *schema.Field // field tagged shard:"key" or shard:"id"
	kind      keyKind
	qualified []string // "shard_NNNN.table", by logical shard
	quoted    []string // qualified, quoted as GORM writes it
	// exprs[i] is the table expression of shard i, as GORM's own
	// Table("schema.table") sets it: the FROM names the shard's table,
	// and columns keep the bare table name, which Postgres resolves
	// to it (shorter SQL for GORM to build and quote).
	exprs     []clause.Expr
	exprShard map[*clause.Expr]int // shard of each of exprs
	p         *Plugin              // the plugin the model is registered with (its collations)
	lookups   []*lookupCol         // columns tagged shard:"lookup"
}

// shardOfExpr returns the shard whose table expression the plugin set on
// a statement, if it is one of the model's.
func (m *model) shardOfExpr(te *clause.Expr) (int, bool) {
	s, ok := m.exprShard[te]
	return s, ok
}

// parseModel reads a model's shard tags.
func parseModel(db *gorm.DB, value any, shards int) (*model, error) {
	stmt := &gorm.Statement{DB: db}
	if err := stmt.Parse(value); err != nil {
		return nil, fmt.Errorf("shardkit: %w: %T: %w", ErrInvalidModel, value, err)
	}
	s := stmt.Schema
	m := &model{table: s.Table, schema: s}
	if len(s.PrimaryFields) != 1 {
		return nil, fmt.Errorf("shardkit: %w: %s has %d primary key fields, want one 64-bit ID", ErrInvalidModel, s.Name, len(s.PrimaryFields))
	}
	m.pk = s.PrimaryFields[0]
	switch m.pk.FieldType.Kind() {
	case reflect.Int64, reflect.Uint64, reflect.Int, reflect.Uint:
	default:
		return nil, fmt.Errorf("shardkit: %w: %s.%s is %s, want a 64-bit integer ID", ErrInvalidModel, s.Name, m.pk.Name, m.pk.FieldType)
	}
	for _, f := range s.Fields {
		tag := f.StructField.Tag.Get("shard")
		if tag == "" {
			continue
		}
		if tag == "lookup" {
			lc, err := newLookupCol(m, f, shards)
			if err != nil {
				return nil, fmt.Errorf("shardkit: %w: %s.%s: %w", ErrInvalidModel, s.Name, f.Name, err)
			}
			m.lookups = append(m.lookups, lc)
			continue
		}
		if m.key != nil {
			return nil, fmt.Errorf("shardkit: %w: %s has two shard tags (%s, %s)", ErrInvalidModel, s.Name, m.key.Name, f.Name)
		}
		k, err := fieldKind(tag, f)
		if err != nil {
			return nil, fmt.Errorf("shardkit: %w: %s.%s: %w", ErrInvalidModel, s.Name, f.Name, err)
		}
		m.key, m.kind = f, k
	}
	if m.key == nil {
		return nil, fmt.Errorf("shardkit: %w: %s has no field tagged shard:\"key\" or shard:\"id\"", ErrInvalidModel, s.Name)
	}
	m.qualified = make([]string, shards)
	m.quoted = make([]string, shards)
	m.exprs = make([]clause.Expr, shards)
	m.exprShard = make(map[*clause.Expr]int, shards)
	for i := range m.qualified {
		m.qualified[i] = router.SchemaName(i) + "." + m.table
		m.quoted[i] = db.Statement.Quote(m.qualified[i])
		m.exprs[i] = clause.Expr{SQL: m.quoted[i]}
		m.exprShard[&m.exprs[i]] = i
	}
	return m, nil
}

func fieldKind(tag string, f *schema.Field) (keyKind, error) {
	k := f.FieldType
	if k.Kind() == reflect.Ptr {
		k = k.Elem()
	}
	switch tag {
	case "key":
		switch k.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			return keyInt, nil
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			return keyUint, nil
		case reflect.String:
			return keyString, nil
		}
		return 0, fmt.Errorf("shard key of type %s: want an integer or a string", f.FieldType)
	case "id":
		switch k.Kind() {
		case reflect.Int64, reflect.Uint64, reflect.Int, reflect.Uint:
			return keyID, nil
		}
		return 0, fmt.Errorf("shard:\"id\" on a %s: want a 64-bit integer ID", f.FieldType)
	}
	return 0, fmt.Errorf("unknown tag shard:%q (want \"key\", \"id\" or \"lookup\")", tag)
}

// errZeroKey says a row's shard field is zero: the row has no shard key.
var errZeroKey = errors.New("zero shard key")

// shardOfRow returns the logical shard of one row from its shard field.
func (m *model) shardOfRow(db *gorm.DB, rv reflect.Value, snap *router.Snapshot) (int, error) {
	v := m.key.ReflectValueOf(db.Statement.Context, rv)
	if v.Kind() == reflect.Ptr {
		if v.IsNil() {
			return 0, errZeroKey
		}
		v = v.Elem()
	}
	if v.IsZero() {
		return 0, errZeroKey
	}
	switch m.kind {
	case keyInt:
		return router.ShardOfKey(v.Int(), snap.Shards)
	case keyUint:
		return shardOfUint(v.Uint(), snap.Shards)
	case keyString:
		return router.ShardOfString(v.String(), snap.Shards)
	default:
		return shardOfID(intOf(v), snap)
	}
}

// intOf reads an integer field without allocating.
func intOf(v reflect.Value) int64 {
	switch v.Kind() {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return int64(v.Uint())
	}
	return v.Int()
}

func shardOfUint(u uint64, shards int) (int, error) {
	if u > 1<<63-1 {
		return 0, fmt.Errorf("%w: %d does not fit 63 bits", router.ErrNegativeKey, u)
	}
	return router.ShardOfKey(int64(u), shards)
}

// shardOfID decodes an ID's shard bits and checks them against the map.
func shardOfID(id int64, snap *router.Snapshot) (int, error) {
	s, err := snap.Layout.ShardOf(id)
	if err != nil {
		return 0, err
	}
	if s >= snap.Shards {
		return 0, fmt.Errorf("%w: ID %d names shard %d, the map has %d shards", idgen.ErrInvalidID, id, s, snap.Shards)
	}
	return s, nil
}

// shardOfValue maps a condition value on the shard field (kind k) to a shard.
func shardOfValue(k keyKind, v any, snap *router.Snapshot) (int, error) {
	if k == keyString {
		if s, ok := v.(string); ok {
			return router.ShardOfString(s, snap.Shards)
		}
		return 0, fmt.Errorf("%w: shard key value %v (%T) is not a string", ErrUnroutableSQL, v, v)
	}
	n, err := toInt64(v)
	if err != nil {
		return 0, err
	}
	if k == keyID {
		return shardOfID(n, snap)
	}
	return router.ShardOfKey(n, snap.Shards)
}

// toInt64 converts an integer condition value.
func toInt64(v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case int:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case uint64:
		if x > 1<<63-1 {
			return 0, fmt.Errorf("%w: %d does not fit 63 bits", ErrUnroutableSQL, x)
		}
		return int64(x), nil
	case uint:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case int8:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case uint8:
		return int64(x), nil
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: %q is not an integer", ErrUnroutableSQL, x)
		}
		return n, nil
	}
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Ptr && !rv.IsNil() {
		rv = rv.Elem()
	}
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int(), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if rv.Uint() > 1<<63-1 {
			return 0, fmt.Errorf("%w: %d does not fit 63 bits", ErrUnroutableSQL, rv.Uint())
		}
		return int64(rv.Uint()), nil
	}
	return 0, fmt.Errorf("%w: value %v (%T) is not an integer", ErrUnroutableSQL, v, v)
}
