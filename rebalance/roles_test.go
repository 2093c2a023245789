package rebalance

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest/photos"
	"github.com/shardkit/shardkit/internal/harness/testkit"
	"github.com/shardkit/shardkit/plugin"
	"github.com/shardkit/shardkit/router"
)

// isInsufficientPrivilege reports Postgres's 42501.
func isInsufficientPrivilege(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42501"
}

// TestAppRoleOnTheCatalog: the application role reads the map and the
// servers, leases ID slots, and is refused the servers' admin DSNs and
// any write to the shard map.
func TestAppRoleOnTheCatalog(t *testing.T) {
	ctx := context.Background()
	e := newAppEnv(t, 2, 2, 4)
	app := pgtest.Connect(t, shardtest.AppDSN(t, e.catalogDSN))
	var super bool
	if err := app.QueryRow(ctx, `SELECT rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&super); err != nil || super {
		t.Fatalf("the app login is a superuser (%v, err %v)", super, err)
	}
	var n int
	if err := app.QueryRow(ctx, `SELECT count(*) FROM shardkit.shard_map`).Scan(&n); err != nil || n != 4 {
		t.Fatalf("app reads the map: %d rows, err %v", n, err)
	}
	if err := app.QueryRow(ctx, `SELECT count(dsn) FROM shardkit.servers`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("app reads the servers' DSNs: %d, err %v", n, err)
	}
	var s string
	if err := app.QueryRow(ctx, `SELECT coalesce(admin_dsn, '') FROM shardkit.servers LIMIT 1`).Scan(&s); !isInsufficientPrivilege(err) {
		t.Errorf("app reads servers.admin_dsn: %q, err %v; want insufficient_privilege", s, err)
	}
	if _, err := app.Exec(ctx, `UPDATE shardkit.shard_map SET server = 's1' WHERE shard = 0`); !isInsufficientPrivilege(err) {
		t.Errorf("app writes the shard map: err %v; want insufficient_privilege", err)
	}
	if _, err := app.Exec(ctx, `UPDATE shardkit.config SET map_version = map_version + 1`); !isInsufficientPrivilege(err) {
		t.Errorf("app bumps the map version: err %v; want insufficient_privilege", err)
	}
	// A generator on a catalog opened as the app: it leases a slot.
	cat, err := catalog.Open(ctx, shardtest.AppDSN(t, e.catalogDSN))
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	if readErr, writeErr := cat.Refusals(ctx); !isInsufficientPrivilege(readErr) || !isInsufficientPrivilege(writeErr) {
		t.Errorf("Refusals as the app: reading admin_dsn %v, writing the map %v; want both insufficient_privilege", readErr, writeErr)
	}
	if readErr, writeErr := e.cat.Refusals(ctx); readErr != nil || writeErr != nil {
		t.Errorf("Refusals as the operator: reading admin_dsn %v, writing the map %v; want both allowed", readErr, writeErr)
	}
	snap, err := cat.Load(ctx)
	if err != nil {
		t.Fatalf("app loads the map: %v", err)
	}
	for _, s := range snap.Servers() {
		if s.AdminDSN != "" {
			t.Errorf("app's snapshot holds server %s's admin DSN", s.Name)
		}
	}
	if _, err := cat.LoadChanges(ctx, snap); err != nil {
		t.Errorf("app loads the map's changes: %v", err)
	}
	gen, stop, err := catalog.StartGenerator(ctx, cat, catalog.LeaserConfig{}, idgen.Config{})
	if err != nil {
		t.Fatalf("app leases an ID slot: %v", err)
	}
	defer stop()
	if _, err := gen.NextN(ctx, 1, 1); err != nil {
		t.Fatalf("app's generator: %v", err)
	}
}

// TestOldHomeRefusesTheAppRole: from a move's cutover on, the old home
// refuses the application role's reads, a statement it prepared before
// the move included; the target refused them until the flip and serves
// them after it; operators still read the old copy (verify); a rollback
// gives the source back and a move then completes the same way.
func TestOldHomeRefusesTheAppRole(t *testing.T) {
	ctx := context.Background()
	e := newAppEnv(t, 2, 1, 4)
	seedPhotos(t, e, 0, 10)
	appSrc := pgtest.Connect(t, shardtest.AppDSN(t, e.serverDSN(t, "s0")))
	appTgt := pgtest.Connect(t, shardtest.AppDSN(t, e.serverDSN(t, "s1")))
	const read = `SELECT count(*) FROM shard_0000.photos`
	count := func(c *pgx.Conn, sql string) (int, error) {
		var n int
		err := c.QueryRow(ctx, sql).Scan(&n)
		return n, err
	}
	if n, err := count(appSrc, read); err != nil || n != 10 {
		t.Fatalf("app reads its home: %d, err %v", n, err)
	}
	// Prepared (and planned, and run) before the move.
	if _, err := appSrc.Prepare(ctx, "before", read); err != nil {
		t.Fatal(err)
	}
	for range 6 { // past the plan cache's custom plans
		if _, err := count(appSrc, "before"); err != nil {
			t.Fatal(err)
		}
	}
	var beforeFlip error
	mv := e.mover(t, Config{hook: func(m Move, s Step, done bool) {
		if s == stepCopiedSnapshot && done {
			_, beforeFlip = count(appTgt, read)
		}
	}})
	m, err := mv.Move(ctx, 0, "s1", MoveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !isInsufficientPrivilege(beforeFlip) {
		t.Errorf("app read the target's copy before the flip: err %v; want insufficient_privilege", beforeFlip)
	}
	if _, err := count(appSrc, read); !isInsufficientPrivilege(err) {
		t.Errorf("app read the old home after the flip: err %v; want insufficient_privilege", err)
	}
	if _, err := count(appSrc, "before"); !isInsufficientPrivilege(err) {
		t.Errorf("app ran a statement prepared before the move on the old home: err %v; want insufficient_privilege", err)
	}
	if _, err := appSrc.Exec(ctx, `INSERT INTO shard_0000.photos (user_id) VALUES (0)`); !isInsufficientPrivilege(err) {
		t.Errorf("app wrote the old home: err %v; want insufficient_privilege", err)
	}
	if n, err := count(appTgt, read); err != nil || n != 10 {
		t.Errorf("app reads the new home: %d, err %v", n, err)
	}
	if _, err := mv.Verify(ctx, 0); err != nil {
		t.Errorf("verify (the operator reads both copies): %v", err)
	}
	if _, err := mv.Rollback(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if n, err := count(appSrc, read); err != nil || n != 10 {
		t.Errorf("app reads the source after the rollback: %d, err %v", n, err)
	}
	if _, err := mv.Move(ctx, 0, "s1", MoveOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := mv.Complete(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if n, err := count(appTgt, read); err != nil || n != 10 {
		t.Errorf("app reads the new home after complete: %d, err %v", n, err)
	}
	if p := e.placement(t, 0); p.Server != "s1" || p.State != router.StateActive {
		t.Errorf("shard 0 at %s (%s), want s1 active", p.Server, p.State)
	}
	_ = m
}

// TestStaleRouterReadsTheNewHome: a router that did not hear of a move
// reads the shard's old home, is refused there (the cutover revoked the
// application role) and reads the new home instead, seeing a write made
// there after the flip; inside a transaction the refusal is
// plugin.ErrShardMoved, retriable. A grant the application lacks on a
// shard no move touches is the permission error it is.
func TestStaleRouterReadsTheNewHome(t *testing.T) {
	ctx := context.Background()
	e := newAppEnv(t, 2, 1, 4)
	seedPhotos(t, e, 0, 1)
	seedPhotos(t, e, 1, 1)
	stale := func() *gorm.DB {
		r, err := router.New(ctx, e.cat) // not watching: its map stays as it is until a reload
		if err != nil {
			t.Fatal(err)
		}
		return newPluginDB(t, e, r, plugin.Config{}, &photos.Photo{})
	}
	db, dbTx := stale(), stale()
	var ps []photos.Photo
	if err := db.Where("user_id = ?", 0).Find(&ps).Error; err != nil || len(ps) != 1 {
		t.Fatalf("read before the move: %d rows, err %v", len(ps), err)
	}
	mv := e.mover(t, Config{})
	if _, err := mv.Move(ctx, 0, "s1", MoveOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pools["s1"].Exec(ctx, `INSERT INTO shard_0000.photos (user_id, caption) VALUES (0, 'after the flip')`); err != nil {
		t.Fatal(err)
	}
	ps = nil
	if err := db.Where("user_id = ?", 0).Find(&ps).Error; err != nil || len(ps) != 2 {
		t.Errorf("stale router's read after the move: %d rows, err %v; want the new home's 2", len(ps), err)
	}
	err := dbTx.Transaction(func(tx *gorm.DB) error {
		var ps []photos.Photo
		return tx.Where("user_id = ?", 0).Find(&ps).Error
	})
	if !errors.Is(err, plugin.ErrShardMoved) || !plugin.Retryable(err) {
		t.Errorf("stale router's read in a transaction: err %v; want ErrShardMoved, retriable", err)
	}
	// The application's own missing grant, on shard 1 (active on s0).
	if _, err := e.pools["s0"].Exec(ctx, `REVOKE SELECT ON shard_0001.photos FROM `+catalog.DefaultAppRole); err != nil {
		t.Fatal(err)
	}
	err = db.Where("user_id = ?", 1).Find(&ps).Error
	if !isInsufficientPrivilege(err) || errors.Is(err, plugin.ErrShardMoved) {
		t.Errorf("read without the grant: err %v; want insufficient_privilege, not ErrShardMoved", err)
	}
}

// TestPluginReportsAPrivilegedRole: a plugin whose pools connect as the
// superuser reports it (ServerState.Privileged: the old home of a moved
// shard cannot refuse it), one on the application role does not.
func TestPluginReportsAPrivilegedRole(t *testing.T) {
	ctx := context.Background()
	e := newAppEnv(t, 2, 2, 4)
	r, err := router.New(ctx, e.cat)
	if err != nil {
		t.Fatal(err)
	}
	var plugins []*plugin.Plugin
	for _, super := range []bool{false, true} {
		cfg := plugin.Config{Router: r, IDs: shardtest.Generator(t, e.cat)}
		if super {
			cfg.OpenDB = func(dsn string) (*sql.DB, error) {
				return sql.Open("pgx", strings.Replace(dsn, shardtest.AppLogin+"@", "postgres@", 1))
			}
		}
		db, err := gorm.Open(postgres.Open(pgtest.NewDatabase(t, 1)), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
		if err != nil {
			t.Fatal(err)
		}
		p := plugin.Register(cfg, &photos.Photo{})
		if err := db.Use(p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		var ps []photos.Photo
		if err := db.Where("user_id = ?", 0).Find(&ps).Error; err != nil {
			t.Fatal(err)
		}
		plugins = append(plugins, p)
	}
	testkit.Eventually(t, testkit.Wait, func() bool {
		h := plugins[1].State().Servers
		return len(h) > 0 && h[0].Privileged
	})
	// The application's check began first and had as long.
	for _, h := range plugins[0].State().Servers {
		if h.Privileged {
			t.Errorf("server %s: the application role reported privileged", h.Name)
		}
	}
}
