package plugin

import (
	"fmt"
	"reflect"
	"time"

	"github.com/shardkit/shardkit/internal/pgorder"
)

// A merge of several shards' rows orders and compares each ORDER BY key
// as the column's Postgres type does, whatever Go field receives it: at
// start-up the plugin reads every registered column's type with its
// collation (collation.go), and a key whose Go values do not order as
// the column's do (a numeric read as a string, an enum, inet, interval,
// citext; a nullable column read into a field that cannot hold NULL) is
// read under a hidden alias as the driver returns it (read_plan_order.go),
// merged in Go where its driver values order as Postgres orders them,
// else ordered in Postgres (read_merge_coll.go).

// colType is a column's Postgres type on the servers.
type colType struct {
	cast     string // the type as a cast names it (format_type)
	base     string // the type's name, or its base type's for a domain ("int4", "numeric", "mood")
	typtype  byte   // of the base type: 'b' base, 'e' enum, 'c' composite, 'r' range, …
	category byte   // of the base type: 'A' array, 'S' string, …
	// perSchema: the type (or the domain) is defined in each shard's own
	// schema, so no one statement unions two shards' columns of it
	perSchema bool
	nullable  bool
	mixed     bool // the servers do not agree on the type
}

// same reports whether two servers' types of a column are one.
func (c colType) same(o colType) bool {
	return c.cast == o.cast && c.base == o.base && c.perSchema == o.perSchema
}

// goKind is the kind a merge reads a Go value of type field as, when its
// comparison of those values is Postgres's for the column; ok is false
// where it is not (the key is then read as the driver returns it, or
// ordered in Postgres). A column the plugin does not know (an expression,
// a server not read) is taken as the Go value orders (the caller checks
// collations and servers).
func (c *colType) goKind(field reflect.Type) (as pgorder.Kind, ok bool) {
	if c == nil {
		return 0, true
	}
	if c.mixed || c.perSchema || field == nil {
		// a type each schema defines is selected as text where shards are
		// unioned (unionSQL): its key is read per shard, under a hidden
		// alias
		return 0, false
	}
	nullable := field.Kind() == reflect.Pointer || field.Kind() == reflect.Interface
	for field.Kind() == reflect.Pointer {
		field = field.Elem()
	}
	if c.nullable && !nullable {
		return 0, false // NULL reads as the zero value, which orders elsewhere
	}
	if c.typtype != 'b' || c.category == 'A' {
		return 0, false
	}
	k := field.Kind()
	switch c.base {
	case "int2", "int4", "int8":
		return 0, k >= reflect.Int && k <= reflect.Uint64 && k != reflect.Uintptr
	case "float4", "float8":
		return 0, k == reflect.Float32 || k == reflect.Float64
	case "numeric":
		switch {
		case k == reflect.String:
			return pgorder.Numeric, true
		case k >= reflect.Int && k <= reflect.Int64:
			return 0, true
		}
		return 0, false
	case "text", "varchar", "name", "uuid":
		// uuid: the driver's text is lower-case hex, whose byte order is
		// Postgres's order of the 16 bytes
		return 0, k == reflect.String
	case "bool":
		return 0, k == reflect.Bool
	case "timestamptz", "timestamp", "date":
		return 0, field == reflect.TypeFor[time.Time]()
	}
	return 0, false
}

// driverKind is the kind of the column's driver values when the merge
// orders them as Postgres does; Other where only Postgres orders them.
func (c *colType) driverKind() pgorder.Kind {
	if c == nil || c.typtype != 'b' || c.category == 'A' {
		return pgorder.Other
	}
	switch c.base {
	case "int2", "int4", "int8":
		return pgorder.Int
	case "float4", "float8":
		return pgorder.Float
	case "numeric":
		return pgorder.Numeric
	case "text", "varchar", "name", "uuid":
		return pgorder.Text
	case "bool":
		return pgorder.Bool
	case "timestamptz", "timestamp", "date":
		return pgorder.Time
	case "bytea":
		return pgorder.Bytes
	}
	return pgorder.Other
}

// columnType returns what the plugin knows of a column's type, nil when
// it does not know it.
func (m *model) columnType(column string) *colType {
	c, ok := (*m.p.coll.types.Load())[m.table][column]
	if !ok {
		return nil
	}
	return &c
}

// perSchemaTypes reports whether the model has a column of a type each
// shard's schema defines (an enum, domain or composite made by the
// per-shard SQL): Postgres unions no two schemas' values of it, so a
// read's branches select it as text, or each shard runs alone
// (unionSQL).
func (m *model) perSchemaTypes() bool {
	if m == nil || m.p == nil || m.p.coll.types.Load() == nil {
		return false
	}
	for _, c := range (*m.p.coll.types.Load())[m.table] {
		if c.perSchema {
			return true
		}
	}
	return false
}

// perSchemaColumns returns the model's columns of a type each shard's
// schema defines.
func (m *model) perSchemaColumns() map[string]bool {
	out := map[string]bool{}
	for name, c := range (*m.p.coll.types.Load())[m.table] {
		if c.perSchema {
			out[name] = true
		}
	}
	return out
}

// errPerSchemaType is the refusal of an ORDER BY a column of a type each
// schema defines for itself that the plugin cannot order across shards.
func errPerSchemaType(column, typ string) error {
	return fmt.Errorf("%w: ORDER BY %s across shards: its type %s is defined in each shard's schema, and values of two schemas' types cannot be compared; "+
		"define the type once in a shared schema (CREATE TYPE public.name …, the per-shard SQL naming public.name), or scope the query to one shard",
		ErrUnroutableSQL, column, typ)
}
