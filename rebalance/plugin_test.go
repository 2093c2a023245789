package rebalance

import (
	"context"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest/photos"
	"github.com/shardkit/shardkit/plugin"
	"github.com/shardkit/shardkit/router"
)

// pluginOps writes through GORM and the shardkit plugin, with IDs from
// leased slots (so the move must carry the clock, not only the sequence).
type pluginOps struct{ db *gorm.DB }

func (o pluginOps) insert(ctx context.Context, _ int, user int64, caption string) (int64, error) {
	p := photos.Photo{UserID: user, Caption: caption}
	err := o.db.WithContext(ctx).Create(&p).Error
	return p.ID, err
}

func (o pluginOps) update(ctx context.Context, _ int, user, id int64, version int) error {
	return o.db.WithContext(ctx).Model(&photos.Photo{ID: id, UserID: user}).Update("version", version).Error
}

func newPluginOps(t *testing.T, e *env, r *router.Router) pluginOps {
	t.Helper()
	return newPluginOpsWait(t, e, r, 0)
}

// newPluginOpsWait is newPluginOps with plugin.Config.FenceWait (0: default).
func newPluginOpsWait(t *testing.T, e *env, r *router.Router, fenceWait time.Duration) pluginOps {
	t.Helper()
	return pluginOps{db: newPluginDB(t, e, r, plugin.Config{FenceWait: fenceWait}, &photos.Photo{})}
}

// newPluginDB is the GORM plugin on the env for models, with cfg's
// settings, IDs from leased slots, following the map through r.
func newPluginDB(t testing.TB, e *env, r *router.Router, cfg plugin.Config, models ...any) *gorm.DB {
	t.Helper()
	gen := shardtest.Generator(t, e.cat)
	db, err := gorm.Open(postgres.Open(pgtest.NewDatabase(t, 1)), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Router, cfg.IDs = r, gen
	p := plugin.Register(cfg, models...)
	if err := db.Use(p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return db
}

// staleRouter is a router of a process of the application role that
// never reloads its map unless a statement makes it: its map is older
// than whatever the test does next.
func staleRouter(t testing.TB, e *env) *router.Router {
	t.Helper()
	ctx := context.Background()
	cat, err := catalog.Open(ctx, shardtest.AppDSN(t, e.catalogDSN))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cat.Close)
	r, err := router.New(ctx, cat)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestOnlineMoveWithPluginWriters is the acceptance test of a move: writers
// go through the GORM plugin (default fence bound) into the moving shard
// and others; nothing is lost or duplicated, no write fails, both copies
// verify equal, and the old home refuses writes after the cutover.
func TestOnlineMoveWithPluginWriters(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 2, 2, 4)
	for s := range 4 {
		seedPhotos(t, e, s, 1000)
	}
	w := newRawWriter(t, e, []int{0, 1, 2, 3})
	w.via = newPluginOps(t, e, w.r)
	mv := e.mover(t, Config{})
	stop := w.run(ctx)
	time.Sleep(300 * time.Millisecond)
	m0, err := mv.Move(ctx, 0, "s1", MoveOptions{})
	if err != nil {
		stop()
		t.Fatal(err)
	}
	m3, err := mv.Move(ctx, 3, "s0", MoveOptions{}) // the other way, while 0 is reversible
	if err != nil {
		stop()
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	stop()
	w.check(t)
	t.Logf("plugin writers: %d ops; longest write %v; fenced: shard 0 %v, shard 3 %v", w.ops, w.maxWait, m0.FencedFor, m3.FencedFor)
	for _, m := range []Move{m0, m3} {
		if _, err := mv.Verify(ctx, m.Shard); err != nil {
			t.Errorf("verify shard %d: %v", m.Shard, err)
		}
		// The old home refuses writes (the barrier) and took none after
		// the cutover: it equals the new home, which has the writer's rows.
		_, err := e.pools[m.Source].Exec(ctx, `INSERT INTO `+ident(router.SchemaName(m.Shard), "photos")+` (user_id) VALUES (0)`)
		if !router.IsFenceError(err) {
			t.Errorf("write to shard %d on its old home %s: err = %v, want the fence", m.Shard, m.Source, err)
		}
		if _, err := mv.Complete(ctx, m.Shard); err != nil {
			t.Fatal(err)
		}
	}
	if left := e.leftovers(t); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}
