// Package photos is the schema shardkit's database tests run on: one
// embedded per-shard SQL set (photos, likes, follows) and its GORM model.
// It is a leaf (no shardkit import), so that tests inside a package that
// shardtest imports (migrations' own) can use it too.
//
//	e := shardtest.New(t, shardtest.Spec{Servers: []string{"a", "b"}, Shards: 16}) // photos.SQL
//	sql := photos.With(os.DirFS("testdata/shardsql"))                            // plus a package's own tables
package photos

import (
	"crypto/sha256"
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

//go:embed sql/*.sql sql_v2/*.sql sql_members/*.sql
var files embed.FS

// SQL is the per-shard SQL: 0001_photos.sql and its secondary indexes,
// 0001_photos.indexes.sql.
var SQL = With()

// V2 is SQL and a version 2 for the tests of migrate: 0002_comments.sql, a
// new table and a new column (photos.width).
var V2 = With(sub("sql_v2"))

// Members is 0004_members.sql alone, for With: members keyed by their own
// ID with lookup columns, and handles keyed by a user with one, each with
// its lookup tables (the plugin's lookup tests and shardctl lookup's).
var Members = sub("sql_members")

func sub(dir string) fs.FS {
	fsys, err := fs.Sub(files, dir)
	if err != nil {
		panic(err) // the embedded directory exists
	}
	return fsys
}

// Photo is the photos table as an application's GORM model.
type Photo struct {
	ID        int64
	UserID    int64 `shard:"key"`
	Caption   string
	Likes     int
	Version   int
	CreatedAt time.Time
}

// FS is a per-shard SQL set. Its String names its files and a hash of
// their text, so that equal sets print equal (shardtest keys its
// templates by it).
type FS struct {
	fstest.MapFS
	key string
}

// String is part of the fmt.Stringer interface.
func (f FS) String() string { return f.key }

// With is SQL plus the .sql files of each of extra, a package's own
// tables. A name that SQL has already is a mistake (a second photos
// schema), and panics.
func With(extra ...fs.FS) FS {
	out := fstest.MapFS{}
	for i, fsys := range append([]fs.FS{sub("sql")}, extra...) {
		names, err := fs.Glob(fsys, "*.sql")
		if err != nil {
			panic(err)
		}
		for _, name := range names {
			if out[name] != nil {
				panic(fmt.Sprintf("photos.With: %s is in the shared set already; name a package's own file for what it adds", name))
			}
			b, err := fs.ReadFile(fsys, name)
			if err != nil {
				panic(fmt.Sprintf("photos.With: extra %d: %v", i, err))
			}
			out[name] = &fstest.MapFile{Data: b}
		}
	}
	names := make([]string, 0, len(out))
	h := sha256.New()
	for name := range out {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(h, "%s\x00%s\x00", name, out[name].Data)
	}
	return FS{MapFS: out, key: fmt.Sprintf("%s@%x", strings.Join(names, ","), h.Sum(nil)[:6])}
}

// Dir writes the set into a directory of the test's, for a command that
// takes a directory (shardctl init --sql), and returns its path.
func (f FS) Dir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for name, file := range f.MapFS {
		if err := os.WriteFile(filepath.Join(dir, name), file.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
