package plugin

import (
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
)

// TestRoutingAllocations holds the plugin's share of a statement's
// allocations (DryRun: built and routed, not sent) against plain GORM
// building the same statement: allocations, unlike times, do not move with
// the machine's load, so the bound is checked in every test run.
func TestRoutingAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("needs clusters")
	}
	e := newEnv(t, envOpts{shards: 64, serial: true})
	plain, err := gorm.Open(postgres.Open(e.def), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	sd := e.db.Session(&gorm.Session{DryRun: true, SkipDefaultTransaction: true})
	pd := plain.Session(&gorm.Session{DryRun: true, SkipDefaultTransaction: true})
	const id = int64(1) << 30 // shard 0 in the default layout
	ops := []struct {
		name   string
		sh, pl func(db *gorm.DB) error
	}{
		{"select by key", func(db *gorm.DB) error { var ps []Photo; return db.Where("user_id = ?", 42).Find(&ps).Error }, nil},
		{"select by id", func(db *gorm.DB) error { var p Photo; return db.First(&p, id).Error }, nil},
		{"select by key struct", func(db *gorm.DB) error { var ps []Photo; return db.Where(&Photo{UserID: 42}).Find(&ps).Error }, nil},
		{"update by id", func(db *gorm.DB) error {
			return db.Model(&Photo{ID: id, UserID: 64}).Update("caption", "x").Error
		}, nil},
		{"insert one", func(db *gorm.DB) error { return db.Create(&Photo{UserID: 42, Caption: "x"}).Error },
			func(db *gorm.DB) error { return db.Create(&Photo{ID: id, UserID: 42, Caption: "x"}).Error }},
	}
	for _, o := range ops {
		pl := o.pl
		if pl == nil {
			pl = o.sh
		}
		for range 20 { // warm caches (schemas, fragments, statement pools)
			if err := o.sh(sd); err != nil {
				t.Fatalf("%s: %v", o.name, err)
			}
			_ = pl(pd)
		}
		s := testing.AllocsPerRun(200, func() { _ = o.sh(sd) })
		p := testing.AllocsPerRun(200, func() { _ = pl(pd) })
		t.Logf("%s: %.0f allocs sharded, %.0f plain, +%.0f", o.name, s, p, s-p)
		if s-p > 2 {
			t.Errorf("%s: routing costs %.0f allocations, want at most 2", o.name, s-p)
		}
	}
}

// TestOneShardExecAllocations holds what a one-shard statement allocates
// when it runs (sent, its row scanned), the plugin's connection path
// included (stmtOpts, the cache of prepared statements, the socket's
// bound), against plain GORM running the same statement on one table of
// the same columns: the DryRun bound above does not reach the
// connection.
func TestOneShardExecAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("needs clusters")
	}
	e := newEnv(t, envOpts{shards: 64, serial: true, cfg: func(c *Config) { c.MaxOpenConns, c.MaxIdleConns = 1, 1 }})
	plainDSN := pgtest.NewDatabase(t, 0)
	pgtest.Exec(t, plainDSN, plainPhotosDDL)
	plain, _ := plainOnOneConn(t, plainDSN)
	var sp, pp []Photo
	for u := range int64(64) {
		sp = append(sp, Photo{UserID: u + 1, Caption: "x"})
		pp = append(pp, Photo{UserID: u + 1, Caption: "x"})
	}
	if err := e.db.Create(&sp).Error; err != nil {
		t.Fatal(err)
	}
	if err := plain.Create(&pp).Error; err != nil {
		t.Fatal(err)
	}
	ops := []struct {
		name string
		run  func(db *gorm.DB, p Photo) error
	}{
		{"select by key", func(db *gorm.DB, p Photo) error { var q Photo; return db.Where("user_id = ?", p.UserID).Take(&q).Error }},
		{"select by id", func(db *gorm.DB, p Photo) error { var q Photo; return db.First(&q, p.ID).Error }},
		{"update by id", func(db *gorm.DB, p Photo) error { return db.Model(&Photo{ID: p.ID}).Update("caption", "u").Error }},
	}
	for _, o := range ops {
		per := func(db *gorm.DB, rows []Photo) float64 {
			for _, p := range rows { // each shard's statement prepared, past Postgres's custom plans
				for range 6 {
					if err := o.run(db, p); err != nil {
						t.Fatalf("%s: %v", o.name, err)
					}
				}
			}
			i := 0
			return testing.AllocsPerRun(256, func() {
				i++
				if err := o.run(db, rows[i%len(rows)]); err != nil {
					t.Fatalf("%s: %v", o.name, err)
				}
			})
		}
		s, p := per(e.db, sp), per(plain, pp)
		t.Logf("%s: %.0f allocs sharded, %.0f plain, %+.0f", o.name, s, p, s-p)
		if s-p > 6 {
			t.Errorf("%s: a one-shard statement allocates %.0f more than plain GORM's, want at most 6", o.name, s-p)
		}
	}
}
