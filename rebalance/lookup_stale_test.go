package rebalance

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"gorm.io/gorm"

	"github.com/shardkit/shardkit/internal/harness/shardtest/photos"
	"github.com/shardkit/shardkit/plugin"
	"github.com/shardkit/shardkit/router"
)

// TestLookupsWithAStaleMapAfterAMove runs the statements of a lookup
// column from processes whose map is older than a move of the shard that
// holds the lookup rows, as the application role: after the cutover the
// old home refuses the role (42501), after completion it has no copy
// (42P01). A read by the lookup column finds its member, a sign-up claims
// its value on the new home, a duplicate is refused with
// ErrDuplicateLookup, a rename moves the value: each as on a fresh map.
func TestLookupsWithAStaleMapAfterAMove(t *testing.T) {
	ctx := context.Background()
	e := newAppEnv(t, 2, 1, 4) // every shard on s0
	addMembers(t, e)
	const moving = 0
	stale := func() *gorm.DB {
		return newMembersDB(t, e, staleRouter(t, e)).Session(&gorm.Session{SkipDefaultTransaction: true})
	}
	seed := stale()
	var held []lookupMember // members whose lookup rows the moving shard holds
	for i := range 3 {
		m := lookupMember{UserID: int64(1 + i), Username: nameInShard(t, fmt.Sprintf("held%d-", i), moving, e.shards)}
		if err := seed.Create(&m).Error; err != nil {
			t.Fatal(err)
		}
		held = append(held, m)
	}

	type client struct{ read, signUp, dup, rename *gorm.DB }
	clients := func() client {
		c := client{stale(), stale(), stale(), stale()}
		for _, db := range []*gorm.DB{c.read, c.signUp, c.dup, c.rename} {
			var m lookupMember
			if err := db.Where("username = ?", held[0].Username).Take(&m).Error; err != nil || m.ID != held[0].ID {
				t.Fatalf("read by username before the move: %+v, %v", m, err)
			}
		}
		return c
	}
	check := func(when string, c client, round int) {
		t.Helper()
		var m lookupMember
		if err := c.read.Where("username = ?", held[1].Username).Take(&m).Error; err != nil || m.ID != held[1].ID {
			t.Errorf("read by username with a map older than the %s: %+v, %v; want member %d", when, m, err, held[1].ID)
		}
		fresh := lookupMember{UserID: int64(10 + round), Username: nameInShard(t, fmt.Sprintf("fresh%d-", round), moving, e.shards)}
		if err := c.signUp.Create(&fresh).Error; err != nil {
			t.Errorf("sign-up with a map older than the %s: %v", when, err)
		}
		dup := lookupMember{UserID: int64(20 + round), Username: held[0].Username}
		if err := c.dup.Create(&dup).Error; !errors.Is(err, plugin.ErrDuplicateLookup) {
			t.Errorf("duplicate sign-up with a map older than the %s: %v; want ErrDuplicateLookup", when, err)
		}
		renamed := nameInShard(t, fmt.Sprintf("renamed%d-", round), moving, e.shards)
		if err := c.rename.Model(&held[2]).Update("username", renamed).Error; err != nil {
			t.Errorf("rename with a map older than the %s: %v", when, err)
		} else {
			held[2].Username = renamed
		}
	}

	forCutover, forCompletion := clients(), clients()
	mv := e.mover(t, Config{})
	if _, err := mv.Move(ctx, moving, "s1", MoveOptions{}); err != nil {
		t.Fatal(err)
	}
	if p := e.placement(t, moving); p.Server != "s1" {
		t.Fatalf("shard %d on %s after the move; want s1", moving, p.Server)
	}
	check("cutover", forCutover, 1)
	if _, err := mv.Complete(ctx, moving); err != nil {
		t.Fatal(err)
	}
	check("completion", forCompletion, 2)

	// On a fresh map: every member is found by its username.
	fresh := stale()
	for _, m := range held {
		var got lookupMember
		if err := fresh.Where("username = ?", m.Username).Take(&got).Error; err != nil || got.ID != m.ID {
			t.Errorf("read of %q after the moves: %+v, %v; want member %d", m.Username, got, err, m.ID)
		}
	}
}

// TestCopyFromWithAStaleMapAfterAMove loads rows into a moved shard with
// plugin.CopyFrom from processes whose map is older than the move, as the
// application role: after the cutover and after completion, every part
// is committed on the shard's new home.
func TestCopyFromWithAStaleMapAfterAMove(t *testing.T) {
	ctx := context.Background()
	e := newAppEnv(t, 2, 1, 4) // every shard on s0
	const moving = 0
	stale := func() *gorm.DB {
		t.Helper()
		db := newPluginDB(t, e, staleRouter(t, e), plugin.Config{}, &photos.Photo{})
		var n int64 // a statement on the shard, so the process holds its pool
		if err := db.Model(&photos.Photo{}).Where("user_id = ?", moving).Count(&n).Error; err != nil {
			t.Fatal(err)
		}
		return db
	}
	load := func(db *gorm.DB, when string, n int) {
		t.Helper()
		rows := make([]photos.Photo, n)
		for i := range rows {
			rows[i] = photos.Photo{UserID: int64(moving + e.shards*(i+1)), Caption: when}
		}
		rep, err := plugin.CopyFrom(ctx, db, &rows)
		if err != nil {
			t.Errorf("CopyFrom with a map older than the %s: %v", when, err)
			return
		}
		if rep.Rows != int64(n) {
			t.Errorf("CopyFrom with a map older than the %s: %d rows copied, want %d", when, rep.Rows, n)
		}
	}
	forCutover, forCompletion := stale(), stale()
	mv := e.mover(t, Config{})
	if _, err := mv.Move(ctx, moving, "s1", MoveOptions{}); err != nil {
		t.Fatal(err)
	}
	load(forCutover, "cutover", 20)
	if _, err := mv.Complete(ctx, moving); err != nil {
		t.Fatal(err)
	}
	load(forCompletion, "completion", 30)
	var n int64
	if err := e.pools["s1"].QueryRow(ctx, `SELECT count(*) FROM `+ident(router.SchemaName(moving), "photos")).Scan(&n); err != nil || n != 50 {
		t.Errorf("the shard's new home holds %d rows (%v), want the 50 loaded", n, err)
	}
}
