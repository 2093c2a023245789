package plugin

import (
	"errors"
	"strings"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/router"
)

// handMap is an 8-shard map on two servers, a (even shards) and b (odd),
// whose DSNs lead nowhere: the statements are built and routed (DryRun),
// never sent.
func handMap(t *testing.T, version int64, moved map[int]string) *router.Snapshot {
	t.Helper()
	const nowhere = "host=127.0.0.1 port=1 user=x dbname=x connect_timeout=1"
	servers := []router.Server{{Name: "a", DSN: nowhere, State: "active"}, {Name: "b", DSN: nowhere, State: "active"}}
	var pls []router.Placement
	for s := range 8 {
		srv := servers[s%2].Name
		if m, ok := moved[s]; ok {
			srv = m
		}
		pls = append(pls, router.Placement{Shard: s, Server: srv, Schema: router.SchemaName(s), State: router.StateActive})
	}
	snap, err := router.NewSnapshot(version, 8, servers, pls)
	if err != nil {
		t.Fatal(err)
	}
	snap.Layout = idgen.DefaultLayout() // a catalog's map carries its layout
	return snap
}

// TestRoutingOnAHandMadeMap: the plugin's routing decisions on a map made
// by hand, with no database at all (the same decisions are checked on
// real clusters by the differential test). Each statement is built in
// DryRun; the test reads the shard and the server it was routed to, or the
// refusal.
func TestRoutingOnAHandMadeMap(t *testing.T) {
	rt, err := router.NewFixed(handMap(t, 1, nil))
	if err != nil {
		t.Fatal(err)
	}
	db, err := gorm.Open(postgres.Open("host=127.0.0.1 port=1 user=x dbname=x connect_timeout=1"),
		&gorm.Config{DisableAutomaticPing: true, Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	pl := Register(Config{Router: rt, SkipTableCheck: true, ConnectTimeout: time.Second}, &Photo{})
	if err := db.Use(pl); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pl.Close() })
	dry := db.Session(&gorm.Session{DryRun: true, SkipDefaultTransaction: true})
	layout := rt.Snapshot().Layout
	idOn := func(shard int) int64 {
		id, err := layout.Compose(layout.EpochMs+1_000_000, shard, 1)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}

	cases := []struct {
		name   string
		run    func(db *gorm.DB) *gorm.DB
		shard  int    // want this shard
		server string // on this server
		err    error  // or this refusal
	}{
		{"key equality", func(db *gorm.DB) *gorm.DB { var ps []Photo; return db.Where("user_id = ?", 13).Find(&ps) }, 5, "b", nil},
		{"key in struct conditions", func(db *gorm.DB) *gorm.DB { var ps []Photo; return db.Where(&Photo{UserID: 10}).Find(&ps) }, 2, "a", nil},
		{"ID", func(db *gorm.DB) *gorm.DB { var p Photo; return db.First(&p, idOn(3)) }, 3, "b", nil},
		{"IN on one shard", func(db *gorm.DB) *gorm.DB {
			var ps []Photo
			return db.Where("user_id IN ?", []int64{4, 12, 20}).Find(&ps)
		}, 4, "a", nil},
		{"AND of key and other", func(db *gorm.DB) *gorm.DB {
			var ps []Photo
			return db.Where("user_id = ? AND likes > ?", 7, 3).Find(&ps)
		}, 7, "b", nil},
		{"update by ID", func(db *gorm.DB) *gorm.DB {
			return db.Model(&Photo{ID: idOn(6)}).Update("caption", "x")
		}, 6, "a", nil},
		{"create", func(db *gorm.DB) *gorm.DB { return db.Create(&Photo{ID: idOn(1), UserID: 9, Caption: "c"}) }, 1, "b", nil},
		{"no key", func(db *gorm.DB) *gorm.DB { var ps []Photo; return db.Where("likes > ?", 3).Find(&ps) }, 0, "", ErrMissingShardKey},
		{"NOT on the key", func(db *gorm.DB) *gorm.DB { var ps []Photo; return db.Not("user_id = ?", 3).Find(&ps) }, 0, "", ErrMissingShardKey},
		{"expression on the key", func(db *gorm.DB) *gorm.DB {
			var ps []Photo
			return db.Where("user_id + 0 = ?", 3).Find(&ps)
		}, 0, "", ErrMissingShardKey},
		{"OR with an unknown branch", func(db *gorm.DB) *gorm.DB {
			var ps []Photo
			return db.Where("user_id = ?", 3).Or("likes = ?", 1).Find(&ps)
		}, 0, "", ErrMissingShardKey},
		{"key and ID of different shards", func(db *gorm.DB) *gorm.DB {
			var p Photo
			return db.Where("user_id = ?", 2).First(&p, idOn(5))
		}, -1, "", nil}, // no row can meet both: one shard answers GORM's empty result
		{"update of the shard key", func(db *gorm.DB) *gorm.DB {
			return db.Model(&Photo{ID: idOn(6), UserID: 6}).Update("user_id", 7)
		}, 0, "", ErrShardKeyChange},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := c.run(dry)
			if c.err != nil {
				if !errors.Is(res.Error, c.err) {
					t.Fatalf("err = %v, want %v", res.Error, c.err)
				}
				return
			}
			if res.Error != nil {
				t.Fatalf("err = %v (SQL %s)", res.Error, res.Statement.SQL.String())
			}
			shard, ok := RoutedShard(res.Statement)
			if c.shard < 0 {
				return
			}
			if !ok || shard != c.shard {
				t.Fatalf("routed to shard %d (%v), want %d; SQL %s", shard, ok, c.shard, res.Statement.SQL.String())
			}
			if got := serverOf(res.Statement.ConnPool); got != c.server {
				t.Fatalf("routed to server %q, want %q", got, c.server)
			}
			if !strings.Contains(res.Statement.SQL.String(), router.SchemaName(c.shard)) {
				t.Fatalf("SQL %s does not name %s", res.Statement.SQL.String(), router.SchemaName(c.shard))
			}
		})
	}

	// A new map version moves shard 5 to server a: the next statement
	// goes there.
	rt.Set(handMap(t, 2, map[int]string{5: "a"}))
	var ps []Photo
	res := dry.Where("user_id = ?", 13).Find(&ps)
	if res.Error != nil {
		t.Fatal(res.Error)
	}
	if got := serverOf(res.Statement.ConnPool); got != "a" {
		t.Fatalf("after the map change shard 5 routed to %q, want a", got)
	}
}
