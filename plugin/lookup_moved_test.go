package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/internal/pgtest"
	"github.com/shardkit/shardkit/migrations"
	"github.com/shardkit/shardkit/router"
)

// moveMembersByHand moves a shard to the other server as the mover's
// cutover leaves it, for the members model: schema, members and their
// lookup rows copied to the target, the source's write barrier installed
// on those tables, the map flipped. The router is not told: it holds a
// stale map until a refusal makes it reload.
func (e *env) moveMembersByHand(t *testing.T, shard int) (from, to string) {
	t.Helper()
	ctx := context.Background()
	from = e.serverOf(t, shard)
	to = "a"
	if from == "a" {
		to = "b"
	}
	schema := router.SchemaName(shard)
	dst := pgtest.Connect(t, e.dsn[to])
	// Moving back: the target still has the schema it was moved from.
	if err := migrations.DropShard(ctx, dst, shard); err != nil {
		t.Fatal(err)
	}
	if err := migrations.ApplyShard(ctx, dst, e.r.Snapshot().Layout, shard, os.DirFS("testdata/shardsql"), migrations.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	src := pgtest.Connect(t, e.dsn[from])
	tables := []string{"members", "members_username_lookup", "members_email_lookup"}
	for _, table := range tables {
		q := pgx.Identifier{schema, table}.Sanitize()
		rows, err := src.Query(ctx, "SELECT * FROM "+q)
		if err != nil {
			t.Fatal(err)
		}
		vals, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vals {
			ph := "$1"
			for i := 2; i <= len(v); i++ {
				ph += fmt.Sprintf(", $%d", i)
			}
			if _, err := dst.Exec(ctx, "INSERT INTO "+q+" VALUES ("+ph+")", v...); err != nil {
				t.Fatal(err)
			}
		}
	}
	fn := pgx.Identifier{schema, "shardkit_fence"}.Sanitize()
	e.rawExec(t, from, fmt.Sprintf(`CREATE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN RAISE EXCEPTION 'shard moved' USING ERRCODE = '%s'; END $fn$`, fn, router.FenceSQLState))
	for _, table := range tables {
		e.rawExec(t, from, fmt.Sprintf(`CREATE TRIGGER shardkit_fence BEFORE INSERT OR UPDATE OR DELETE ON %s
FOR EACH STATEMENT EXECUTE FUNCTION %s()`, pgx.Identifier{schema, table}.Sanitize(), fn))
	}
	e.setShard(t, shard, to, router.StateActive)
	return from, to
}

// nameIn returns a username, with the prefix, whose lookup row lives in
// the shard.
func nameIn(t *testing.T, prefix string, shard, shards int) string {
	t.Helper()
	for i := range 10000 {
		name := fmt.Sprintf("%s%d", prefix, i)
		if s, _ := LookupShard(name, shards); s == shard {
			return name
		}
	}
	t.Fatalf("no %s… name in shard %d", prefix, shard)
	return ""
}

// A lookup write whose lookup row's shard moved (its old home refuses)
// runs once more on the new home, as a row's own write does: sign-ups,
// duplicates, reclaims, renames and deletes with a stale map all end as
// they would have on a map that knew the move.
func TestLookupWriteOnMovedLookupShard(t *testing.T) {
	ctx := context.Background()
	e := newLookupEnv(t)
	db := e.db.Session(&gormSkipTx)
	const moved = 5
	keyOff := int64(moved + 3) // the owner rows stay put: another shard
	taken := nameIn(t, "taken", moved, e.shards)
	renamed := nameIn(t, "renamed", moved, e.shards)
	ghost := nameIn(t, "ghost", moved, e.shards)
	a, err := e.signUp(ctx, db, taken, keyOff)
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.signUp(ctx, db, renamed, keyOff)
	if err != nil {
		t.Fatal(err)
	}
	// An orphan in the moved shard: a lookup row whose owner row is gone.
	if err := db.Where("id = ?", b.ID).Delete(&Member{}).Error; err != nil {
		t.Fatal(err)
	}
	b, err = e.signUp(ctx, db, ghost, keyOff)
	if err != nil {
		t.Fatal(err)
	}

	// Each step moves the shard to the other server behind the router's
	// back (back and forth).
	stale := func(step string) {
		t.Helper()
		from, _ := e.moveMembersByHand(t, moved)
		if e.serverOf(t, moved) != from {
			t.Fatalf("%s: the router knows the new map already; the retry would not be exercised", step)
		}
	}

	// A sign-up claims and holds its value in the moved shard.
	stale("sign-up")
	fresh := nameIn(t, "fresh", moved, e.shards)
	m, err := e.signUp(ctx, db, fresh, keyOff)
	if err != nil {
		t.Fatalf("sign-up with a stale map: %v", err)
	}
	var got Member
	if err := db.First(&got, "username = ?", fresh).Error; err != nil || got.ID != m.ID {
		t.Fatalf("read %s: %+v, %v", fresh, got, err)
	}

	// A duplicate finds the copied lookup row on the new home.
	stale("duplicate")
	if _, err := e.signUp(ctx, db, taken, keyOff+1); !errors.Is(err, ErrDuplicateLookup) {
		t.Fatalf("duplicate with a stale map: %v, want ErrDuplicateLookup", err)
	}

	// A reclaim takes the orphan over on the new home.
	stale("reclaim")
	r, err := e.signUp(ctx, db, renamed, keyOff+2)
	if err != nil {
		t.Fatalf("reclaim with a stale map: %v", err)
	}

	// A rename drops the old value's lookup row on the new home.
	stale("rename")
	if err := db.Model(a).Update("username", "a-new-name").Error; err != nil {
		t.Fatalf("rename with a stale map: %v", err)
	}

	// A delete of a loaded row drops its lookup row on the new home.
	stale("delete")
	if err := db.Delete(&Member{ID: b.ID, Username: ghost}).Error; err != nil {
		t.Fatalf("delete with a stale map: %v", err)
	}

	members, orphans := e.checkLookups(t)
	if len(orphans) != 0 {
		t.Fatalf("orphans %v", orphans)
	}
	want := map[int64]string{a.ID: "a-new-name", m.ID: fresh, r.ID: renamed}
	if len(members) != len(want) {
		t.Fatalf("members %v, want %v", members, want)
	}
	for id, name := range want {
		if members[id].Username != name {
			t.Fatalf("member %d is %q, want %q", id, members[id].Username, name)
		}
	}
	if _, err := e.signUp(ctx, db, fresh, keyOff+3); !errors.Is(err, ErrDuplicateLookup) {
		t.Fatalf("duplicate after the moves: %v", err)
	}
	e.defaultUntouched(t)
}

// A sign-up whose owner row's shard moved writes the row on the new
// home (the row's own write retries, see runWrite), its lookup row where
// it belongs, and a later duplicate is refused.
func TestLookupWriteOnMovedOwnerShard(t *testing.T) {
	ctx := context.Background()
	e := newLookupEnv(t)
	db := e.db.Session(&gormSkipTx)
	const moved = 6
	name := nameIn(t, "owner", moved+1, e.shards) // the lookup row stays put
	from, to := e.moveMembersByHand(t, moved)
	if e.serverOf(t, moved) != from {
		t.Fatal("the router knows the new map already")
	}
	m, err := e.signUp(ctx, db, name, moved)
	if err != nil {
		t.Fatalf("sign-up with a stale map: %v", err)
	}
	if got := e.locate(t, "members", m.ID); len(got) != 1 || got[0] != to+"/"+router.SchemaName(moved) {
		t.Fatalf("member at %v, want on %s", got, to)
	}
	var got Member
	if err := db.First(&got, "username = ?", name).Error; err != nil || got.ID != m.ID {
		t.Fatalf("read %s: %+v, %v", name, got, err)
	}
	if _, err := e.signUp(ctx, db, name, moved); !errors.Is(err, ErrDuplicateLookup) {
		t.Fatalf("duplicate: %v", err)
	}
	if _, orphans := e.checkLookups(t); len(orphans) != 0 {
		t.Fatalf("orphans %v", orphans)
	}
}
