package plugin

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/router"
)

// caption reads a photo's caption and likes directly from its shard.
func (e *env) caption(t *testing.T, p Photo) (string, int) {
	t.Helper()
	shard := e.shardOf(p.UserID)
	conn := pgtest.Connect(t, e.dsn[e.serverOf(t, shard)])
	var c string
	var n int
	err := conn.QueryRow(context.Background(), "SELECT caption, likes FROM "+pgx.Identifier{router.SchemaName(shard), "photos"}.Sanitize()+" WHERE id = $1", p.ID).Scan(&c, &n)
	if err != nil {
		t.Fatalf("read photo %d directly: %v", p.ID, err)
	}
	return c, n
}

func TestUpdateAndDelete(t *testing.T) {
	e := newEnv(t, envOpts{})
	by := seed(t, e, []int64{1, 2, 3, 17}, 2)
	db := e.db
	check := func(t *testing.T, p Photo, want string) {
		t.Helper()
		if got, _ := e.caption(t, p); got != want {
			t.Fatalf("caption = %q, want %q", got, want)
		}
	}
	t.Run("update by model", func(t *testing.T) {
		p := by[1][0]
		res := db.Model(&p).Update("caption", "m1")
		if res.Error != nil || res.RowsAffected != 1 {
			t.Fatalf("err %v rows %d", res.Error, res.RowsAffected)
		}
		check(t, p, "m1")
		check(t, by[1][1], "seed")
	})
	t.Run("updates by model", func(t *testing.T) {
		p := by[1][1]
		if err := db.Model(&p).Updates(Photo{Caption: "m2", Likes: 4}).Error; err != nil {
			t.Fatal(err)
		}
		if c, n := e.caption(t, p); c != "m2" || n != 4 {
			t.Fatalf("got %q %d", c, n)
		}
	})
	t.Run("update by pk", func(t *testing.T) {
		p := by[2][0]
		if err := db.Model(&Photo{}).Where("id = ?", p.ID).Update("caption", "pk").Error; err != nil {
			t.Fatal(err)
		}
		check(t, p, "pk")
	})
	t.Run("update column by key", func(t *testing.T) {
		res := db.Model(&Photo{}).Where("user_id = ?", 3).UpdateColumn("caption", "k3")
		if res.Error != nil || res.RowsAffected != 2 {
			t.Fatalf("err %v rows %d", res.Error, res.RowsAffected)
		}
		check(t, by[3][0], "k3")
		check(t, by[3][1], "k3")
	})
	t.Run("update columns by keys of several shards", func(t *testing.T) {
		res := db.Model(&Photo{}).Where("user_id IN ?", []int64{3, 17}).UpdateColumns(map[string]any{"caption": "many", "likes": 9})
		if res.Error != nil || res.RowsAffected != 4 {
			t.Fatalf("err %v rows %d", res.Error, res.RowsAffected)
		}
		for _, p := range append(by[3], by[17]...) {
			if c, n := e.caption(t, p); c != "many" || n != 9 {
				t.Fatalf("got %q %d", c, n)
			}
		}
		check(t, by[2][1], "seed")
	})
	t.Run("save", func(t *testing.T) {
		p := by[2][1]
		p.Caption = "saved"
		if err := db.Save(&p).Error; err != nil {
			t.Fatal(err)
		}
		check(t, p, "saved")
		n := Photo{UserID: 21, Caption: "new by save"}
		if err := db.Save(&n).Error; err != nil || n.ID == 0 {
			t.Fatalf("err %v id %d", err, n.ID)
		}
		e.assertAt(t, "photos", n.ID, e.shardOf(21))
	})
	t.Run("delete by model", func(t *testing.T) {
		p := by[1][0]
		res := db.Delete(&p)
		if res.Error != nil || res.RowsAffected != 1 {
			t.Fatalf("err %v rows %d", res.Error, res.RowsAffected)
		}
		e.assertAbsent(t, "photos", p.ID)
		e.assertAt(t, "photos", by[1][1].ID, e.shardOf(1))
	})
	t.Run("delete by pk", func(t *testing.T) {
		p := by[1][1]
		if err := db.Delete(&Photo{}, p.ID).Error; err != nil {
			t.Fatal(err)
		}
		e.assertAbsent(t, "photos", p.ID)
	})
	t.Run("delete by key", func(t *testing.T) {
		res := db.Where("user_id = ?", 3).Delete(&Photo{})
		if res.Error != nil || res.RowsAffected != 2 {
			t.Fatalf("err %v rows %d", res.Error, res.RowsAffected)
		}
		e.assertAbsent(t, "photos", by[3][0].ID)
	})
	t.Run("delete slice across shards", func(t *testing.T) {
		ps := []Photo{by[2][0], by[17][0]}
		res := db.Delete(&ps)
		if res.Error != nil || res.RowsAffected != 2 {
			t.Fatalf("err %v rows %d", res.Error, res.RowsAffected)
		}
		e.assertAbsent(t, "photos", by[2][0].ID)
		e.assertAbsent(t, "photos", by[17][0].ID)
		e.assertAt(t, "photos", by[17][1].ID, e.shardOf(17))
	})
	e.defaultUntouched(t)
}
