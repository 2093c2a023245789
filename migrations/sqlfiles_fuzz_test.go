package migrations

import (
	"errors"
	"testing"
	"testing/fstest"
)

// FuzzReadVersions: any file name and body is either accepted as a version
// numbered ≥ 1 whose name round-trips, or refused with ErrBadMigrationFile.
func FuzzReadVersions(f *testing.F) {
	for _, n := range []string{"0001_photos.sql", "0001_photos.indexes.sql", "0000_x.sql", "1_x.sql", "0002_A.sql", "x.sql", "0003_a b.sql"} {
		f.Add(n, "CREATE TABLE t (id bigint);")
	}
	f.Add("0001_photos.sql", "   ")
	f.Fuzz(func(t *testing.T, name, body string) {
		if name == "" || name == "." || !fsValidName(name) {
			return
		}
		vs, err := ReadVersions(fstest.MapFS{name: {Data: []byte(body)}})
		if err != nil {
			if !errors.Is(err, ErrBadMigrationFile) {
				t.Fatalf("ReadVersions(%q): error %v does not wrap ErrBadMigrationFile", name, err)
			}
			return
		}
		if len(vs) != 1 || vs[0].Number < 1 || vs[0].Name != name || vs[0].Tables != body {
			t.Fatalf("ReadVersions(%q) = %+v", name, vs)
		}
	})
}

// fsValidName keeps the fuzzer to single file names fstest.MapFS can hold
// at the root.
func fsValidName(name string) bool {
	for _, r := range name {
		if r == '/' || r == 0 {
			return false
		}
	}
	return true
}
