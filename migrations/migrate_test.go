package migrations

import (
	"context"
	"errors"
	"testing"
	"testing/fstest"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/shardschema"
)

func TestMigrateAddsVersionAndResumes(t *testing.T) {
	e := newEnv(t, 2)
	ctx := context.Background()
	if err := Provision(ctx, e.cat, ProvisionOptions{Servers: e.servers, Shards: 100, ShardSQL: testSQL}); err != nil {
		t.Fatal(err)
	}
	// Interrupt the migration to version 2 part-way.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err := Migrate(cctx, e.cat, testSQLv2, MigrateOptions{Progress: func(p Progress) {
		if p.Done >= 30 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	var last Progress
	if err := Migrate(ctx, e.cat, testSQLv2, MigrateOptions{Progress: func(p Progress) { last = p }}); err != nil {
		t.Fatal(err)
	}
	if last.Total == 0 || last.Total >= 100 || last.Done != last.Total {
		t.Fatalf("resumed run: last progress %+v, want the remaining schemas only", last)
	}
	if n := countShardTables(t, e.servers); n != 400 {
		t.Fatalf("%d shard tables, want 400 (photos, likes, follows, comments × 100)", n)
	}
	checkRecords(t, e.servers, 100, 4)
	var cols int
	if err := pgtest.Connect(t, e.servers[1].DSN).QueryRow(ctx, `SELECT count(*) FROM information_schema.columns
		WHERE table_name = 'photos' AND column_name = 'width' AND table_schema LIKE 'shard\_%'`).Scan(&cols); err != nil {
		t.Fatal(err)
	}
	if cols != 50 {
		t.Fatalf("photos.width on %d schemas of server pg1, want 50", cols)
	}
	// Again: nothing to do. And nil applies what the catalog holds: nothing new.
	for _, fsys := range []any{testSQLv2, nil} {
		calls := 0
		var err error
		if fsys == nil {
			err = Migrate(ctx, e.cat, nil, MigrateOptions{Progress: func(Progress) { calls++ }})
		} else {
			err = Migrate(ctx, e.cat, testSQLv2, MigrateOptions{Progress: func(Progress) { calls++ }})
		}
		if err != nil || calls != 0 {
			t.Fatalf("re-run: err %v, %d progress calls; want a no-op", err, calls)
		}
	}
	// The catalog gives the mover the files to create a schema elsewhere.
	catFS, err := shardschema.CatalogSQL(ctx, e.cat)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := ReadVersions(catFS)
	if err != nil || len(vs) != 2 || vs[0].Indexes == "" {
		t.Fatalf("CatalogSQL: %d versions, err %v; want 2, the first with indexes", len(vs), err)
	}
}

func TestMigrateRefusals(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	v1 := fstest.MapFS{
		"0001_a.sql": {Data: []byte("CREATE TABLE a (id bigint PRIMARY KEY DEFAULT next_id());")},
		"0003_c.sql": {Data: []byte("CREATE TABLE c (id bigint PRIMARY KEY DEFAULT next_id());")},
	}
	if err := Provision(ctx, e.cat, ProvisionOptions{Servers: e.servers, Shards: 4, ShardSQL: v1}); err != nil {
		t.Fatal(err)
	}
	changed := fstest.MapFS{
		"0001_a.sql": {Data: []byte("CREATE TABLE a (id bigint PRIMARY KEY, x int);")},
		"0003_c.sql": v1["0003_c.sql"],
	}
	late := fstest.MapFS{
		"0001_a.sql": v1["0001_a.sql"],
		"0002_b.sql": {Data: []byte("CREATE TABLE b (id bigint PRIMARY KEY);")},
		"0003_c.sql": v1["0003_c.sql"],
	}
	if err := Migrate(ctx, e.cat, changed, MigrateOptions{}); !errors.Is(err, ErrMigrationChanged) {
		t.Fatalf("changed file: err = %v, want ErrMigrationChanged", err)
	}
	if err := Migrate(ctx, e.cat, late, MigrateOptions{}); !errors.Is(err, ErrMigrationOrder) {
		t.Fatalf("version below an applied one: err = %v, want ErrMigrationOrder", err)
	}
	// A new version that fails everywhere can be fixed in place.
	broken := fstest.MapFS{
		"0001_a.sql": v1["0001_a.sql"],
		"0003_c.sql": v1["0003_c.sql"],
		"0004_d.sql": {Data: []byte("CREATE TABLE d (id bigint PRIMARY KEY DEFAULT next_id(), oops);")},
	}
	var se *ShardError
	if err := Migrate(ctx, e.cat, broken, MigrateOptions{}); !errors.As(err, &se) || se.File != "0004_d.sql" || se.Server != "pg0" {
		t.Fatalf("broken file: err = %v, want a *ShardError naming 0004_d.sql on pg0", err)
	}
	fixed := fstest.MapFS{
		"0001_a.sql": v1["0001_a.sql"],
		"0003_c.sql": v1["0003_c.sql"],
		"0004_d.sql": {Data: []byte("CREATE TABLE d (id bigint PRIMARY KEY DEFAULT next_id());")},
	}
	if err := Migrate(ctx, e.cat, fixed, MigrateOptions{}); err != nil {
		t.Fatalf("fixed file: %v", err)
	}
	v1 = fixed
	pgtest.Exec(t, e.catalogDSN, `UPDATE shardkit.shard_map SET state = 'moving' WHERE shard = 2`)
	if err := Migrate(ctx, e.cat, v1, MigrateOptions{}); !errors.Is(err, ErrMovesInProgress) {
		t.Fatalf("moving shard: err = %v, want ErrMovesInProgress", err)
	}
	if err := Migrate(ctx, e.cat, v1, MigrateOptions{AllowMoving: true}); err != nil {
		t.Fatalf("AllowMoving: %v", err)
	}
}

func TestReadVersions(t *testing.T) {
	ok := []byte("SELECT 1;")
	tests := []struct {
		name  string
		fsys  fstest.MapFS
		want  int // versions, or -1 for ErrBadMigrationFile
		index bool
	}{
		{"tables and indexes", fstest.MapFS{"0001_a.sql": {Data: ok}, "0001_a.indexes.sql": {Data: ok}, "README.md": {Data: ok}}, 1, true},
		{"two versions", fstest.MapFS{"0001_a.sql": {Data: ok}, "0002_b.sql": {Data: ok}}, 2, false},
		{"version zero", fstest.MapFS{"0000_a.sql": {Data: ok}}, -1, false},
		{"bad name", fstest.MapFS{"1_a.sql": {Data: ok}}, -1, false},
		{"upper case", fstest.MapFS{"0001_A.sql": {Data: ok}}, -1, false},
		{"same version twice", fstest.MapFS{"0001_a.sql": {Data: ok}, "0001_b.sql": {Data: ok}}, -1, false},
		{"indexes without tables", fstest.MapFS{"0001_a.indexes.sql": {Data: ok}}, -1, false},
		{"indexes of another name", fstest.MapFS{"0001_a.sql": {Data: ok}, "0001_b.indexes.sql": {Data: ok}}, -1, false},
		{"empty file", fstest.MapFS{"0001_a.sql": {Data: []byte(" \n")}}, -1, false},
		{"no files at the root", fstest.MapFS{"sql/0001_a.sql": {Data: ok}}, -1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vs, err := ReadVersions(tt.fsys)
			if tt.want < 0 {
				if !errors.Is(err, ErrBadMigrationFile) {
					t.Fatalf("err = %v, want ErrBadMigrationFile", err)
				}
				return
			}
			if err != nil || len(vs) != tt.want || (vs[0].Indexes != "") != tt.index {
				t.Fatalf("got %+v, %v", vs, err)
			}
		})
	}
}

func TestRanges(t *testing.T) {
	tests := []struct {
		in   []int
		want string
	}{
		{nil, ""},
		{[]int{3}, "3"},
		{[]int{0, 1, 2, 5, 7, 8}, "0-2,5,7-8"},
	}
	for _, tt := range tests {
		if got := shardRanges(tt.in); got != tt.want {
			t.Errorf("shardRanges(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestStatus(t *testing.T) {
	e := newEnv(t, 2)
	ctx := context.Background()
	if err := Provision(ctx, e.cat, ProvisionOptions{Servers: e.servers, Shards: 10, ShardSQL: testSQL}); err != nil {
		t.Fatal(err)
	}
	conn := pgtest.Connect(t, e.servers[1].DSN)
	if _, err := conn.Exec(ctx, `INSERT INTO shard_0007.photos (user_id) SELECT 7 FROM generate_series(1, 5000); ANALYZE shard_0007.photos`); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, e.catalogDSN, `UPDATE shardkit.shard_map SET state = 'fenced' WHERE shard = 3`)
	r, err := Status(ctx, e.cat)
	if err != nil {
		t.Fatal(err)
	}
	if r.Shards != 10 || r.MapVersion != 1 || len(r.Servers) != 2 {
		t.Fatalf("report %+v", r)
	}
	a, b := r.Servers[0], r.Servers[1]
	if a.Shards != 5 || a.Ranges != "0-4" || b.Ranges != "5-9" || a.Error != "" || b.Error != "" {
		t.Fatalf("servers %+v %+v", a, b)
	}
	if b.Rows != 5000 || a.Rows != 0 || b.Bytes <= a.Bytes || a.Bytes == 0 {
		t.Fatalf("rows/bytes: %s %d/%d, %s %d/%d", a.Name, a.Rows, a.Bytes, b.Name, b.Rows, b.Bytes)
	}
	if len(r.NotActive) != 1 || r.NotActive[0].Shard != 3 {
		t.Fatalf("not active: %+v", r.NotActive)
	}
	// An unreachable server is reported in its line, not as a failure.
	pgtest.Exec(t, e.catalogDSN, `UPDATE shardkit.servers SET dsn = 'postgres://postgres@127.0.0.1:1/x' WHERE name = 'pg0'`)
	r, err = Status(ctx, e.cat)
	if err != nil || r.Servers[0].Error == "" || r.Servers[1].Error != "" {
		t.Fatalf("with pg0 unreachable: %v, %+v", err, r)
	}
}
