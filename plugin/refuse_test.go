package plugin

import (
	"errors"
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

func TestMissingShardKeyEveryOperation(t *testing.T) {
	e := newEnv(t, envOpts{})
	seed(t, e, []int64{1}, 1)
	e.defPool.calls.Store(0)
	db := e.db
	var p Photo
	var ps []Photo
	var n int64
	var col []int64
	cases := []struct {
		name string
		run  func() error
		want error
	}{
		{"create zero key", func() error { return db.Create(&Photo{Caption: "x"}).Error }, ErrMissingShardKey},
		{"create slice with a zero key", func() error { return db.Create(&[]Photo{{UserID: 1}, {}}).Error }, ErrMissingShardKey},
		{"create in batches", func() error { return db.CreateInBatches(&[]Photo{{UserID: 1}, {}, {UserID: 2}}, 2).Error }, ErrMissingShardKey},
		{"first", func() error { return db.First(&p).Error }, ErrMissingShardKey},
		{"take", func() error { return db.Take(&p).Error }, ErrMissingShardKey},
		{"last", func() error { return db.Last(&p).Error }, ErrMissingShardKey},
		{"find", func() error { return db.Find(&ps).Error }, ErrMissingShardKey},
		{"find by other column", func() error { return db.Where("caption = ?", "seed").Find(&ps).Error }, ErrMissingShardKey},
		{"find with OR", func() error { return db.Where("user_id = ? OR caption = ?", 1, "x").Find(&ps).Error }, ErrMissingShardKey},
		{"find by struct without key", func() error { return db.Where(&Photo{Caption: "seed"}).Find(&ps).Error }, ErrMissingShardKey},
		{"count", func() error { return db.Model(&Photo{}).Count(&n).Error }, ErrMissingShardKey},
		{"pluck", func() error { return db.Model(&Photo{}).Pluck("id", &col).Error }, ErrMissingShardKey},
		{"scan", func() error { return db.Model(&Photo{}).Scan(&ps).Error }, ErrMissingShardKey},
		{"rows", func() error { _, err := db.Model(&Photo{}).Rows(); return err }, ErrMissingShardKey},
		{"row", func() error { return db.Model(&Photo{}).Select("count(*)").Row().Scan(&n) }, ErrMissingShardKey},
		{"update", func() error { return db.Model(&Photo{}).Where("caption = ?", "seed").Update("caption", "y").Error }, ErrMissingShardKey},
		{"updates", func() error {
			return db.Session(&gorm.Session{AllowGlobalUpdate: true}).Model(&Photo{}).Updates(map[string]any{"caption": "y"}).Error
		}, ErrMissingShardKey},
		{"update column", func() error { return db.Model(&Photo{}).Where("likes = 0").UpdateColumn("likes", 1).Error }, ErrMissingShardKey},
		{"update columns", func() error {
			return db.Model(&Photo{}).Where("likes = 0").UpdateColumns(Photo{Likes: 2}).Error
		}, ErrMissingShardKey},
		{"save without key", func() error { return db.Save(&Photo{Caption: "s"}).Error }, ErrMissingShardKey},
		{"delete", func() error { return db.Where("caption = ?", "seed").Delete(&Photo{}).Error }, ErrMissingShardKey},
		{"delete all", func() error {
			return db.Session(&gorm.Session{AllowGlobalUpdate: true}).Delete(&Photo{}).Error
		}, ErrMissingShardKey},
		{"like without photo", func() error { return db.Create(&Like{UserID: 3}).Error }, ErrMissingShardKey},
		{"raw query", func() error { return db.Raw("SELECT * FROM photos").Scan(&ps).Error }, ErrUnroutableSQL},
		{"raw find", func() error { return db.Raw("SELECT * FROM photos WHERE user_id = ?", 1).Find(&ps).Error }, ErrUnroutableSQL},
		{"exec", func() error { return db.Exec(`DELETE FROM "photos"`).Error }, ErrUnroutableSQL},
		{"qualified table name", func() error { return db.Table("photos_old").Find(&ps).Error }, ErrUnroutableSQL},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.run()
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
		})
	}
	e.defaultUntouched(t)
}

func TestUnregisteredTablePassesThrough(t *testing.T) {
	e := newEnv(t, envOpts{})
	type Setting struct {
		ID    int64
		Value string
	}
	if err := e.db.AutoMigrate(&Setting{}); err != nil {
		t.Fatal(err)
	}
	if err := e.db.Create(&Setting{Value: "v"}).Error; err != nil {
		t.Fatal(err)
	}
	var s Setting
	if err := e.db.First(&s).Error; err != nil || s.Value != "v" {
		t.Fatalf("err %v %+v", err, s)
	}
	if e.defPool.calls.Load() == 0 {
		t.Fatal("unsharded statements did not use the default connection")
	}
}

func TestPinnedTransaction(t *testing.T) {
	e := newEnv(t, envOpts{})
	db := e.db
	var made Photo
	err := db.Clauses(Shard(int64(6))).Transaction(func(tx *gorm.DB) error {
		made = Photo{UserID: 6, Caption: "in tx"}
		if err := tx.Create(&made).Error; err != nil {
			return err
		}
		// Raw SQL sees the shard's schema through search_path.
		var n int64
		if err := tx.Raw("SELECT count(*) FROM photos WHERE user_id = ?", 6).Scan(&n).Error; err != nil || n != 1 {
			t.Fatalf("raw in tx: err %v n %d", err, n)
		}
		if err := tx.Exec("UPDATE photos SET likes = likes + 1 WHERE id = ?", made.ID).Error; err != nil {
			return err
		}
		// A statement without a key runs on the pinned shard.
		var ps []Photo
		if err := tx.Where("caption = ?", "in tx").Find(&ps).Error; err != nil || len(ps) != 1 || ps[0].Likes != 1 {
			t.Fatalf("keyless find in tx: err %v rows %+v", err, ps)
		}
		// Another shard is refused.
		err := tx.Create(&Photo{UserID: 7}).Error
		if !errors.Is(err, ErrCrossShard) {
			t.Fatalf("cross-shard create: err = %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e.assertAt(t, "photos", made.ID, e.shardOf(6))
	if _, likes := e.caption(t, made); likes != 1 {
		t.Fatalf("likes %d", likes)
	}

	// Rolled back: nothing stays.
	var gone Photo
	_ = db.Clauses(Shard(int64(6))).Transaction(func(tx *gorm.DB) error {
		gone = Photo{UserID: 6}
		if err := tx.Create(&gone).Error; err != nil {
			t.Fatal(err)
		}
		return errors.New("roll back")
	})
	e.assertAbsent(t, "photos", gone.ID)

	// An unpinned transaction pins itself to its first shard.
	err = db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&Photo{UserID: 8}).Error; err != nil {
			return err
		}
		if err := tx.Create(&Photo{UserID: 9}).Error; !errors.Is(err, ErrCrossShard) {
			t.Fatalf("second shard: err = %v", err)
		}
		return tx.Create(&Photo{UserID: 8 + int64(e.shards)}).Error
	})
	if err != nil {
		t.Fatal(err)
	}
	// Raw SQL outside a pinned transaction is refused even with a scope.
	if err := db.Clauses(Shard(int64(6))).Exec("DELETE FROM photos").Error; !errors.Is(err, ErrUnroutableSQL) {
		t.Fatalf("raw with scope: err = %v", err)
	}
	e.defaultUntouched(t)
}

func TestSetupErrors(t *testing.T) {
	e := newEnv(t, envOpts{})
	db, err := gorm.Open(postgres.Open(e.def), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Use(Register(Config{}, &Photo{})); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("nil router: err = %v", err)
	}
	type NoKey struct{ ID int64 }
	fresh, err := gorm.Open(postgres.Open(e.def), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	if err := fresh.Use(Register(Config{Router: e.r}, &NoKey{})); !errors.Is(err, ErrInvalidModel) {
		t.Fatalf("model without shard tag: err = %v", err)
	}
}

func TestNestedTransactionInShard(t *testing.T) {
	e := newEnv(t, envOpts{})
	var kept, undone Photo
	err := e.db.Clauses(Shard(int64(6))).Transaction(func(tx *gorm.DB) error {
		kept = Photo{UserID: 6, Caption: "outer"}
		if err := tx.Create(&kept).Error; err != nil {
			return err
		}
		inner := tx.Transaction(func(tx2 *gorm.DB) error {
			undone = Photo{UserID: 6, Caption: "inner"}
			if err := tx2.Create(&undone).Error; err != nil {
				return err
			}
			return errors.New("undo the inner part")
		})
		if inner == nil {
			t.Fatal("inner transaction did not fail")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e.assertAt(t, "photos", kept.ID, e.shardOf(6))
	e.assertAbsent(t, "photos", undone.ID)

	// A savepoint taken before the transaction's first statement.
	err = e.db.Transaction(func(tx *gorm.DB) error {
		_ = tx.Transaction(func(tx2 *gorm.DB) error {
			undone = Photo{UserID: 7}
			if err := tx2.Create(&undone).Error; err != nil {
				t.Fatal(err)
			}
			return errors.New("undo")
		})
		kept = Photo{UserID: 7}
		return tx.Create(&kept).Error
	})
	if err != nil {
		t.Fatal(err)
	}
	e.assertAt(t, "photos", kept.ID, e.shardOf(7))
	e.assertAbsent(t, "photos", undone.ID)
	e.defaultUntouched(t)
}
