package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/idgen"

	"github.com/shardkit/shardkit/router"
)

func TestCreateOne(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, user := range []int64{1, 2, 7, 8, 15} {
		p := Photo{UserID: user, Caption: "hello"}
		if err := e.db.Create(&p).Error; err != nil {
			t.Fatalf("create for user %d: %v", user, err)
		}
		if p.ID == 0 {
			t.Fatal("ID not filled")
		}
		s, _ := e.r.Snapshot().Layout.ShardOf(p.ID)
		if s != e.shardOf(user) {
			t.Fatalf("ID %d has shard %d, want %d", p.ID, s, e.shardOf(user))
		}
		e.assertAt(t, "photos", p.ID, e.shardOf(user))
	}
	e.defaultUntouched(t)
}

func TestCreateHookSetsKey(t *testing.T) {
	e := newEnv(t, envOpts{})
	p := Photo{Caption: "user:13"}
	if err := e.db.Create(&p).Error; err != nil {
		t.Fatal(err)
	}
	if p.UserID != 13 {
		t.Fatalf("user = %d", p.UserID)
	}
	e.assertAt(t, "photos", p.ID, e.shardOf(13))
}

func TestCreateMixedSlice(t *testing.T) {
	e := newEnv(t, envOpts{})
	var ps []Photo
	for u := int64(1); u <= 40; u++ {
		ps = append(ps, Photo{UserID: u, Caption: "mixed"})
	}
	res := e.db.Create(&ps)
	if res.Error != nil {
		t.Fatal(res.Error)
	}
	if res.RowsAffected != 40 {
		t.Fatalf("rows affected %d", res.RowsAffected)
	}
	for _, p := range ps {
		e.assertAt(t, "photos", p.ID, e.shardOf(p.UserID))
	}
	// pointers too, and likes keyed by their photo
	var likes []*Like
	for i, p := range ps {
		likes = append(likes, &Like{UserID: int64(100 + i), PhotoID: p.ID})
	}
	if err := e.db.Create(&likes).Error; err != nil {
		t.Fatal(err)
	}
	for i, l := range likes {
		e.assertAt(t, "likes", l.ID, e.shardOf(ps[i].UserID))
	}
	e.defaultUntouched(t)
}

func TestCreateInBatches(t *testing.T) {
	e := newEnv(t, envOpts{})
	var ps []Photo
	for i := 0; i < 250; i++ {
		ps = append(ps, Photo{UserID: 5, Caption: "batch"})
	}
	if err := e.db.CreateInBatches(&ps, 100).Error; err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.ID == 0 {
			t.Fatal("ID not filled")
		}
	}
	e.assertAt(t, "photos", ps[0].ID, e.shardOf(5))
	e.assertAt(t, "photos", ps[249].ID, e.shardOf(5))

	// Rows of several shards: one statement per batch, split per shard.
	var mixed []Photo
	for i := 0; i < 250; i++ {
		mixed = append(mixed, Photo{UserID: int64(i + 1), Caption: "batch"})
	}
	if err := e.db.Session(&gormSkipTx).CreateInBatches(&mixed, 100).Error; err != nil {
		t.Fatal(err)
	}
	for _, p := range mixed[:20] {
		e.assertAt(t, "photos", p.ID, e.shardOf(p.UserID))
	}
	// Inside GORM's batch transaction, rows of several shards cross shards.
	var mixed2 []Photo
	for i := 0; i < 250; i++ {
		mixed2 = append(mixed2, Photo{UserID: int64(i + 1), Caption: "batch"})
	}
	err := e.db.CreateInBatches(&mixed2, 100).Error
	if !errors.Is(err, ErrCrossShard) || !strings.Contains(err.Error(), "SkipDefaultTransaction") {
		t.Fatalf("err = %v, want ErrCrossShard naming the way out", err)
	}
	// Nothing of the refused transaction was written.
	for _, p := range mixed2[:5] {
		if p.ID != 0 {
			e.assertAbsent(t, "photos", p.ID)
		}
	}
}

func TestCreateFallbackToNextID(t *testing.T) {
	e := newEnv(t, envOpts{noIDs: true})
	ps := []Photo{{UserID: 3}, {UserID: 4}, {UserID: 3}}
	if err := e.db.Create(&ps).Error; err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.ID == 0 {
			t.Fatal("ID not read back")
		}
		parts, _ := e.r.Snapshot().Layout.Decode(p.ID)
		if parts.Shard != e.shardOf(p.UserID) || parts.Slot != 0 {
			t.Fatalf("ID %d: %+v", p.ID, parts)
		}
		e.assertAt(t, "photos", p.ID, e.shardOf(p.UserID))
	}
}

func TestCreateIDMismatch(t *testing.T) {
	e := newEnv(t, envOpts{})
	good := Photo{UserID: 3}
	if err := e.db.Create(&good).Error; err != nil {
		t.Fatal(err)
	}
	// A caller-given ID of the right shard is kept.
	id, err := e.gen.Next(t.Context(), e.shardOf(3))
	if err != nil {
		t.Fatal(err)
	}
	kept := Photo{ID: id, UserID: 3 + int64(e.shards)}
	if err := e.db.Create(&kept).Error; err != nil || kept.ID != id {
		t.Fatalf("err %v, id %d want %d", err, kept.ID, id)
	}
	e.assertAt(t, "photos", id, e.shardOf(3))
	// One of another shard is refused.
	bad := Photo{ID: good.ID + 1<<20, UserID: 4}
	err = e.db.Create(&bad).Error
	if !errors.Is(err, ErrIDShardMismatch) {
		t.Fatalf("err = %v, want ErrIDShardMismatch", err)
	}
	var se *ShardError
	if !errors.As(err, &se) {
		t.Fatalf("err %T is not a *ShardError", err)
	}
	_ = router.SchemaName
}

func TestCreateWithAssociations(t *testing.T) {
	e := newEnv(t, envOpts{})
	p := Photo{UserID: 11, LikeRows: []Like{{UserID: 1}, {UserID: 2}}}
	if err := e.db.Create(&p).Error; err != nil {
		t.Fatal(err)
	}
	e.assertAt(t, "photos", p.ID, e.shardOf(11))
	for _, l := range p.LikeRows {
		if l.PhotoID != p.ID || l.ID == 0 {
			t.Fatalf("like %+v", l)
		}
		e.assertAt(t, "likes", l.ID, e.shardOf(11))
	}
	if err := e.db.Create(Photo{UserID: 11}).Error; err == nil {
		t.Fatal("create from a non-pointer succeeded")
	}
	e.defaultUntouched(t)
}

// strictLike declares its key without a database default, as models whose
// IDs always come from the generator do.
type strictLike struct {
	ID      int64 `gorm:"primaryKey;autoIncrement:false"`
	UserID  int64
	PhotoID int64 `shard:"id"`
}

func (strictLike) TableName() string { return "likes" }

func TestFallbackWithoutDatabaseDefaultTag(t *testing.T) {
	e := newEnv(t, envOpts{})
	p := Photo{UserID: 9}
	if err := e.db.Create(&p).Error; err != nil {
		t.Fatal(err)
	}
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: e.defPool}), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	noSlot := Config{Router: e.r, IDs: failingIDs{}}
	if err := db.Use(Register(noSlot, &strictLike{})); err != nil {
		t.Fatal(err)
	}
	ls := []strictLike{{UserID: 1, PhotoID: p.ID}, {UserID: 2, PhotoID: p.ID}}
	if err := db.Create(&ls).Error; err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		parts, _ := e.r.Snapshot().Layout.Decode(l.ID)
		if l.ID == 0 || parts.Slot != 0 || parts.Shard != e.shardOf(9) {
			t.Fatalf("like %+v: %+v", l, parts)
		}
		e.assertAt(t, "likes", l.ID, e.shardOf(9))
	}
	e.defaultUntouched(t)
}

// failingIDs has no slot.
type failingIDs struct{}

func (failingIDs) Next(context.Context, int) (int64, error) {
	return 0, fmt.Errorf("lease: %w", idgen.ErrNoFreeSlot)
}
