package plugin

import (
	"context"
	"errors"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"
	"gorm.io/plugin/dbresolver"

	"github.com/shardkit/shardkit/internal/harness/testkit"
	"github.com/shardkit/shardkit/router"
)

// Regression tests for statements that once routed wrong without an
// error. Each names the class; the differential test (diff_test.go)
// covers the classes at random.

// seedUsers creates n photos for each user and returns them by user.
func seedUsers(t *testing.T, e *env, n int, users ...int64) map[int64][]Photo {
	t.Helper()
	by := map[int64][]Photo{}
	for _, u := range users {
		for i := 0; i < n; i++ {
			p := Photo{UserID: u, Caption: "c", Likes: i}
			if err := e.db.Create(&p).Error; err != nil {
				t.Fatal(err)
			}
			by[u] = append(by[u], p)
		}
	}
	return by
}

func TestOrReadsEveryBranch(t *testing.T) {
	e := newEnv(t, envOpts{})
	a, b := int64(3), int64(12) // shards 3 and 12: on different servers
	if e.serverOf(t, e.shardOf(a)) == e.serverOf(t, e.shardOf(b)) {
		t.Fatal("want users on two servers")
	}
	seedUsers(t, e, 2, a, b)
	tests := []struct {
		name string
		q    func() *gorm.DB
	}{
		{"Or", func() *gorm.DB { return e.db.Where("user_id = ?", a).Or("user_id = ?", b) }},
		{"grouped", func() *gorm.DB { return e.db.Where(e.db.Where("user_id = ?", a).Or("user_id = ?", b)) }},
		{"one string", func() *gorm.DB { return e.db.Where("user_id = ? OR user_id = ?", a, b) }},
		{"or inside and", func() *gorm.DB {
			return e.db.Where("likes >= ?", 0).Where(e.db.Where("user_id = ?", a).Or("user_id = ?", b))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ps []Photo
			if err := tt.q().Order("id").Find(&ps).Error; err != nil {
				t.Fatal(err)
			}
			if len(ps) != 4 {
				t.Fatalf("got %d rows, want 4 (2 of each user)", len(ps))
			}
		})
	}
	// An OR with a branch that names no shard is refused, not guessed.
	var ps []Photo
	err := e.db.Where("user_id = ?", a).Or("likes > ?", 0).Find(&ps).Error
	if !errors.Is(err, ErrMissingShardKey) {
		t.Fatalf("OR with a keyless branch: err = %v", err)
	}
	// Conditions GORM wraps oddly (an OR without the spaces GORM looks for)
	// are read as Postgres reads them.
	err = e.db.Where("user_id = ?", a).Where("id = 0 OR\nuser_id = ?", b).Find(&ps).Error
	if err != nil || len(ps) != 2 {
		t.Fatalf("OR after a newline: err %v, %d rows, want user %d's 2", err, len(ps), b)
	}
	e.defaultUntouched(t)
}

func TestNotAndExpressionsOnTheKeyAreRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	seedUsers(t, e, 1, 3)
	var ps []Photo
	for name, q := range map[string]*gorm.DB{
		"not":        e.db.Not("user_id = ?", 3),
		"expression": e.db.Where("user_id + 0 = ?", 3),
		"between":    e.db.Where("user_id BETWEEN ? AND ?", 3, 3),
		"or true":    e.db.Where("user_id = ?", 3).Or("true"),
	} {
		if err := q.Find(&ps).Error; !errors.Is(err, ErrMissingShardKey) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

func TestMergeOrdersByWhatTheRowsHold(t *testing.T) {
	e := newEnv(t, envOpts{})
	by := seedUsers(t, e, 3, 3, 12, 7)
	var small []struct {
		ID     int64
		UserID int64
	}
	// ordered by a column it does not select: each shard selects it under
	// a hidden alias (hiddenOrderKeys)
	err := e.db.Model(&Photo{}).Clauses(AllShards()).Select("id", "user_id").Order("likes desc, id").Limit(3).Find(&small).Error
	var want []Photo
	if err2 := e.db.Clauses(AllShards()).Order("likes desc, id").Limit(3).Find(&want).Error; err != nil || err2 != nil || len(small) != len(want) {
		t.Fatalf("order by an unselected column: err = %v, %v; %d rows, want %d", err, err2, len(small), len(want))
	}
	for i := range want {
		if small[i].ID != want[i].ID {
			t.Fatalf("order by an unselected column: %+v, want the IDs of %+v", small, want)
		}
	}
	// A destination smaller than the model: no panic, ordered by its field.
	err = e.db.Model(&Photo{}).Clauses(AllShards()).Order("id desc").Limit(4).Find(&small).Error
	if err != nil || len(small) != 4 {
		t.Fatalf("smaller struct: err %v, %d rows", err, len(small))
	}
	for i := 1; i < len(small); i++ {
		if small[i-1].ID < small[i].ID {
			t.Fatalf("not ordered: %+v", small)
		}
	}
	var total struct{ Total int64 }
	err = e.db.Model(&Photo{}).Clauses(AllShards()).Select("sum(likes) AS total").Scan(&total).Error
	var viaFind struct{ Total int64 }
	if werr := e.db.Model(&Photo{}).Clauses(AllShards()).Select("sum(likes) AS total").Find(&viaFind).Error; err != nil || werr != nil || total != viaFind {
		t.Fatalf("aggregate across shards scanned into a struct: err = %v, %d; Find: %v, %d", err, total.Total, werr, viaFind.Total)
	}
	_ = by
}

func TestReturningAcrossShards(t *testing.T) {
	e := newEnv(t, envOpts{})
	by := seedUsers(t, e, 2, 3, 12)
	ids := []int64{by[3][0].ID, by[12][0].ID}
	var updated []Photo
	res := e.db.Model(&updated).Clauses(clause.Returning{}).Where("id IN ?", ids).Update("caption", "r")
	if res.Error != nil || res.RowsAffected != 2 || len(updated) != 2 {
		t.Fatalf("update returning: err %v, affected %d, rows %d", res.Error, res.RowsAffected, len(updated))
	}
	var out []Photo
	res = e.db.Clauses(clause.Returning{}).Where("id IN ?", ids).Delete(&out)
	if res.Error != nil || res.RowsAffected != 2 || len(out) != 2 {
		t.Fatalf("delete returning: err %v, affected %d, rows %d", res.Error, res.RowsAffected, len(out))
	}
	for _, id := range ids {
		e.assertAbsent(t, "photos", id)
	}
}

func TestUpdateOfTheShardKeyIsRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	by := seedUsers(t, e, 1, 3)
	p := by[3][0]
	if err := e.db.Model(&p).Update("user_id", 12).Error; !errors.Is(err, ErrShardKeyChange) {
		t.Fatalf("key to another shard: err = %v", err)
	}
	if err := e.db.Model(&p).Update("id", p.ID+1).Error; !errors.Is(err, ErrShardKeyChange) {
		t.Fatalf("ID changed: err = %v", err)
	}
	if err := e.db.Model(&p).Update("user_id", gorm.Expr("user_id + 1")).Error; !errors.Is(err, ErrShardKeyChange) {
		t.Fatalf("key set to an expression: err = %v", err)
	}
	e.assertAt(t, "photos", p.ID, e.shardOf(3))
	// A key of the same shard keeps the row where its key says.
	if err := e.db.Model(&p).Update("user_id", 3+int64(e.shards)).Error; err != nil {
		t.Fatal(err)
	}
	var got Photo
	if err := e.db.Where("user_id = ?", 3+int64(e.shards)).First(&got).Error; err != nil || got.ID != p.ID {
		t.Fatalf("row by its new key: err %v id %d", err, got.ID)
	}
}

func TestCreateWithOmittedID(t *testing.T) {
	e := newEnv(t, envOpts{})
	p := Photo{UserID: 5, Caption: "omit"}
	if err := e.db.Omit("id").Create(&p).Error; err != nil {
		t.Fatal(err)
	}
	if p.ID == 0 {
		t.Fatal("no ID read back")
	}
	e.assertAt(t, "photos", p.ID, e.shardOf(5))
	q := Photo{UserID: 5}
	if err := e.db.Omit("user_id").Create(&q).Error; !errors.Is(err, ErrUnroutableSQL) {
		t.Fatalf("Create without the key column: err = %v", err)
	}
}

func TestPrepareStmt(t *testing.T) {
	e := newEnv(t, envOpts{})
	// In a session, with a transaction.
	s := e.db.Session(&gorm.Session{PrepareStmt: true})
	var p Photo
	err := s.Transaction(func(tx *gorm.DB) error {
		p = Photo{UserID: 9, Caption: "prepared"}
		return tx.Create(&p).Error
	})
	if err != nil {
		t.Fatal(err)
	}
	e.assertAt(t, "photos", p.ID, e.shardOf(9))
	var got Photo
	if err := s.Where("user_id = ?", 9).First(&got).Error; err != nil || got.ID != p.ID {
		t.Fatalf("read: err %v", err)
	}
	// In gorm.Config.
	db := e.openDB(t, &gorm.Config{PrepareStmt: true})
	q := Photo{UserID: 9}
	if err := db.Create(&q).Error; err != nil {
		t.Fatal(err)
	}
	e.assertAt(t, "photos", q.ID, e.shardOf(9))
}

func TestDBResolverRegisteredFirst(t *testing.T) {
	e := newEnv(t, envOpts{})
	db, err := gorm.Open(postgres.Open(e.def), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Use(dbresolver.Register(dbresolver.Config{})); err != nil {
		t.Fatal(err)
	}
	pl := Register(Config{Router: e.r, IDs: e.gen}, &Photo{}, &Like{})
	if err := db.Use(pl); err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	p := Photo{UserID: 4}
	if err := db.Create(&p).Error; err != nil {
		t.Fatal(err)
	}
	if err := db.Model(&p).Update("caption", "x").Error; err != nil {
		t.Fatal(err)
	}
	e.assertAt(t, "photos", p.ID, e.shardOf(4))
}

func TestFailedInitializeIsLoud(t *testing.T) {
	e := newEnv(t, envOpts{})
	db, err := gorm.Open(postgres.Open(e.def), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	type Orphan struct {
		ID     int64
		UserID int64 `shard:"key"`
	}
	// The per-shard SQL creates no "orphans" table: Use fails, naming it.
	err = db.Use(Register(Config{Router: e.r}, &Orphan{}))
	if !errors.Is(err, ErrInvalidModel) {
		t.Fatalf("model without a table: err = %v", err)
	}
	// A caller who ignored that error gets it on every statement.
	var n int64
	err = db.Raw("SELECT 1").Scan(&n).Error
	if !errors.Is(err, ErrNotInitialized) || !errors.Is(err, ErrInvalidModel) {
		t.Fatalf("statement after a failed Use: err = %v", err)
	}
}

func TestSubqueries(t *testing.T) {
	e := newEnv(t, envOpts{})
	by := seedUsers(t, e, 2, 3, 12)
	same := e.db.Model(&Photo{}).Select("id").Where("user_id = ?", 3)
	var ps []Photo
	if err := e.db.Where("user_id = ?", 3).Where("id IN (?)", same).Find(&ps).Error; err != nil || len(ps) != 2 {
		t.Fatalf("same-shard sub-query: err %v rows %d", err, len(ps))
	}
	other := e.db.Model(&Photo{}).Select("id").Where("user_id = ?", 12)
	if err := e.db.Where("user_id = ?", 3).Where("id IN (?)", other).Find(&ps).Error; !errors.Is(err, ErrUnroutableSQL) {
		t.Fatalf("other-shard sub-query: err = %v", err)
	}
	if err := e.db.Where("id IN (?)", other).Find(&ps).Error; !errors.Is(err, ErrMissingShardKey) && !errors.Is(err, ErrUnroutableSQL) {
		t.Fatalf("sub-query as the only condition: err = %v", err)
	}
	var n int64
	if err := e.db.Table("numbers").Where("n IN (?)", other).Count(&n).Error; !errors.Is(err, ErrUnroutableSQL) {
		t.Fatalf("sharded sub-query in an unsharded statement: err = %v", err)
	}
	_ = by
}

func TestTableExpressions(t *testing.T) {
	e := newEnv(t, envOpts{})
	by := seedUsers(t, e, 1, 3)
	var ps []Photo
	if err := e.db.Table("photos").Where("user_id = ?", 3).Find(&ps).Error; err != nil || len(ps) != 1 {
		t.Fatalf("Table(photos): err %v rows %d", err, len(ps))
	}
	// A schema that disagrees with the conditions names no shard.
	if err := e.db.Table(router.SchemaName(12)+".photos").Where("user_id = ?", 3).Find(&ps).Error; err == nil && len(ps) != 0 {
		t.Fatalf("Table(shard_0012.photos) with user 3: rows %d", len(ps))
	}
	if err := e.db.Table("photos AS p").Where("p.user_id = ?", 3).Find(&ps).Error; !errors.Is(err, ErrUnroutableSQL) {
		t.Fatalf("aliased table: err = %v", err)
	}
	_ = by
}

// TestFenceInTransactionTakesTheNewHome: a write in a user transaction
// waits out a fence that ends with the shard on another server; the
// transaction must begin on the new home (the routing decision's
// placement after the wait), not on the old one, whose barrier would
// refuse it.
func TestFenceInTransactionTakesTheNewHome(t *testing.T) {
	e := newEnv(t, envOpts{cfg: func(c *Config) { c.FenceWait = time.Minute }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = e.r.Watch(ctx) }()
	user := int64(3)
	shard := e.shardOf(user)
	home := e.serverOf(t, shard)
	e.setShard(t, shard, home, router.StateFenced)
	testkit.Eventually(t, testkit.Wait, func() bool { pl, _ := e.r.Snapshot().Placement(shard); return pl.State == router.StateFenced })
	var p Photo
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- e.db.Transaction(func(tx *gorm.DB) error {
			p = Photo{UserID: user, Caption: "after the move"}
			close(started)
			return tx.Create(&p).Error
		})
	}()
	<-started
	select {
	case err := <-done:
		t.Fatalf("the write did not wait for the fence: %v", err)
	case <-time.After(50 * time.Millisecond): // a slow start only weakens the test
	}
	_, to := e.moveByHand(t, shard, photoTables...)
	if err := <-done; err != nil {
		t.Fatalf("transaction across the flip: %v", err)
	}
	if got := e.locate(t, "photos", p.ID); len(got) != 1 || got[0] != to+"/"+router.SchemaName(shard) {
		t.Fatalf("row at %v, want on %s", got, to)
	}
}

// TestMultiShardWriteFailsWhole: a write to several shards outside a
// transaction that fails on one shard leaves every shard unchanged, as
// plain GORM's one statement would (found by the differential test).
func TestMultiShardWriteFailsWhole(t *testing.T) {
	e := newEnv(t, envOpts{})
	by := seedUsers(t, e, 1, 12)
	taken := by[12][0]
	fresh := Photo{UserID: 3, Caption: "new"}
	dup := Photo{ID: taken.ID, UserID: 12, Caption: "dup"}
	rows := []*Photo{&fresh, &dup}
	err := e.db.Session(&gormSkipTx).Create(rows).Error
	if err == nil {
		t.Fatal("duplicate ID accepted")
	}
	if fresh.ID != 0 {
		e.assertAbsent(t, "photos", fresh.ID)
	}
	var n int64
	if err := e.db.Model(&Photo{}).Where("user_id = ?", 3).Count(&n).Error; err != nil || n != 0 {
		t.Fatalf("user 3 has %d rows after the failed Create (err %v)", n, err)
	}
	// Update across shards that fails on one shard: no shard updated.
	p := Photo{UserID: 3, Caption: "p"}
	if err := e.db.Create(&p).Error; err != nil {
		t.Fatal(err)
	}
	err = e.db.Session(&gormSkipTx).Model(&Photo{}).Where("id IN ?", []int64{p.ID, taken.ID}).
		Update("likes", gorm.Expr("CASE WHEN user_id = 12 THEN 1/0 ELSE 1 END")).Error
	if err == nil {
		t.Fatal("division by zero accepted")
	}
	if c, _ := e.caption(t, p); c != "p" {
		t.Fatalf("caption %q", c)
	}
	var got Photo
	if err := e.db.First(&got, p.ID).Error; err != nil || got.Likes != 0 {
		t.Fatalf("likes %d after a failed update across shards (err %v)", got.Likes, err)
	}
}

// Account is keyed by its own ID: a new account's shard comes from the
// statement's scope or pinned transaction.
type Account struct {
	ID   int64 `gorm:"primaryKey;autoIncrement:false" shard:"id"`
	Name string
}

func TestCreateKeyedByOwnID(t *testing.T) {
	for _, noIDs := range []bool{false, true} {
		t.Run(map[bool]string{false: "ID from the generator", true: "ID from next_id()"}[noIDs], func(t *testing.T) {
			e := newEnv(t, envOpts{noIDs: noIDs})
			a := Account{Name: "a"}
			if err := e.db.Clauses(Shard(int64(5))).Create(&a).Error; err != nil {
				t.Fatal(err)
			}
			e.assertAt(t, "accounts", a.ID, 5)
			var b Account
			err := e.db.Clauses(Shard(int64(9))).Transaction(func(tx *gorm.DB) error {
				b = Account{Name: "b"}
				return tx.Create(&b).Error
			})
			if err != nil {
				t.Fatal(err)
			}
			e.assertAt(t, "accounts", b.ID, 9)
			if err := e.db.Create(&Account{Name: "nowhere"}).Error; !errors.Is(err, ErrMissingShardKey) {
				t.Fatalf("no scope: err = %v", err)
			}
		})
	}
}
