// Package sqlversions lists shardkit's own versioned SQL files — the
// catalog's and the shard servers' — named NNN_name.sql, in version order.
//
//	files, err := sqlversions.List(embedded, "catalogsql")
//	for _, f := range files { apply(f.Version, f.Path) }
package sqlversions

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// File is one versioned SQL file.
type File struct {
	Version int
	Name    string // base name, e.g. 001_catalog.sql
	Path    string // path in the file system, for fs.ReadFile
}

// List returns the .sql files of dir whose names start with a version
// number and an underscore, sorted by version. Other files (templates) are
// skipped; two files of one version are an error.
func List(fsys fs.FS, dir string) ([]File, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var out []File
	seen := map[int]string{}
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if e.IsDir() || !ok || err != nil || path.Ext(e.Name()) != ".sql" {
			continue
		}
		if other, dup := seen[v]; dup {
			return nil, fmt.Errorf("shardkit: versioned SQL %s and %s share version %d", other, e.Name(), v)
		}
		seen[v] = e.Name()
		out = append(out, File{Version: v, Name: e.Name(), Path: path.Join(dir, e.Name())})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}
