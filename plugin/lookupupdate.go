package plugin

import (
	"fmt"
	"reflect"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// lookupAssignments returns the lookup columns an UPDATE sets, with their
// new values (nil: NULL), read as checkAssignments reads the shard key's:
// from the SET clause, a map, or a struct after Select and Omit.
func (m *model) lookupAssignments(db *gorm.DB) (map[*lookupCol]any, error) {
	stmt := db.Statement
	var out map[*lookupCol]any
	set := func(col string, v any) error {
		f := m.schema.LookUpField(col)
		if f == nil {
			return nil
		}
		lc := m.lookupOf(f.DBName)
		if lc == nil {
			return nil
		}
		if inline(v) {
			return fmt.Errorf("%w: UPDATE sets the lookup column %s to an expression; set it to a value", ErrLookupWrite, lc.column)
		}
		nv := lc.normalize(v)
		if nv == nil && !isNull(v) {
			return fmt.Errorf("%w: UPDATE sets the lookup column %s to %v (%T), not a value of its type", ErrLookupWrite, lc.column, v, v)
		}
		if out == nil {
			out = map[*lookupCol]any{}
		}
		out[lc] = nv
		return nil
	}
	if c, ok := stmt.Clauses["SET"]; ok {
		if sc, ok := c.Expression.(clause.Set); ok {
			for _, a := range sc {
				if err := set(a.Column.Name, a.Value); err != nil {
					return nil, err
				}
			}
		}
	}
	var sel map[string]bool
	var restricted bool
	if len(stmt.Selects) > 0 || len(stmt.Omits) > 0 {
		sel, restricted = stmt.SelectAndOmitColumns(false, true)
	}
	assigned := func(col string, zero bool) bool {
		if v, ok := sel[col]; ok {
			return v
		}
		return !restricted && !zero
	}
	switch d := stmt.Dest.(type) {
	case map[string]any:
		for k, v := range d {
			if f := m.schema.LookUpField(k); f != nil && assigned(f.DBName, false) {
				if err := set(f.DBName, v); err != nil {
					return nil, err
				}
			}
		}
	default:
		rv := reflect.Indirect(reflect.ValueOf(stmt.Dest))
		if rv.Kind() != reflect.Struct || rv.Type() != m.schema.ModelType {
			return out, nil
		}
		for _, lc := range m.lookups {
			v := lc.field.ReflectValueOf(stmt.Context, rv)
			if assigned(lc.column, v.IsZero()) {
				if err := set(lc.column, v.Interface()); err != nil {
					return nil, err
				}
			}
		}
	}
	return out, nil
}

// isNull reports a value GORM writes as NULL.
func isNull(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Ptr && rv.IsNil()
}
