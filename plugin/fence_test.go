package plugin

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest"
	"github.com/shardkit/shardkit/internal/harness/testkit"
	"github.com/shardkit/shardkit/internal/shardschema"
	"github.com/shardkit/shardkit/router"
)

// setShard changes one shard's row of the map in the catalog.
func (e *env) setShard(t *testing.T, shard int, server string, state router.ShardState) {
	t.Helper()
	shardtest.PlaceShard(t, e.cat, shard, server, state)
}

func TestFencedShardWaitsThenFails(t *testing.T) {
	e := newEnv(t, envOpts{cfg: func(c *Config) { c.FenceWait = 300 * time.Millisecond }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = e.r.Watch(ctx) }()
	user := int64(5)
	shard := e.shardOf(user)
	home := e.serverOf(t, shard)
	p := Photo{UserID: user}
	if err := e.db.Create(&p).Error; err != nil {
		t.Fatal(err)
	}
	e.setShard(t, shard, home, router.StateFenced)
	testkit.Eventually(t, testkit.Wait, func() bool { pl, _ := e.r.Snapshot().Placement(shard); return pl.State == router.StateFenced })

	start := time.Now()
	err := e.db.Create(&Photo{UserID: user}).Error
	if !errors.Is(err, ErrShardFenced) || time.Since(start) < 250*time.Millisecond {
		t.Fatalf("err = %v after %v, want ErrShardFenced after ~300ms", err, time.Since(start))
	}
	if err := e.db.Model(&p).Update("caption", "x").Error; !errors.Is(err, ErrShardFenced) {
		t.Fatalf("update: err = %v", err)
	}
	// Reads go on.
	var got Photo
	if err := e.db.First(&got, p.ID).Error; err != nil {
		t.Fatal(err)
	}
	// Other shards take writes.
	if err := e.db.Create(&Photo{UserID: user + 1}).Error; err != nil {
		t.Fatal(err)
	}
	// A write that starts fenced goes through as soon as the router
	// installs the unfenced map, not at the end of FenceWait. On a plugin
	// that waits up to a minute, so that no load on the machine ends the
	// wait first; the unfence starts once the write is being routed, and
	// the route's record says whether the write did wait (if the unfence
	// won the race, it did not, and the round is run again).
	cfg := Config{Router: e.r, IDs: e.gen, FenceWait: time.Minute}
	long, err := gorm.Open(postgres.New(postgres.Config{Conn: e.defPool}), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	lp := Register(cfg, &Photo{})
	if err := long.Use(lp); err != nil {
		t.Fatal(err)
	}
	defer lp.Close()
	lp.Observe()
	var (
		routing chan struct{}
		waited  time.Duration
	)
	if err := long.Callback().Create().Before("shardkit:route").Register("test:routing", func(*gorm.DB) { close(routing) }); err != nil {
		t.Fatal(err)
	}
	if err := long.Callback().Create().After("shardkit:route").Register("test:routed", func(db *gorm.DB) {
		if info, ok := Routed(db.Statement); ok {
			waited = info.FenceWait
		}
	}); err != nil {
		t.Fatal(err)
	}
	for round := 1; ; round++ {
		e.setShard(t, shard, home, router.StateFenced)
		testkit.Eventually(t, testkit.Wait, func() bool { pl, _ := e.r.Snapshot().Placement(shard); return pl.State == router.StateFenced })
		routing = make(chan struct{})
		changed, stop := e.r.Subscribe()
		unfenced := make(chan time.Time, 1)
		go func() {
			<-routing
			e.setShard(t, shard, home, router.StateActive)
			for s := range changed {
				if pl, _ := s.Placement(shard); pl.State == router.StateActive {
					unfenced <- time.Now()
					return
				}
			}
		}()
		q := Photo{UserID: user}
		if err := long.Create(&q).Error; err != nil {
			t.Fatalf("write after unfence: %v", err)
		}
		done := time.Now()
		at := <-unfenced
		stop()
		e.assertAt(t, "photos", q.ID, shard)
		if waited == 0 && round < 5 {
			continue // routed before the fence was seen: not the case under test
		}
		if waited == 0 {
			t.Fatal("in 5 rounds no write waited for the fence")
		}
		if lag := done.Sub(at); lag > 10*time.Second || waited > 30*time.Second {
			t.Fatalf("the fenced write went on %v after the map was unfenced (waited %v of a %v FenceWait)", lag, waited, cfg.FenceWait)
		}
		t.Logf("round %d: waited %v, went on %v after the map was unfenced", round, waited, done.Sub(at))
		return
	}
}

// otherServer names the test env's server that is not s (the env has a
// and b).
func otherServer(s string) string {
	if s == "a" {
		return "b"
	}
	return "a"
}

// staleOn leaves the router (not watching) with a map that places shard
// on stale while the catalog places it on home: a router that has not yet
// heard of a flip.
func (e *env) staleOn(t *testing.T, shard int, stale, home string) {
	t.Helper()
	e.setShard(t, shard, stale, router.StateActive)
	if _, err := e.r.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.setShard(t, shard, home, router.StateActive)
	if e.serverOf(t, shard) != stale {
		t.Fatal("the router knows the new map already")
	}
}

// photoTables are the tables moveByHand carries for the photos model.
var photoTables = []string{"photos", "likes"}

// moveByHand moves a shard to the other server the way the mover's cutover
// leaves it: schema and the named tables' rows on the target (a schema the
// target kept from an earlier move is replaced), the source's write
// barrier (SQLSTATE router.FenceSQLState) installed on those tables, the
// map flipped. The router is not told, so it holds a stale map.
func (e *env) moveByHand(t *testing.T, shard int, tables ...string) (from, to string) {
	t.Helper()
	ctx := context.Background()
	from = e.serverOf(t, shard)
	to = otherServer(from)
	schema := router.SchemaName(shard)
	dst := pgtest.Connect(t, e.dsn[to])
	if err := shardschema.DropShard(ctx, dst, shard); err != nil {
		t.Fatal(err)
	}
	if err := shardschema.ApplyShard(ctx, dst, e.r.Snapshot().Layout, shard, testSQL, shardschema.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	src := pgtest.Connect(t, e.dsn[from])
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

func TestMovedShardRetriesOnNewHome(t *testing.T) {
	e := newEnv(t, envOpts{})
	user := int64(3)
	shard := e.shardOf(user)
	p := Photo{UserID: user, Caption: "before"}
	if err := e.db.Create(&p).Error; err != nil {
		t.Fatal(err)
	}
	from, to := e.moveByHand(t, shard, photoTables...)
	if pl, _ := e.r.Snapshot().Placement(shard); pl.Server != from {
		t.Fatal("router already knows the new map")
	}
	// Inside a transaction: a typed, retriable error.
	err := e.db.Clauses(Shard(user)).Transaction(func(tx *gorm.DB) error {
		return tx.Create(&Photo{UserID: user}).Error
	})
	if !errors.Is(err, ErrShardMoved) {
		t.Fatalf("in a transaction: err = %v, want ErrShardMoved", err)
	}
	var se *ShardError
	if !errors.As(err, &se) || se.Server != from {
		t.Fatalf("err %v does not name the old server %s", err, from)
	}
	// The refusal made the router reload.
	if pl, _ := e.r.Snapshot().Placement(shard); pl.Server != to {
		t.Fatalf("router did not reload: shard on %s", pl.Server)
	}
}

func TestMovedShardRetriesOnceOutsideTransaction(t *testing.T) {
	e := newEnv(t, envOpts{})
	user := int64(3)
	shard := e.shardOf(user)
	p := Photo{UserID: user, Caption: "before"}
	if err := e.db.Create(&p).Error; err != nil {
		t.Fatal(err)
	}
	from, to := e.moveByHand(t, shard, photoTables...)
	if e.serverOf(t, shard) != from {
		t.Fatal("router already knows the new map; the retry would not be exercised")
	}
	q := Photo{UserID: user, Caption: "after"}
	if err := e.db.Create(&q).Error; err != nil {
		t.Fatalf("create with a stale map: %v", err)
	}
	e.assertAt(t, "photos", q.ID, shard)
	if e.serverOf(t, shard) != to {
		t.Fatal("map not reloaded")
	}
	if got := e.locate(t, "photos", q.ID); len(got) != 1 || got[0] != to+"/"+router.SchemaName(shard) {
		t.Fatalf("new row at %v", got)
	}
	// Update of the row copied over works on the new home too.
	if err := e.db.Model(&p).Update("caption", "moved").Error; err != nil {
		t.Fatal(err)
	}
	if c, _ := e.caption(t, p); c != "moved" {
		t.Fatalf("caption %q", c)
	}
}

// TestWriteAfterARollbackDroppedTheSchema: a rollback flips the shard back
// to its old home and then drops the copy it leaves, which has no fence
// left to refuse a write. A writer whose map still names that server gets
// "relation does not exist" there; the statement did nothing, and the
// plugin runs it again on the shard's home in the reloaded map, as it does
// for a write the fence refused. Where the map does not move the shard, a
// missing table is the error it is.
func TestWriteAfterARollbackDroppedTheSchema(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, envOpts{})
	const user = 7
	shard := e.shardOf(user)
	home := e.serverOf(t, shard)
	other := otherServer(home)
	// The router (not watching) holds the shard on other, where the
	// rolled-back copy was; the catalog has it back home, and the copy is
	// gone.
	e.staleOn(t, shard, other, home)
	if err := shardschema.DropShard(ctx, pgtest.Connect(t, e.dsn[other]), shard); err != nil {
		t.Fatal(err)
	}
	db := e.db.Session(&gorm.Session{SkipDefaultTransaction: true})
	p := Photo{UserID: user, Caption: "after the rollback"}
	if err := db.Create(&p).Error; err != nil {
		t.Fatalf("write with a stale map after the copy was dropped: %v", err)
	}
	e.assertAt(t, "photos", p.ID, shard)
	if got := e.serverOf(t, shard); got != home {
		t.Fatalf("router map has shard %d on %s, want %s", shard, got, home)
	}
	if err := db.Model(&p).Update("caption", "again").Error; err != nil {
		t.Fatal(err)
	}

	// Reads with the stale map again: by the shard key and by ID.
	for _, read := range []struct {
		name string
		run  func(*[]Photo) error
	}{
		{"by user", func(got *[]Photo) error { return db.Where("user_id = ?", user).Find(got).Error }},
		{"by id", func(got *[]Photo) error { return db.Where("id = ?", p.ID).Find(got).Error }},
	} {
		e.staleOn(t, shard, other, home)
		var got []Photo
		if err := read.run(&got); err != nil || len(got) != 1 || got[0].ID != p.ID || got[0].Caption != "again" {
			t.Fatalf("read %s with a stale map after the copy was dropped: %+v, %v", read.name, got, err)
		}
	}

	// A table missing where the map still puts the shard: the error.
	if err := shardschema.DropShard(ctx, pgtest.Connect(t, e.dsn[home]), shard); err != nil {
		t.Fatal(err)
	}
	err := db.Create(&Photo{UserID: user}).Error
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42P01" {
		t.Fatalf("write to a dropped shard on its home: %v, want relation does not exist", err)
	}
	err = db.Where("user_id = ?", user).Find(&[]Photo{}).Error
	if !errors.As(err, &pe) || pe.Code != "42P01" {
		t.Fatalf("read of a dropped shard on its home: %v, want relation does not exist", err)
	}
}
