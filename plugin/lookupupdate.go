package plugin

import (
	"fmt"
	"reflect"

	"gorm.io/gorm"
	"gorm.io/gorm/schema"
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
	fields := make([]*schema.Field, len(m.lookups))
	for i, lc := range m.lookups {
		fields[i] = lc.field
	}
	if err := m.eachAssignment(stmt, fields, set); err != nil {
		return nil, err
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
