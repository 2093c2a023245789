package shardschema

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Part is one half of a per-shard migration version, as
// shardkit.shard_migrations and the catalog record it.
type Part string

// Parts of a version: the tables file NNNN_name.sql, and the optional
// secondary-index file NNNN_name.indexes.sql that a caller may defer.
const (
	PartTables  Part = "tables"
	PartIndexes Part = "indexes"
)

// Version is one per-shard migration version, read from an application's
// SQL files. Package migrations exports it as migrations.Version.
type Version struct {
	Number  int    // NNNN, at least 1 (0 is shardkit's own template)
	Name    string // file name of the tables part, e.g. 0001_photos.sql
	Tables  string // SQL of the tables part
	Indexes string // SQL of NNNN_name.indexes.sql, empty if absent
}

// fileName returns the file name of a part.
func (v Version) fileName(p Part) string {
	if p == PartIndexes {
		return strings.TrimSuffix(v.Name, ".sql") + ".indexes.sql"
	}
	return v.Name
}

// sql returns the SQL of a part.
func (v Version) sql(p Part) string {
	if p == PartIndexes {
		return v.Indexes
	}
	return v.Tables
}

// FileName returns the file name of part p of v.
func FileName(v Version, p Part) string { return v.fileName(p) }

// PartSQL returns the SQL of part p of v ("" for an absent index part).
func PartSQL(v Version, p Part) string { return v.sql(p) }

// Checksum returns the hex SHA-256 of part p of v, as the catalog and
// shardkit.shard_migrations record it.
func Checksum(v Version, p Part) string { return v.checksum(p) }

// checksum returns the hex SHA-256 of a part's SQL.
func (v Version) checksum(p Part) string {
	sum := sha256.Sum256([]byte(v.sql(p)))
	return hex.EncodeToString(sum[:])
}

var fileRE = regexp.MustCompile(`^([0-9]{4})_([a-z0-9_]+?)(\.indexes)?\.sql$`)

// ReadVersions reads an application's per-shard SQL files from the root of
// fsys: NNNN_name.sql and optional NNNN_name.indexes.sql, written with
// unqualified table names. Files not ending in .sql are ignored; a .sql
// file with another name, two files of one version, an index file without
// its tables file, or version 0000 is refused with ErrBadMigrationFile, and
// so is a file system without any .sql file at its root (an embed.FS of a
// subdirectory needs fs.Sub). A nil fsys has no versions.
func ReadVersions(fsys fs.FS) ([]Version, error) {
	if fsys == nil {
		return nil, nil
	}
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("shardkit: read per-shard SQL: %w", err)
	}
	byNum := map[int]*Version{}
	indexes := map[int]string{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || path.Ext(name) != ".sql" {
			continue
		}
		m := fileRE.FindStringSubmatch(name)
		if m == nil {
			return nil, fmt.Errorf("shardkit: %w: %q: name it NNNN_name.sql or NNNN_name.indexes.sql (lower case, digits, _)",
				ErrBadMigrationFile, name)
		}
		n, _ := strconv.Atoi(m[1])
		if n == 0 {
			return nil, fmt.Errorf("shardkit: %w: %q: version 0000 is shardkit's own; start at 0001", ErrBadMigrationFile, name)
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("shardkit: read per-shard SQL: %w", err)
		}
		if strings.TrimSpace(string(b)) == "" {
			return nil, fmt.Errorf("shardkit: %w: %q is empty", ErrBadMigrationFile, name)
		}
		if err := checkStatements(name, string(b)); err != nil {
			return nil, err
		}
		if m[3] != "" {
			if _, dup := indexes[n]; dup {
				return nil, fmt.Errorf("shardkit: %w: two index files for version %d", ErrBadMigrationFile, n)
			}
			indexes[n] = name + "\x00" + string(b)
			continue
		}
		if old, dup := byNum[n]; dup {
			return nil, fmt.Errorf("shardkit: %w: %q and %q have the same version %d", ErrBadMigrationFile, old.Name, name, n)
		}
		byNum[n] = &Version{Number: n, Name: name, Tables: string(b)}
	}
	for n, s := range indexes {
		name, body, _ := strings.Cut(s, "\x00")
		v, ok := byNum[n]
		if !ok || v.fileName(PartIndexes) != name {
			return nil, fmt.Errorf("shardkit: %w: %q has no matching tables file", ErrBadMigrationFile, name)
		}
		v.Indexes = body
	}
	if len(byNum) == 0 {
		return nil, fmt.Errorf("shardkit: %w: no NNNN_name.sql file at the root of the per-shard SQL "+
			"(for files in a subdirectory of an embed.FS, pass fs.Sub(files, \"dir\"); for none, pass nil)", ErrBadMigrationFile)
	}
	out := make([]Version, 0, len(byNum))
	for _, v := range byNum {
		out = append(out, *v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Number < out[j].Number })
	return out, nil
}

// checkStatements refuses a file whose CREATE INDEX CONCURRENTLY cannot
// run: one in a file without NoTransactionMarker (Postgres refuses it in
// a transaction), or one without an index name (a rerun after an
// interrupted build could not find what to rebuild).
func checkStatements(name, body string) error {
	marked := noTransaction(body)
	for _, stmt := range splitStatements(body) {
		index, ok := concurrentIndex(stmt)
		switch {
		case ok && !marked:
			return fmt.Errorf("shardkit: %w: %q builds an index CONCURRENTLY, which cannot run in a transaction: "+
				"put it in a file of its own with the line %q", ErrBadMigrationFile, name, NoTransactionMarker)
		case ok && index == "":
			return fmt.Errorf("shardkit: %w: %q builds an index CONCURRENTLY without naming it: name it, "+
				"so that a rerun after an interrupted build finds and rebuilds it", ErrBadMigrationFile, name)
		}
	}
	return nil
}
