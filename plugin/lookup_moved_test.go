package plugin

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/shardschema"
	"github.com/shardkit/shardkit/router"
)

// memberTables are the tables moveByHand carries for the members model.
var memberTables = []string{"members", "members_username_lookup", "members_email_lookup"}

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
		from, _ := e.moveByHand(t, moved, memberTables...)
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
	from, to := e.moveByHand(t, moved, memberTables...)
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

// A lookup write whose stale map places the lookup row's shard on a
// server where a rollback dropped the copy right after flipping the shard
// back (that server keeps no fence) finds no table there, and runs once
// more on the shard's home, as a row's own write does (runWrite). A
// table missing where the map still places the shard stays an error.
func TestLookupWriteAfterARollbackDroppedTheSchema(t *testing.T) {
	ctx := context.Background()
	e := newLookupEnv(t)
	db := e.db.Session(&gormSkipTx)
	const moved = 5
	keyOff := int64(moved + 3) // the owner rows stay put: another shard
	home := e.serverOf(t, moved)
	other := otherServer(home)
	e.staleOn(t, moved, other, home)
	if err := shardschema.DropShard(ctx, pgtest.Connect(t, e.dsn[other]), moved); err != nil {
		t.Fatal(err)
	}
	name := nameIn(t, "back", moved, e.shards)
	m, err := e.signUp(ctx, db, name, keyOff)
	if err != nil {
		t.Fatalf("sign-up with a stale map after the copy was dropped: %v", err)
	}
	if got := e.serverOf(t, moved); got != home {
		t.Fatalf("router map has shard %d on %s, want %s", moved, got, home)
	}
	var got Member
	if err := db.First(&got, "username = ?", name).Error; err != nil || got.ID != m.ID {
		t.Fatalf("read %s: %+v, %v", name, got, err)
	}
	if members, orphans := e.checkLookups(t); len(orphans) != 0 || members[m.ID].Username != name {
		t.Fatalf("members %v, orphans %v", members, orphans)
	}

	if err := shardschema.DropShard(ctx, pgtest.Connect(t, e.dsn[home]), moved); err != nil {
		t.Fatal(err)
	}
	_, err = e.signUp(ctx, db, nameIn(t, "gone", moved, e.shards), keyOff)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42P01" {
		t.Fatalf("sign-up into a dropped shard on its home: %v, want relation does not exist", err)
	}
}
