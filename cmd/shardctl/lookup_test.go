package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest/photos"
	"github.com/shardkit/shardkit/router"
)

// TestLookupCheckAndRepair plants every kind of damage in a lookup table
// with raw SQL and checks that lookup reports it, and that --repair fixes
// all but a duplicate value, which it leaves to a person.
func TestLookupCheckAndRepair(t *testing.T) {
	ctx := context.Background()
	catalog := pgtest.NewDatabase(t, 0)
	srv := pgtest.NewDatabase(t, 1)
	const shards = 4
	if code, _, errOut := shardctl("init", "--catalog", catalog, "--server", "a="+srv, "--shards", "4", "--sql", photos.With(photos.Members).Dir(t)); code != 0 {
		t.Fatalf("init: exit %d: %s", code, errOut)
	}
	t.Setenv(CatalogEnv, catalog)
	conn := pgtest.Connect(t, srv)
	member := func(shard int, name string) int64 {
		var id int64
		q := fmt.Sprintf("INSERT INTO shard_%04d.members (username) VALUES ($1) RETURNING id", shard)
		if err := conn.QueryRow(ctx, q, name).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	lookupRow := func(shard int, value string, owner int64) {
		if shard < 0 {
			shard, _ = router.ShardOfString(value, shards)
		}
		pgtest.Exec(t, srv, fmt.Sprintf("INSERT INTO shard_%04d.members_username_lookup VALUES ($1, $2)", shard), value, owner)
	}
	lookupRow(-1, "alice", member(1, "alice"))   // sound
	member(2, "bob")                             // missing
	lookupRow(-1, "ghost", member(0, "ghost")+1) // orphan
	carol := member(3, "carol")
	wrong, _ := router.ShardOfString("carol", shards)
	lookupRow((wrong+1)%shards, "carol", carol) // misplaced
	dup := member(0, "dup")
	member(1, "dup") // duplicate value
	lookupRow(-1, "dup", dup)

	args := []string{"lookup", "--table", "members", "--column", "username"}
	code, out, errOut := shardctl(args...)
	if code != 1 || !strings.Contains(out, "6 owner rows, 4 lookup rows: 4 missing, 1 misplaced, 1 duplicate values, 1 orphans") ||
		!strings.Contains(errOut, "lookup table does not match its owners") {
		t.Fatalf("check: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{`missing: "bob"`, `missing: "carol"`, `missing: "ghost"`, `misplaced: "carol"`, `duplicate: "dup"`, `orphan: "ghost"`} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %s:\n%s", want, out)
		}
	}
	code, out, _ = shardctl(append(args, "--repair")...)
	if code != 1 || !strings.Contains(out, "after repair: 6 owner rows, 5 lookup rows: 1 missing, 0 misplaced, 1 duplicate values, 0 orphans") {
		t.Fatalf("repair: exit %d\n%s", code, out)
	}
	// Once a person settles the duplicate, the table checks clean.
	pgtest.Exec(t, srv, "DELETE FROM shard_0001.members WHERE username = 'dup'")
	code, out, errOut = shardctl(args...)
	if code != 0 || !strings.Contains(out, "5 owner rows, 5 lookup rows: 0 missing, 0 misplaced, 0 duplicate values, 0 orphans") {
		t.Fatalf("check after settling: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, _, errOut := shardctl("lookup", "--table", "members"); code != 2 {
		t.Fatalf("without --column: exit %d, %s", code, errOut)
	}
}

// TestLookupRepairIntegerColumn: on a lookup of an integer column, repair
// drops an orphan and keeps a sound row: the plugin's statements compare
// the typed column with the value shardctl reads as text.
func TestLookupRepairIntegerColumn(t *testing.T) {
	ctx := context.Background()
	catalog := pgtest.NewDatabase(t, 0)
	srv := pgtest.NewDatabase(t, 1)
	const shards = 2
	if code, _, errOut := shardctl("init", "--catalog", catalog, "--server", "a="+srv, "--shards", "2", "--sql", photos.With(photos.Members).Dir(t)); code != 0 {
		t.Fatalf("init: exit %d: %s", code, errOut)
	}
	t.Setenv(CatalogEnv, catalog)
	for s := range shards {
		pgtest.Exec(t, srv, fmt.Sprintf(`CREATE TABLE shard_%04d.badges (id bigint PRIMARY KEY, num bigint NOT NULL);
			CREATE TABLE shard_%04d.badges_num_lookup (value bigint PRIMARY KEY, owner_id bigint NOT NULL)`, s, s))
	}
	conn := pgtest.Connect(t, srv)
	var owner int64 // an ID of shard 0's
	if err := conn.QueryRow(ctx, "SELECT shard_0000.next_id()").Scan(&owner); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, srv, "INSERT INTO shard_0000.badges VALUES ($1, 7)", owner)
	for _, row := range []struct{ value, owner int64 }{{7, owner}, {42, owner}} { // sound; orphan (its owner holds 7)
		s, _ := router.ShardOfString(fmt.Sprint(row.value), shards)
		pgtest.Exec(t, srv, fmt.Sprintf("INSERT INTO shard_%04d.badges_num_lookup VALUES ($1, $2)", s), row.value, row.owner)
	}
	args := []string{"lookup", "--table", "badges", "--column", "num", "--repair"}
	code, out, errOut := shardctl(args...)
	if code != 0 || !strings.Contains(out, `orphan: "42"`) ||
		!strings.Contains(out, "after repair: 1 owner rows, 1 lookup rows: 0 missing, 0 misplaced, 0 duplicate values, 0 orphans") {
		t.Fatalf("repair: exit %d\n%s\n%s", code, out, errOut)
	}
}
