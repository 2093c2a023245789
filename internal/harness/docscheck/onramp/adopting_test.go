package onramp

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest"
	"github.com/shardkit/shardkit/plugin"
)

// The code of docs/adopting.md, quoted there verbatim (the docs check's
// TestGoBlocksCompile finds each block here), and TestAdopting runs it.

// Photo is sharded by its user; LegacyID keeps the ID the row had in the
// unsharded database.
type Photo struct {
	ID       int64 `gorm:"primaryKey;autoIncrement:false"`
	UserID   int64 `shard:"key"`
	Caption  string
	LegacyID int64
}

// Comment lives in its photo's shard: the shard is in PhotoID's bits.
type Comment struct {
	ID       int64 `gorm:"primaryKey;autoIncrement:false"`
	PhotoID  int64 `shard:"id"`
	Body     string
	LegacyID int64
}

// PhotoID maps an old photo ID to the new one. It is not sharded: its
// table is in the default database, beside the old tables.
type PhotoID struct {
	LegacyID int64 `gorm:"primaryKey;autoIncrement:false"`
	ID       int64
}

// legacyPhoto and legacyComment are rows of the old tables, read with a
// *gorm.DB that has no plugin.
type legacyPhoto struct {
	ID      int64
	UserID  int64
	Caption string
}

func (legacyPhoto) TableName() string { return "photos" }

type legacyComment struct {
	ID      int64
	PhotoID int64 // already mapped to the new photo ID by the query
	Body    string
}

// copyPhotos copies the old photos whose ID is above after onto the
// shards, a batch at a time in the order of their old IDs, and records
// each one's new ID. It returns the last old ID copied.
func copyPhotos(ctx context.Context, legacy, db *gorm.DB, after int64) (int64, error) {
	for {
		var old []legacyPhoto
		if err := legacy.Where("id > ?", after).Order("id").Limit(1000).Find(&old).Error; err != nil {
			return after, err
		}
		if len(old) == 0 {
			return after, nil
		}
		photos := make([]Photo, len(old))
		for i, o := range old {
			// ID 0: CopyFrom makes a new one in the user's shard and sets it here.
			photos[i] = Photo{UserID: o.UserID, Caption: o.Caption, LegacyID: o.ID}
		}
		if _, err := plugin.CopyFrom(ctx, db, photos); err != nil {
			return after, err // a *plugin.CopyError: its Report says which shards' parts are in
		}
		ids := make([]PhotoID, len(photos))
		for i, p := range photos {
			ids[i] = PhotoID{LegacyID: p.LegacyID, ID: p.ID}
		}
		if err := db.Create(&ids).Error; err != nil { // not sharded: the default database
			return after, err
		}
		after = old[len(old)-1].ID
	}
}

// copyComments copies the old comments whose ID is above after, each with
// its photo's new ID, so that it lands in its photo's shard.
func copyComments(ctx context.Context, legacy, db *gorm.DB, after int64) (int64, error) {
	for {
		var old []legacyComment
		err := legacy.Table("comments c").Select("c.id, m.id AS photo_id, c.body").
			Joins("JOIN photo_ids m ON m.legacy_id = c.photo_id").
			Where("c.id > ?", after).Order("c.id").Limit(1000).Scan(&old).Error
		if err != nil {
			return after, err
		}
		if len(old) == 0 {
			return after, nil
		}
		comments := make([]Comment, len(old))
		for i, o := range old {
			comments[i] = Comment{PhotoID: o.PhotoID, Body: o.Body, LegacyID: o.ID}
		}
		if _, err := plugin.CopyFrom(ctx, db, comments); err != nil {
			return after, err
		}
		after = old[len(old)-1].ID
	}
}

// undoAfter removes the copies of the old photos whose ID is above after,
// from every shard and from the map, so that copyPhotos can run again
// from after.
func undoAfter(db *gorm.DB, after int64) error {
	if err := db.Clauses(plugin.AllShards()).Where("legacy_id > ?", after).Delete(&Photo{}).Error; err != nil {
		return err
	}
	return db.Where("legacy_id > ?", after).Delete(&PhotoID{}).Error
}

// photoByLegacyID reads a photo by the ID an old link carries: the new ID
// from the map, then one shard.
func photoByLegacyID(db *gorm.DB, legacyID int64) (Photo, error) {
	var m PhotoID
	if err := db.First(&m, "legacy_id = ?", legacyID).Error; err != nil {
		return Photo{}, err
	}
	var p Photo
	err := db.First(&p, m.ID).Error // the shard is in the ID's bits
	return p, err
}

// counts compares the old tables' rows with the shards' (a read of every
// shard for each).
func counts(legacy, db *gorm.DB) (oldPhotos, newPhotos, oldComments, newComments int64, err error) {
	err = legacy.Table("photos").Count(&oldPhotos).Error
	if err == nil {
		err = db.Clauses(plugin.AllShards()).Model(&Photo{}).Count(&newPhotos).Error
	}
	if err == nil {
		err = legacy.Table("comments").Count(&oldComments).Error
	}
	if err == nil {
		err = db.Clauses(plugin.AllShards()).Model(&Comment{}).Count(&newComments).Error
	}
	return
}

// The adopting page's per-shard SQL, as the page gives it.
const adoptingSQL = `CREATE TABLE photos (
    id bigint PRIMARY KEY DEFAULT next_id(),
    user_id bigint NOT NULL,
    caption text NOT NULL DEFAULT '',
    legacy_id bigint NOT NULL DEFAULT 0
);
CREATE TABLE comments (
    id bigint PRIMARY KEY DEFAULT next_id(),
    photo_id bigint NOT NULL,
    body text NOT NULL DEFAULT '',
    legacy_id bigint NOT NULL DEFAULT 0
);
`

// TestAdopting runs the adopting page's code: an unsharded database of
// photos and comments (serial IDs, comments referencing photos) copied
// onto 16 shards on two servers, a copy resumed after its last batch was
// undone, a photo read by its old ID, comments in their photos' shards,
// and the counts equal. A few seconds.
func TestAdopting(t *testing.T) {
	if testing.Short() {
		t.Skip("starts clusters")
	}
	ctx := context.Background()
	e := shardtest.New(t, shardtest.Spec{Servers: []string{"a", "b"}, Shards: 16,
		ShardSQL: fstest.MapFS{"0001_photos.sql": {Data: []byte(adoptingSQL)}}})
	old := pgtest.NewDatabase(t, 0)
	pgtest.Exec(t, old, `CREATE TABLE photos (id bigserial PRIMARY KEY, user_id bigint NOT NULL, caption text NOT NULL);
		CREATE TABLE comments (id bigserial PRIMARY KEY, photo_id bigint NOT NULL REFERENCES photos, body text NOT NULL);
		INSERT INTO photos (user_id, caption) SELECT 1 + g % 37, 'photo ' || g FROM generate_series(1, 2500) g;
		INSERT INTO comments (photo_id, body) SELECT 1 + g % 2500, 'comment ' || g FROM generate_series(1, 3000) g;
		CREATE TABLE photo_ids (legacy_id bigint PRIMARY KEY, id bigint NOT NULL)`)

	legacy, err := gorm.Open(postgres.Open(old), &gorm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	db, err := gorm.Open(postgres.Open(old), &gorm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p := plugin.Register(plugin.Config{Router: e.Router(t), IDs: e.Generator(t)}, &Photo{}, &Comment{})
	if err := db.Use(p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })

	last, err := copyPhotos(ctx, legacy, db, 0)
	if err != nil || last != 2500 {
		t.Fatalf("copyPhotos: last %d, %v; want 2500", last, err)
	}
	// A copy that stopped after its second batch: undo what a failed third
	// batch may have left, as the page says, and copy on from there.
	if err := undoAfter(db, 2000); err != nil {
		t.Fatal(err)
	}
	if last, err = copyPhotos(ctx, legacy, db, 2000); err != nil || last != 2500 {
		t.Fatalf("copyPhotos resumed: last %d, %v; want 2500", last, err)
	}
	if last, err = copyComments(ctx, legacy, db, 0); err != nil || last != 3000 {
		t.Fatalf("copyComments: last %d, %v; want 3000", last, err)
	}
	oldPhotos, newPhotos, oldComments, newComments, err := counts(legacy, db)
	if err != nil || oldPhotos != newPhotos || oldComments != newComments || newPhotos != 2500 || newComments != 3000 {
		t.Fatalf("counts: photos %d → %d, comments %d → %d, %v", oldPhotos, newPhotos, oldComments, newComments, err)
	}

	photo, err := photoByLegacyID(db, 1234)
	if err != nil || photo.LegacyID != 1234 || photo.UserID != 1+1234%37 || photo.Caption != "photo 1234" {
		t.Fatalf("photo by old ID 1234: %+v, %v", photo, err)
	}
	// Comment 5 was on old photo 6; it is read with its photo's shard.
	var c Comment
	if err := db.Where("photo_id = ? AND legacy_id = ?", mustNewID(t, db, 6), 5).First(&c).Error; err != nil || c.Body != "comment 5" {
		t.Fatalf("comment 5 in its photo's shard: %+v, %v", c, err)
	}
	var n int64
	if err := db.Model(&Comment{}).Where("photo_id = ?", photo.ID).Count(&n).Error; err != nil || n == 0 {
		t.Fatalf("comments of photo %d (old 1234) on its shard: %d, %v", photo.ID, n, err)
	}
}

func mustNewID(t *testing.T, db *gorm.DB, legacyID int64) int64 {
	t.Helper()
	var m PhotoID
	if err := db.First(&m, "legacy_id = ?", legacyID).Error; err != nil {
		t.Fatal(err)
	}
	return m.ID
}

// TestAdoptingPageSQL: the per-shard SQL TestAdopting provisions is the
// page's.
func TestAdoptingPageSQL(t *testing.T) {
	page, err := os.ReadFile(filepath.Join(root, "docs/adopting.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), "```sql\n"+adoptingSQL+"```\n") {
		t.Fatalf("docs/adopting.md does not give the per-shard SQL TestAdopting runs:\n%s", adoptingSQL)
	}
}
