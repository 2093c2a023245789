package migrations

import (
	"context"
	"errors"
	"testing"
	"testing/fstest"
	"time"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
)

// failEnv is a catalog and two servers, each on its own cluster, with
// version 1 (table a) provisioned on 8 shards.
type failEnv struct{ *testEnv }

var failV1 = fstest.MapFS{"0001_a.sql": {Data: []byte("CREATE TABLE a (id bigint PRIMARY KEY DEFAULT next_id(), n int);")}}

func newFailEnv(t *testing.T) *failEnv {
	t.Helper()
	e := &failEnv{newEnv(t, 2)}
	if err := Provision(context.Background(), e.cat, ProvisionOptions{Servers: e.servers, Shards: 8, ShardSQL: failV1}); err != nil {
		t.Fatal(err)
	}
	return e
}

// recordedVersions lists the versions the catalog records.
func (e *failEnv) recordedVersions(t *testing.T) []int {
	t.Helper()
	files, err := e.cat.ShardSQL(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, f := range files {
		out = append(out, f.Version)
	}
	return out
}

// schemasWith counts the shard schemas of a server that applied a version.
func (e *failEnv) schemasWith(t *testing.T, server, version int) int {
	t.Helper()
	var n int
	err := pgtest.Connect(t, e.servers[server].DSN).QueryRow(context.Background(),
		`SELECT count(*) FROM shardkit.shard_migrations WHERE version = $1 AND part = 'tables'`, version).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFailedMigrateRecordsNothing: a file whose SQL fails on every shard
// leaves the catalog as it was, with a typed error naming the shard, the
// server and the file; the next migrate without the file succeeds, and so
// does one with the file fixed.
func TestFailedMigrateRecordsNothing(t *testing.T) {
	e := newFailEnv(t)
	ctx := context.Background()
	bad := fstest.MapFS{
		"0001_a.sql": failV1["0001_a.sql"],
		"0002_b.sql": {Data: []byte("CREATE TABLE b (id bigint PRIMARY KEY, oops);")},
	}
	err := Migrate(ctx, e.cat, bad, MigrateOptions{})
	var se *ShardError
	if !errors.Is(err, ErrMigrationFailed) || !errors.As(err, &se) || se.File != "0002_b.sql" || se.Server == "" {
		t.Fatalf("failing file: %v; want ErrMigrationFailed and a *ShardError naming 0002_b.sql and its server", err)
	}
	if v := e.recordedVersions(t); len(v) != 1 {
		t.Fatalf("catalog records versions %v after a failed migrate, want [1]", v)
	}
	// The bad file removed: nothing left to trip over.
	if err := Migrate(ctx, e.cat, failV1, MigrateOptions{}); err != nil {
		t.Fatalf("migrate without the failed file: %v", err)
	}
	if err := Migrate(ctx, e.cat, nil, MigrateOptions{}); err != nil {
		t.Fatalf("migrate of the catalog's record: %v", err)
	}
	fixed := fstest.MapFS{
		"0001_a.sql": failV1["0001_a.sql"],
		"0002_b.sql": {Data: []byte("CREATE TABLE b (id bigint PRIMARY KEY);")},
	}
	if err := Migrate(ctx, e.cat, fixed, MigrateOptions{}); err != nil {
		t.Fatalf("fixed file: %v", err)
	}
	if v := e.recordedVersions(t); len(v) != 2 || e.schemasWith(t, 0, 2)+e.schemasWith(t, 1, 2) != 8 {
		t.Fatalf("after the fix: catalog records %v, %d+%d schemas have version 2; want [1 2] and 8",
			v, e.schemasWith(t, 0, 2), e.schemasWith(t, 1, 2))
	}
}

// TestPartlyFailedMigrateIsFinishedNotForked: a file that fails on one
// shard (its data breaks the new constraint) but applies on others
// records nothing in the catalog; the schemas that applied it keep it, so
// the file may not change or vanish (typed errors saying what to do) until
// the shard's data is fixed and the same file finishes the job.
func TestPartlyFailedMigrateIsFinishedNotForked(t *testing.T) {
	e := newFailEnv(t)
	ctx := context.Background()
	// Shard 6 lives on pg1 (shards are split in halves: 0-3 on pg0, 4-7 on pg1).
	snap, err := e.cat.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := snap.Placement(6); err != nil || p.Server != "pg1" {
		t.Fatalf("shard 6 placed %+v, %v; want on pg1", p, err)
	}
	bad := pgtest.Connect(t, e.servers[1].DSN)
	if _, err := bad.Exec(ctx, `INSERT INTO shard_0006.a (n) VALUES (-1)`); err != nil {
		t.Fatal(err)
	}
	v2 := fstest.MapFS{
		"0001_a.sql":        failV1["0001_a.sql"],
		"0002_positive.sql": {Data: []byte("ALTER TABLE a ADD CONSTRAINT a_positive CHECK (n >= 0);")},
	}
	// Hold shard 6 back until pg0 applied version 2 everywhere, so that the
	// failure comes after other schemas applied the file.
	hold, err := pgtest.Connect(t, e.servers[1].DSN).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hold.Exec(ctx, `LOCK TABLE shard_0006.a IN ACCESS SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Migrate(ctx, e.cat, v2, MigrateOptions{}) }()
	for e.schemasWith(t, 0, 2) < 4 {
		select {
		case err := <-done:
			t.Fatalf("migrate returned before pg0 applied version 2: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := hold.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	err = <-done
	var se *ShardError
	if !errors.Is(err, ErrMigrationFailed) || !errors.As(err, &se) || se.Shard != 6 || se.Server != "pg1" || se.File != "0002_positive.sql" {
		t.Fatalf("failing shard: %v; want ErrMigrationFailed naming shard 6 on pg1 and 0002_positive.sql", err)
	}
	if v := e.recordedVersions(t); len(v) != 1 {
		t.Fatalf("catalog records versions %v after a failed migrate, want [1]", v)
	}
	// Another content, or no file at all, would fork the schemas.
	edited := fstest.MapFS{
		"0001_a.sql":        failV1["0001_a.sql"],
		"0002_positive.sql": {Data: []byte("ALTER TABLE a ADD CONSTRAINT a_positive CHECK (n >= -1);")},
	}
	if err := Migrate(ctx, e.cat, edited, MigrateOptions{}); !errors.Is(err, ErrMigrationChanged) {
		t.Fatalf("edited partly applied file: %v, want ErrMigrationChanged", err)
	}
	if err := Migrate(ctx, e.cat, failV1, MigrateOptions{}); !errors.Is(err, ErrMigrationIncomplete) {
		t.Fatalf("partly applied file removed: %v, want ErrMigrationIncomplete", err)
	}
	// Fix the shard's data, run the same file again: it finishes.
	if _, err := bad.Exec(ctx, `DELETE FROM shard_0006.a WHERE n < 0`); err != nil {
		t.Fatal(err)
	}
	if err := Migrate(ctx, e.cat, v2, MigrateOptions{}); err != nil {
		t.Fatalf("retry after fixing the data: %v", err)
	}
	if v := e.recordedVersions(t); len(v) != 2 || e.schemasWith(t, 0, 2)+e.schemasWith(t, 1, 2) != 8 {
		t.Fatalf("after the retry: catalog records %v, %d+%d schemas have version 2; want [1 2] and 8",
			v, e.schemasWith(t, 0, 2), e.schemasWith(t, 1, 2))
	}
}

// TestFirstFilesAfterProvisioningNone migrates the first per-shard files
// into a catalog provisioned without any: nothing recorded is not an
// error, and the files are applied and recorded.
func TestFirstFilesAfterProvisioningNone(t *testing.T) {
	ctx := context.Background()
	e := &failEnv{newEnv(t, 1)}
	cat := e.cat
	if err := Provision(ctx, cat, ProvisionOptions{Servers: e.servers, Shards: 4}); err != nil {
		t.Fatal(err)
	}
	if err := Migrate(ctx, cat, failV1, MigrateOptions{}); err != nil {
		t.Fatalf("first migrate: %v", err)
	}
	if got := e.recordedVersions(t); len(got) != 1 || got[0] != 1 {
		t.Errorf("catalog records versions %v, want [1]", got)
	}
	if n := e.schemasWith(t, 0, 1); n != 4 {
		t.Errorf("%d schemas applied version 1, want 4", n)
	}
}
