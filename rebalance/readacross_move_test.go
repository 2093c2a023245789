package rebalance

import (
	"context"
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/shardkit/shardkit/internal/harness/shardtest/photos"
	"github.com/shardkit/shardkit/plugin"
)

// TestReadsAcrossShardsAfterAMove: a read of several shards routed with a
// map older than a move reaches the old home, which refuses the
// application role from the cutover on (42501) and has no copy once the
// move completes (42P01). Outside a transaction the read runs again on
// the reloaded map and answers every row; inside one it fails with
// ErrShardMoved, which a retry of the transaction gets past (an atomic
// transaction: the one kind that reads across shards). Each app
// process is a router that does not watch the catalog, loaded before the
// move, so that its map is stale when it reads.
func TestReadsAcrossShardsAfterAMove(t *testing.T) {
	ctx := context.Background()
	e := newAppEnv(t, 2, 1, 4)
	const per = 5
	for s := range 4 {
		seedPhotos(t, e, s, per)
	}
	stale := func() *gorm.DB { return newPluginDB(t, e, staleRouter(t, e), plugin.Config{}, &photos.Photo{}) }
	find := func(db *gorm.DB) (int64, error) {
		var ps []photos.Photo
		err := db.Clauses(plugin.AllShards()).Order("id").Find(&ps).Error
		return int64(len(ps)), err
	}
	count := func(db *gorm.DB) (int64, error) {
		var n int64
		err := db.Model(&photos.Photo{}).Clauses(plugin.AllShards()).Count(&n).Error
		return n, err
	}
	rows := func(db *gorm.DB) (int64, error) {
		rs, err := db.Model(&photos.Photo{}).Clauses(plugin.AllShards()).Select("id").Rows()
		if err != nil {
			return 0, err
		}
		defer rs.Close()
		var n int64
		for rs.Next() {
			n++
		}
		return n, rs.Err()
	}
	byUsers := func(db *gorm.DB) (int64, error) { // a read of the shards its conditions name
		var ps []photos.Photo
		err := db.Where("user_id IN ?", []int64{0, 1, 2}).Find(&ps).Error
		return int64(len(ps)), err
	}
	reads := []struct {
		name string
		read func(*gorm.DB) (int64, error)
		want int64
	}{{"Find", find, 4 * per}, {"Count", count, 4 * per}, {"Rows", rows, 4 * per}, {"Find by users", byUsers, 3 * per}}

	type client struct {
		db   *gorm.DB
		tx   bool
		read func(*gorm.DB) (int64, error)
		want int64
		name string
	}
	clients := func() []client {
		var cs []client
		for _, r := range reads {
			cs = append(cs, client{db: stale(), read: r.read, want: r.want, name: r.name})
			cs = append(cs, client{db: stale(), tx: true, read: r.read, want: r.want, name: r.name + " in a transaction"})
		}
		for _, c := range cs {
			if n, err := c.read(c.db); err != nil || n != c.want {
				t.Fatalf("%s before the move: %d rows, err %v; want %d", c.name, n, err, c.want)
			}
		}
		return cs
	}
	check := func(when string, cs []client) {
		t.Helper()
		for _, c := range cs {
			if !c.tx {
				if n, err := c.read(c.db); err != nil || n != c.want {
					t.Errorf("%s with a map older than the %s: %d rows, err %v; want %d rows", c.name, when, n, err, c.want)
				}
				continue
			}
			err := c.db.Clauses(plugin.Atomic()).Transaction(func(tx *gorm.DB) error {
				_, err := c.read(tx)
				return err
			})
			if !errors.Is(err, plugin.ErrShardMoved) || !plugin.Retryable(err) {
				t.Errorf("%s with a map older than the %s: err %v; want a retryable ErrShardMoved", c.name, when, err)
			}
			// The transaction's failure reloaded the map: its retry reads every row.
			var n int64
			err = c.db.Clauses(plugin.Atomic()).Transaction(func(tx *gorm.DB) error {
				var err error
				n, err = c.read(tx)
				return err
			})
			if err != nil || n != c.want {
				t.Errorf("%s retried after the %s: %d rows, err %v; want %d rows", c.name, when, n, err, c.want)
			}
		}
	}

	forCutover, forCompletion := clients(), clients()
	mv := e.mover(t, Config{})
	if _, err := mv.Move(ctx, 0, "s1", MoveOptions{}); err != nil {
		t.Fatal(err)
	}
	if p := e.placement(t, 0); p.Server != "s1" {
		t.Fatalf("shard 0 on %s after the move; want s1", p.Server)
	}
	check("cutover", forCutover)
	if _, err := mv.Complete(ctx, 0); err != nil {
		t.Fatal(err)
	}
	check("completion", forCompletion)
}
