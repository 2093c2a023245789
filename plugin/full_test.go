package plugin

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/router"
)

// TestFull2000Shards runs every kind of statement against the full 2000
// logical shards on two servers, checking where rows land directly.
func TestFull2000Shards(t *testing.T) {
	if testing.Short() {
		t.Skip("provisions 2000 shards")
	}
	start := time.Now()
	e := newEnv(t, envOpts{shards: idgen.DefaultShards})
	t.Logf("provisioned 2000 shards on 2 servers in %v", time.Since(start))
	users := []int64{2000, 1, 999, 1000, 1001, 1999, 123456789, 4242}
	var ps []Photo
	for _, u := range users {
		ps = append(ps, Photo{UserID: u, Caption: "full"})
	}
	if err := e.db.Create(&ps).Error; err != nil {
		t.Fatal(err)
	}
	servers := map[string]bool{}
	for _, p := range ps {
		e.assertAt(t, "photos", p.ID, e.shardOf(p.UserID))
		servers[e.serverOf(t, e.shardOf(p.UserID))] = true
	}
	if len(servers) != 2 {
		t.Fatalf("rows on %d servers, want 2", len(servers))
	}
	one := Photo{UserID: 777}
	if err := e.db.Create(&one).Error; err != nil {
		t.Fatal(err)
	}
	e.assertAt(t, "photos", one.ID, 777)
	like := Like{UserID: 5, PhotoID: one.ID}
	if err := e.db.Create(&like).Error; err != nil {
		t.Fatal(err)
	}
	e.assertAt(t, "likes", like.ID, 777)

	var got Photo
	if err := e.db.First(&got, ps[3].ID).Error; err != nil || got.UserID != users[3] {
		t.Fatalf("first by id: %v %+v", err, got)
	}
	var list []Photo
	if err := e.db.Find(&list, []int64{ps[0].ID, ps[5].ID, ps[6].ID}).Error; err != nil || len(list) != 3 {
		t.Fatalf("find by ids: %v %d", err, len(list))
	}
	if err := e.db.Where("user_id IN ?", users).Order("id").Find(&list).Error; err != nil || len(list) != len(users) {
		t.Fatalf("find by keys: %v %d", err, len(list))
	}
	var n int64
	if err := e.db.Model(&Photo{}).Clauses(AllShards()).Count(&n).Error; err != nil || n != int64(len(users)+1) {
		t.Fatalf("count over all shards: %v %d", err, n)
	}
	if err := e.db.Model(&Photo{}).Where("user_id = ?", 1999).Update("caption", "u").Error; err != nil {
		t.Fatal(err)
	}
	if c, _ := e.caption(t, ps[5]); c != "u" {
		t.Fatalf("caption %q", c)
	}
	if err := e.db.Delete(&ps[4]).Error; err != nil {
		t.Fatal(err)
	}
	conn := pgtest.Connect(t, e.dsn[e.serverOf(t, e.shardOf(ps[4].UserID))])
	var left int
	if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM "+pgx.Identifier{router.SchemaName(e.shardOf(ps[4].UserID)), "photos"}.Sanitize()+" WHERE id = $1", ps[4].ID).Scan(&left); err != nil || left != 0 {
		t.Fatalf("deleted row: err %v, %d left", err, left)
	}
	e.defaultUntouched(t)
}
