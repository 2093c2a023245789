package plugin

import (
	"testing"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Album is a model with soft delete.
type Album struct {
	ID        int64
	UserID    int64 `shard:"key"`
	Title     string
	DeletedAt gorm.DeletedAt
}

// TestGORMCompatibility runs the GORM APIs the README's compatibility
// table says work, each checked against the rows with direct SQL where it
// writes.
func TestGORMCompatibility(t *testing.T) {
	e := newEnv(t, envOpts{})
	user := int64(7)
	shard := e.shardOf(user)
	p := Photo{UserID: user, Caption: "c"}
	if err := e.db.Create(&p).Error; err != nil {
		t.Fatal(err)
	}
	t.Run("association", func(t *testing.T) {
		l := Like{UserID: 1}
		if err := e.db.Model(&p).Association("LikeRows").Append(&l); err != nil {
			t.Fatal(err)
		}
		e.assertAt(t, "likes", l.ID, shard)
		if n := e.db.Model(&p).Association("LikeRows").Count(); n != 1 {
			t.Fatalf("count %d", n)
		}
		var ls []Like
		if err := e.db.Model(&p).Association("LikeRows").Find(&ls); err != nil || len(ls) != 1 {
			t.Fatalf("find: %v %d", err, len(ls))
		}
	})
	t.Run("soft delete", func(t *testing.T) {
		a := Album{UserID: user, Title: "a"}
		if err := e.db.Create(&a).Error; err != nil {
			t.Fatal(err)
		}
		if err := e.db.Delete(&a).Error; err != nil {
			t.Fatal(err)
		}
		e.assertAt(t, "albums", a.ID, shard) // still there, marked deleted
		var got []Album
		if err := e.db.Where("user_id = ?", user).Find(&got).Error; err != nil || len(got) != 0 {
			t.Fatalf("soft-deleted row found: %v %d", err, len(got))
		}
		if err := e.db.Unscoped().Where("user_id = ?", user).Find(&got).Error; err != nil || len(got) != 1 {
			t.Fatalf("unscoped: %v %d", err, len(got))
		}
	})
	t.Run("first or create", func(t *testing.T) {
		var q Photo
		if err := e.db.Where(Photo{UserID: user + 1, Caption: "foc"}).FirstOrCreate(&q).Error; err != nil {
			t.Fatal(err)
		}
		e.assertAt(t, "photos", q.ID, e.shardOf(user+1))
		var again Photo
		if err := e.db.Where(Photo{UserID: user + 1, Caption: "foc"}).FirstOrCreate(&again).Error; err != nil || again.ID != q.ID {
			t.Fatalf("second FirstOrCreate: %v id %d, want %d", err, again.ID, q.ID)
		}
	})
	t.Run("find in batches", func(t *testing.T) {
		for i := 0; i < 5; i++ {
			if err := e.db.Create(&Photo{UserID: user}).Error; err != nil {
				t.Fatal(err)
			}
		}
		var n int
		var batch []Photo
		err := e.db.Where("user_id = ?", user).FindInBatches(&batch, 2, func(tx *gorm.DB, _ int) error {
			n += len(batch)
			return nil
		}).Error
		if err != nil || n != 6 {
			t.Fatalf("batches: %v, %d rows", err, n)
		}
	})
	t.Run("scopes", func(t *testing.T) {
		of := func(u int64) func(*gorm.DB) *gorm.DB {
			return func(db *gorm.DB) *gorm.DB { return db.Where("user_id = ?", u) }
		}
		var n int64
		if err := e.db.Model(&Photo{}).Scopes(of(user)).Count(&n).Error; err != nil || n != 6 {
			t.Fatalf("scoped count: %v %d", err, n)
		}
	})
	t.Run("savepoint", func(t *testing.T) {
		var kept, undone Photo
		err := e.db.Clauses(Shard(user)).Transaction(func(tx *gorm.DB) error {
			kept = Photo{UserID: user, Caption: "kept"}
			if err := tx.Create(&kept).Error; err != nil {
				return err
			}
			tx.SavePoint("sp")
			undone = Photo{UserID: user, Caption: "undone"}
			if err := tx.Create(&undone).Error; err != nil {
				return err
			}
			return tx.RollbackTo("sp").Error
		})
		if err != nil {
			t.Fatal(err)
		}
		e.assertAt(t, "photos", kept.ID, shard)
		e.assertAbsent(t, "photos", undone.ID)
	})
	t.Run("on conflict", func(t *testing.T) {
		q := Photo{ID: p.ID, UserID: user, Caption: "upserted"}
		if err := e.db.Clauses(clause.OnConflict{UpdateAll: true}).Create(&q).Error; err != nil {
			t.Fatal(err)
		}
		if c, _ := e.caption(t, p); c != "upserted" {
			t.Fatalf("caption %q", c)
		}
	})
	t.Run("group across shards", func(t *testing.T) {
		var rows []map[string]any
		err := e.db.Model(&Photo{}).Clauses(AllShards()).Select("user_id, count(*) AS n").Group("user_id").Find(&rows).Error
		if err != nil || len(rows) == 0 {
			t.Fatalf("group across shards: %v %v", err, rows)
		}
		var having []map[string]any
		err = e.db.Model(&Photo{}).Clauses(AllShards()).Select("user_id, count(*) AS n").Group("user_id").Having("count(*) > 1").Find(&having).Error
		if err != nil {
			t.Fatalf("having across shards: err = %v", err)
		}
		for _, r := range having {
			if n, _ := r["n"].(int64); n <= 1 {
				t.Fatalf("having across shards: row %v", r)
			}
		}
		rows = nil // Find appends to a slice of maps
		if err := e.db.Model(&Photo{}).Where("user_id = ?", user).Select("user_id, count(*) AS n").Group("user_id").Find(&rows).Error; err != nil || len(rows) != 1 {
			t.Fatalf("group in one shard: %v %v", err, rows)
		}
	})
	e.defaultUntouched(t)
}
