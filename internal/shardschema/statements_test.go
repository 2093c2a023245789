package shardschema

import (
	"errors"
	"reflect"
	"testing"
	"testing/fstest"
)

func TestSplitStatements(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"two", "SELECT 1; SELECT 2;", []string{"SELECT 1", "SELECT 2"}},
		{"no final semicolon", "SELECT 1;\nSELECT 2", []string{"SELECT 1", "SELECT 2"}},
		{"comments only dropped", "-- a;\n/* b; */\n;", nil},
		{"semicolon in a string", "SELECT 'a;b'; SELECT 'it''s;'", []string{"SELECT 'a;b'", "SELECT 'it''s;'"}},
		{"semicolon in an identifier", `SELECT 1 AS "x;y"; SELECT 2`, []string{`SELECT 1 AS "x;y"`, "SELECT 2"}},
		{"escape string", `SELECT E'a\';b'; SELECT 2`, []string{`SELECT E'a\';b'`, "SELECT 2"}},
		{"line comment", "SELECT 1 -- x; y\n; SELECT 2", []string{"SELECT 1 -- x; y", "SELECT 2"}},
		{"nested block comment", "SELECT /* a /* b; */ c; */ 1; SELECT 2", []string{"SELECT /* a /* b; */ c; */ 1", "SELECT 2"}},
		{"dollar body", "CREATE FUNCTION f() RETURNS int AS $$ SELECT 1; $$ LANGUAGE sql; SELECT 2",
			[]string{"CREATE FUNCTION f() RETURNS int AS $$ SELECT 1; $$ LANGUAGE sql", "SELECT 2"}},
		{"tagged dollar body", "DO $x$ BEGIN PERFORM 1; END $x$; SELECT 2", []string{"DO $x$ BEGIN PERFORM 1; END $x$", "SELECT 2"}},
		{"parameter is no dollar quote", "SELECT $1; SELECT 2", []string{"SELECT $1", "SELECT 2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := splitStatements(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("splitStatements(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestConcurrentIndex(t *testing.T) {
	tests := []struct {
		in   string
		name string
		ok   bool
	}{
		{"CREATE INDEX CONCURRENTLY photos_at ON photos (created_at)", "photos_at", true},
		{"-- why\ncreate unique index concurrently if not exists Photos_At on photos (x)", "photos_at", true},
		{`CREATE INDEX CONCURRENTLY "Odd ""name""" ON photos (x)`, `Odd "name"`, true},
		{"CREATE INDEX CONCURRENTLY ON photos (x)", "", true},
		{"CREATE INDEX photos_at ON photos (x)", "", false},
		{"ALTER TABLE photos ADD COLUMN concurrently int", "", false},
	}
	for _, tt := range tests {
		if name, ok := concurrentIndex(tt.in); name != tt.name || ok != tt.ok {
			t.Errorf("concurrentIndex(%q) = %q, %v; want %q, %v", tt.in, name, ok, tt.name, tt.ok)
		}
	}
}

// TestReadVersionsConcurrently: a concurrent build is accepted only in a
// marked file and with a name.
func TestReadVersionsConcurrently(t *testing.T) {
	tests := []struct {
		name string
		body string
		ok   bool
	}{
		{"marked and named", NoTransactionMarker + "\nCREATE INDEX CONCURRENTLY a_x ON a (x);", true},
		{"not marked", "CREATE INDEX CONCURRENTLY a_x ON a (x);", false},
		{"unnamed", NoTransactionMarker + "\nCREATE INDEX CONCURRENTLY ON a (x);", false},
		{"the words in a comment", "-- CREATE INDEX CONCURRENTLY later\nCREATE INDEX a_x ON a (x);", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadVersions(fstest.MapFS{"0001_a.sql": {Data: []byte(tt.body)}})
			if tt.ok != (err == nil) || (err != nil && !errors.Is(err, ErrBadMigrationFile)) {
				t.Fatalf("err = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

func TestInTransaction(t *testing.T) {
	in := NoTransactionMarker + "\n-- why\ncreate unique index concurrently if not exists a_x ON a (x);\nSELECT 'CONCURRENTLY';"
	want := "create unique index  if not exists a_x ON a (x);\nSELECT 'CONCURRENTLY'"
	if got := inTransaction(in); got != want {
		t.Fatalf("inTransaction = %q, want %q", got, want)
	}
}
