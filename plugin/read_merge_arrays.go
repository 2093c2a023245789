package plugin

import (
	"fmt"
	"strings"
	"time"
)

// Partial rows sent to Postgres as typed arrays (read_merge_agg_final.go, and hidden
// ORDER BY values ordered there, read_merge_coll.go).

// columnArray reads column i of the rows (driver values) into an array
// argument of its Postgres type; nil elements are NULLs.
func columnArray(dbType string, rows [][]any, i int) (any, string, error) {
	typ := strings.ToLower(dbType)
	bad := func(v any) error { return fmt.Errorf("unexpected %T", v) }
	switch dbType {
	case "INT2", "INT4", "INT8":
		out := make([]*int64, len(rows))
		for r, row := range rows {
			switch v := row[i].(type) {
			case nil:
			case int64:
				out[r] = &v
			default:
				return nil, "", bad(v)
			}
		}
		return out, typ, nil
	case "FLOAT4", "FLOAT8":
		out := make([]*float64, len(rows))
		for r, row := range rows {
			switch v := row[i].(type) {
			case nil:
			case float64:
				out[r] = &v
			case float32:
				f := float64(v)
				out[r] = &f
			default:
				return nil, "", bad(v)
			}
		}
		return out, typ, nil
	case "NUMERIC", "TEXT", "VARCHAR", "UUID", "NAME":
		out := make([]*string, len(rows))
		for r, row := range rows {
			switch v := row[i].(type) {
			case nil:
			case string:
				out[r] = &v
			case []byte:
				s := string(v)
				out[r] = &s
			default:
				return nil, "", bad(v)
			}
		}
		return out, typ, nil
	case "TIMESTAMPTZ", "TIMESTAMP", "DATE":
		out := make([]*time.Time, len(rows))
		for r, row := range rows {
			switch v := row[i].(type) {
			case nil:
			case time.Time:
				out[r] = &v
			default:
				return nil, "", bad(v)
			}
		}
		return out, typ, nil
	case "BOOL":
		out := make([]*bool, len(rows))
		for r, row := range rows {
			switch v := row[i].(type) {
			case nil:
			case bool:
				out[r] = &v
			default:
				return nil, "", bad(v)
			}
		}
		return out, typ, nil
	case "BYTEA":
		out := make([][]byte, len(rows))
		for r, row := range rows {
			switch v := row[i].(type) {
			case nil:
			case []byte:
				out[r] = v
			default:
				return nil, "", bad(v)
			}
		}
		return out, typ, nil
	}
	return nil, "", fmt.Errorf("no array type")
}
