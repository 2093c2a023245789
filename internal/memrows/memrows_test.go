package memrows

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"
)

func TestQuery(t *testing.T) {
	at := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	r := &Rows{
		Cols: []Column{
			{Name: "user_id", DBType: "INT8", Scan: reflect.TypeFor[int64]()},
			{Name: "total", DBType: "NUMERIC", Scan: reflect.TypeFor[float64]()},
			{Name: "at", DBType: "TIMESTAMPTZ", Scan: reflect.TypeFor[time.Time]()},
		},
		Data: [][]driver.Value{{int64(1), "2.50", at}, {int64(2), nil, at}},
	}
	for _, tc := range []struct {
		name string
		scan func(*sql.Rows) (string, error)
		want []string
	}{
		{"into Go types", func(rs *sql.Rows) (string, error) {
			var id int64
			var total sql.NullFloat64
			var when time.Time
			err := rs.Scan(&id, &total, &when)
			return fmtRow(id, total, when), err
		}, []string{"1 {2.5 true} 2024-05-06T07:08:09Z", "2 {0 false} 2024-05-06T07:08:09Z"}},
		{"into strings", func(rs *sql.Rows) (string, error) {
			var id, total sql.NullString
			var when any
			err := rs.Scan(&id, &total, &when)
			return fmtRow(id.String, total.String, when.(time.Time)), err
		}, []string{"1 2.50 2024-05-06T07:08:09Z", "2  2024-05-06T07:08:09Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := Query(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			defer rs.Close()
			cts, err := rs.ColumnTypes()
			if err != nil {
				t.Fatal(err)
			}
			for i, ct := range cts {
				if ct.Name() != r.Cols[i].Name || ct.DatabaseTypeName() != r.Cols[i].DBType || ct.ScanType() != r.Cols[i].Scan {
					t.Errorf("column %d: %s %s %v", i, ct.Name(), ct.DatabaseTypeName(), ct.ScanType())
				}
			}
			var got []string
			for rs.Next() {
				s, err := tc.scan(rs)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, s)
			}
			if err := rs.Err(); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("rows %q, want %q", got, tc.want)
			}
		})
	}
}

func fmtRow(id, total any, when time.Time) string {
	return fmt.Sprint(id) + " " + fmt.Sprint(total) + " " + when.Format(time.RFC3339)
}

func TestErrRow(t *testing.T) {
	errRefused := errors.New("refused")
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"sentinel", errRefused},
		{"wrapped", &wrapped{errRefused}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n int
			if err := ErrRow(tc.err).Scan(&n); !errors.Is(err, errRefused) {
				t.Errorf("Scan = %v, want %v", err, errRefused)
			}
		})
	}
	if _, err := db().QueryContext(context.Background(), "", 1); !errors.Is(err, errArg) {
		t.Errorf("a query without rows = %v, want errArg", err)
	}
}

type wrapped struct{ err error }

func (w *wrapped) Error() string { return "wrapped: " + w.err.Error() }
func (w *wrapped) Unwrap() error { return w.err }
