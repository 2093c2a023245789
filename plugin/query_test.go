package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/router"
)

// seed creates n photos for each user, returns them by user.
func seed(t *testing.T, e *env, users []int64, n int) map[int64][]Photo {
	t.Helper()
	out := map[int64][]Photo{}
	for _, u := range users {
		for i := 0; i < n; i++ {
			p := Photo{UserID: u, Caption: "seed"}
			if err := e.db.Create(&p).Error; err != nil {
				t.Fatal(err)
			}
			out[u] = append(out[u], p)
		}
	}
	return out
}

func ids(ps []Photo) []int64 {
	out := make([]int64, len(ps))
	for i, p := range ps {
		out[i] = p.ID
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func sameIDs(t *testing.T, got []Photo, want ...[]Photo) {
	t.Helper()
	var all []Photo
	for _, w := range want {
		all = append(all, w...)
	}
	g, w := ids(got), ids(all)
	if len(g) != len(w) {
		t.Fatalf("got %d rows %v, want %d %v", len(g), g, len(w), w)
	}
	for i := range g {
		if g[i] != w[i] {
			t.Fatalf("got %v, want %v", g, w)
		}
	}
}

func TestQueryRouting(t *testing.T) {
	e := newEnv(t, envOpts{})
	users := []int64{1, 2, 3, 17, 18}
	by := seed(t, e, users, 3)
	db := e.db
	p0 := by[1][0]

	t.Run("first by pk", func(t *testing.T) {
		var p Photo
		if err := db.First(&p, p0.ID).Error; err != nil || p.ID != p0.ID {
			t.Fatalf("err %v, got %d", err, p.ID)
		}
	})
	t.Run("take by pk string cond", func(t *testing.T) {
		var p Photo
		if err := db.Take(&p, "id = ?", p0.ID).Error; err != nil || p.ID != p0.ID {
			t.Fatalf("err %v, got %d", err, p.ID)
		}
	})
	t.Run("last by key", func(t *testing.T) {
		var p Photo
		if err := db.Where("user_id = ?", int64(2)).Last(&p).Error; err != nil || p.ID != ids(by[2])[2] {
			t.Fatalf("err %v, got %d want %d", err, p.ID, ids(by[2])[2])
		}
	})
	t.Run("first by model pk", func(t *testing.T) {
		p := Photo{ID: p0.ID}
		if err := db.First(&p).Error; err != nil || p.UserID != 1 {
			t.Fatalf("err %v, got %+v", err, p)
		}
	})
	t.Run("find by pks of several shards", func(t *testing.T) {
		var got []Photo
		want := []int64{by[1][0].ID, by[2][1].ID, by[17][2].ID, by[18][0].ID}
		if err := db.Find(&got, want).Error; err != nil {
			t.Fatal(err)
		}
		sameIDs(t, got, []Photo{by[1][0], by[2][1], by[17][2], by[18][0]})
	})
	t.Run("find by struct key", func(t *testing.T) {
		var got []Photo
		if err := db.Where(&Photo{UserID: 3}).Find(&got).Error; err != nil {
			t.Fatal(err)
		}
		sameIDs(t, got, by[3])
	})
	t.Run("find by map key", func(t *testing.T) {
		var got []Photo
		if err := db.Where(map[string]any{"user_id": 17}).Find(&got).Error; err != nil {
			t.Fatal(err)
		}
		sameIDs(t, got, by[17])
	})
	t.Run("where key in", func(t *testing.T) {
		var got []Photo
		if err := db.Where("user_id IN ?", []int64{1, 2, 18}).Order("id desc").Find(&got).Error; err != nil {
			t.Fatal(err)
		}
		sameIDs(t, got, by[1], by[2], by[18])
		for i := 1; i < len(got); i++ {
			if got[i-1].ID < got[i].ID {
				t.Fatalf("not ordered by id desc: %v", ids(got))
			}
		}
	})
	t.Run("where key in with limit", func(t *testing.T) {
		var got []Photo
		if err := db.Where("user_id IN ?", []int64{1, 2, 18}).Order("id").Limit(2).Offset(1).Find(&got).Error; err != nil {
			t.Fatal(err)
		}
		all := ids(append(append(append([]Photo{}, by[1]...), by[2]...), by[18]...))
		if len(got) != 2 || got[0].ID != all[1] || got[1].ID != all[2] {
			t.Fatalf("got %v, want %v", ids(got), all[1:3])
		}
	})
	t.Run("first across shards", func(t *testing.T) {
		var p Photo
		if err := db.Where("user_id IN ?", []int64{2, 17}).First(&p).Error; err != nil {
			t.Fatal(err)
		}
		all := ids(append(append([]Photo{}, by[2]...), by[17]...))
		if p.ID != all[0] {
			t.Fatalf("got %d want %d", p.ID, all[0])
		}
	})
	t.Run("not found", func(t *testing.T) {
		var p Photo
		err := db.Where("user_id IN ?", []int64{5, 6}).First(&p).Error
		if !errors.Is(err, gorm.ErrRecordNotFound) {
			t.Fatalf("err = %v", err)
		}
		err = db.Where("user_id = ?", 5).First(&p).Error
		if !errors.Is(err, gorm.ErrRecordNotFound) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("count", func(t *testing.T) {
		var n int64
		if err := db.Model(&Photo{}).Where("user_id = ?", 1).Count(&n).Error; err != nil || n != 3 {
			t.Fatalf("err %v n %d", err, n)
		}
		if err := db.Model(&Photo{}).Where("user_id IN ?", []int64{1, 2, 3}).Count(&n).Error; err != nil || n != 9 {
			t.Fatalf("err %v n %d", err, n)
		}
		if err := db.Model(&Photo{}).Clauses(AllShards()).Count(&n).Error; err != nil || n != 15 {
			t.Fatalf("all shards: err %v n %d", err, n)
		}
		if err := db.Model(&Photo{}).Where("user_id IN ?", []int64{1, 2}).Distinct("caption").Count(&n).Error; err != nil || n != 1 {
			t.Fatalf("count distinct over shards: err %v n %d, want 1", err, n)
		}
		if err := db.Model(&Photo{}).Where("user_id = ?", 1).Distinct("caption").Count(&n).Error; err != nil || n != 1 {
			t.Fatalf("count distinct in one shard: err %v n %d", err, n)
		}
		// aggregates, DISTINCT and GROUP BY merge across shards (read_plan_agg.go)
		var caps []string
		err := db.Model(&Photo{}).Where("user_id IN ?", []int64{1, 2}).Distinct("caption").Pluck("caption", &caps).Error
		if err != nil || len(caps) != 1 || caps[0] != "seed" {
			t.Fatalf("distinct over shards: err %v, %q", err, caps)
		}
		var groups []struct {
			Caption string
			N       int
		}
		err = db.Model(&Photo{}).Select("caption, count(*) AS n").Where("user_id IN ?", []int64{1, 2}).Group("caption").Find(&groups).Error
		if err != nil || len(groups) != 1 || groups[0].Caption != "seed" || groups[0].N != 6 {
			t.Fatalf("group by over shards: err %v, %+v", err, groups)
		}
		var top int64
		err = db.Model(&Photo{}).Select("max(id)").Where("user_id IN ?", []int64{1, 2}).Find(&top).Error
		if want := max(slices.Max(ids(by[1])), slices.Max(ids(by[2]))); err != nil || top != want {
			t.Fatalf("max over shards: err %v, %d, want %d", err, top, want)
		}
		groups = nil
		err = db.Model(&Photo{}).Select("caption, count(*) AS n").Where("user_id IN ?", []int64{1, 2}).Group("caption").Having("count(*) > ?", 1).Find(&groups).Error
		if err != nil || len(groups) != 1 || groups[0].Caption != "seed" || groups[0].N != 6 {
			t.Fatalf("having over shards: err %v, %+v", err, groups)
		}
		groups = nil
		err = db.Model(&Photo{}).Select("caption, count(*) AS n").Where("user_id IN ?", []int64{1, 2}).Group("caption").Having("count(*) > ?", 6).Find(&groups).Error
		if err != nil || len(groups) != 0 {
			t.Fatalf("having over shards that no group passes: err %v, %+v", err, groups)
		}
	})
	t.Run("pluck", func(t *testing.T) {
		var got []int64
		if err := db.Model(&Photo{}).Where("user_id IN ?", []int64{1, 18}).Pluck("id", &got).Error; err != nil {
			t.Fatal(err)
		}
		want := ids(append(append([]Photo{}, by[1]...), by[18]...))
		if err := db.Model(&Photo{}).Where("user_id IN ?", []int64{1, 18}).Order("id").Pluck("id", &got).Error; err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("got %v want %v", got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("got %v want %v (ordered)", got, want)
			}
		}
		var caps []string
		// ordered by a hidden column each shard selects (hiddenOrderKeys)
		err := db.Model(&Photo{}).Where("user_id IN ?", []int64{1, 18}).Order("id").Pluck("caption", &caps).Error
		if err != nil || len(caps) != len(want) {
			t.Fatalf("pluck ordered by another column: err = %v, %q", err, caps)
		}
	})
	t.Run("scan", func(t *testing.T) {
		var out []struct {
			ID     int64
			UserID int64
		}
		if err := db.Model(&Photo{}).Where("user_id = ?", 3).Scan(&out).Error; err != nil || len(out) != 3 {
			t.Fatalf("err %v rows %d", err, len(out))
		}
		var one struct{ UserID int64 }
		if err := db.Model(&Photo{}).Where("id = ?", p0.ID).Scan(&one).Error; err != nil || one.UserID != 1 {
			t.Fatalf("err %v got %+v", err, one)
		}
	})
	t.Run("rows", func(t *testing.T) {
		rows, err := db.Model(&Photo{}).Where("user_id = ?", 2).Rows()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			var p Photo
			if err := db.ScanRows(rows, &p); err != nil {
				t.Fatal(err)
			}
			n++
		}
		_ = rows.Close()
		if n != 3 {
			t.Fatalf("rows %d", n)
		}
		// across shards: the merged rows (read_scan_rows_test.go compares
		// each shape with one table)
		rows, err = db.Model(&Photo{}).Where("user_id IN ?", []int64{1, 2}).Order("id").Rows()
		if err != nil {
			t.Fatalf("multi-shard Rows: err = %v", err)
		}
		n = 0
		for rows.Next() {
			n++
		}
		_ = rows.Close()
		if n != 6 {
			t.Fatalf("multi-shard Rows: %d rows", n)
		}
	})
	t.Run("all shards ordered", func(t *testing.T) {
		var got []Photo
		if err := db.Clauses(AllShards()).Order("id").Find(&got).Error; err != nil {
			t.Fatal(err)
		}
		if len(got) != 15 {
			t.Fatalf("rows %d", len(got))
		}
		for i := 1; i < len(got); i++ {
			if got[i-1].ID > got[i].ID {
				t.Fatalf("not ordered: %v", ids(got))
			}
		}
	})
	t.Run("order by a non-field across shards", func(t *testing.T) {
		// each shard selects the expression under a hidden alias and the
		// merge orders by it (hiddenOrderKeys): a random order of all rows
		var got []Photo
		err := db.Where("user_id IN ?", []int64{1, 2}).Order("random()").Find(&got).Error
		if err != nil || len(got) != 6 {
			t.Fatalf("err = %v, %d rows", err, len(got))
		}
		err = db.Where("user_id IN ?", []int64{1, 2}).Order("random() USING <").Find(&got).Error
		if !errors.Is(err, ErrUnroutableSQL) {
			t.Fatalf("USING: err = %v", err)
		}
	})
	t.Run("scopes", func(t *testing.T) {
		var got []Photo
		if err := db.Clauses(Shard(int64(2))).Find(&got).Error; err != nil {
			t.Fatal(err)
		}
		// shard of user 2 holds users 2 and 18 with 16 shards
		sameIDs(t, got, by[2], by[18])
		if err := db.Clauses(ShardOfID(p0.ID)).Where("caption = ?", "seed").Find(&got).Error; err != nil {
			t.Fatal(err)
		}
		sameIDs(t, got, by[1], by[17])
	})
	e.defaultUntouched(t)
}

func TestPreloadAndJoins(t *testing.T) {
	e := newEnv(t, envOpts{})
	by := seed(t, e, []int64{4, 9}, 2)
	var likes []Like
	for _, u := range []int64{4, 9} {
		for _, p := range by[u] {
			for k := 0; k < 3; k++ {
				likes = append(likes, Like{UserID: 50 + int64(k), PhotoID: p.ID})
			}
		}
	}
	if err := e.db.Create(&likes).Error; err != nil {
		t.Fatal(err)
	}
	for _, l := range likes[:3] {
		e.assertAt(t, "likes", l.ID, e.shardOf(4))
	}
	var ps []Photo
	if err := e.db.Preload("LikeRows").Where("user_id IN ?", []int64{4, 9}).Find(&ps).Error; err != nil {
		t.Fatal(err)
	}
	if len(ps) != 4 {
		t.Fatalf("photos %d", len(ps))
	}
	for _, p := range ps {
		if len(p.LikeRows) != 3 {
			t.Fatalf("photo %d has %d likes preloaded", p.ID, len(p.LikeRows))
		}
	}
	var ls []Like
	pid := by[9][1].ID
	if err := e.db.Joins("Photo").Where("photo_id = ?", pid).Find(&ls).Error; err != nil {
		t.Fatal(err)
	}
	if len(ls) != 3 || ls[0].Photo == nil || ls[0].Photo.UserID != 9 {
		t.Fatalf("joined likes: %+v", ls)
	}
	// Joins on likes of photos in two shards: per shard, merged.
	ls = nil
	if err := e.db.Joins("Photo").Where("photo_id IN ?", []int64{by[4][0].ID, by[9][0].ID}).Order("id").Find(&ls).Error; err != nil {
		t.Fatal(err)
	}
	if len(ls) != 6 || ls[0].Photo == nil || ls[5].Photo == nil {
		t.Fatalf("joined likes of two shards: %d", len(ls))
	}
	for i := 1; i < len(ls); i++ {
		if ls[i-1].ID > ls[i].ID {
			t.Fatal("not ordered")
		}
	}
	var l Like
	if err := e.db.Preload("Photo").First(&l, likes[0].ID).Error; err != nil || l.Photo == nil || l.Photo.ID != likes[0].PhotoID {
		t.Fatalf("err %v like %+v", err, l)
	}
	e.defaultUntouched(t)
}

// A query over shards on several servers runs the servers at once: with
// the first shard of each server locked, both servers must be seen
// waiting on their lock at the same time, which a query that visits
// servers one after another never does.
func TestFanoutRunsServersAtOnce(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	for u := int64(1); u <= int64(e.shards); u++ {
		if err := e.db.Create(&Photo{UserID: u, Caption: "fan"}).Error; err != nil {
			t.Fatal(err)
		}
	}
	lockers := map[string]pgx.Tx{}
	for shard := 0; shard < e.shards && len(lockers) < 2; shard++ {
		server := e.serverOf(t, shard)
		if _, ok := lockers[server]; ok {
			continue
		}
		tx, err := pgtest.Connect(t, e.dsn[server]).Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "LOCK TABLE "+pgx.Identifier{router.SchemaName(shard), "photos"}.Sanitize()+" IN ACCESS EXCLUSIVE MODE"); err != nil {
			t.Fatal(err)
		}
		lockers[server] = tx
	}
	if len(lockers) != 2 {
		t.Fatalf("shards on %d servers, want 2", len(lockers))
	}
	done := make(chan error, 1)
	var got []Photo
	go func() { done <- e.db.Clauses(AllShards()).Order("id").Find(&got).Error }()

	watch := map[string]*pgx.Conn{"a": pgtest.Connect(t, e.dsn["a"]), "b": pgtest.Connect(t, e.dsn["b"])}
	waiting := func(server string) bool {
		var n int
		err := watch[server].QueryRow(ctx,
			`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%photos%'`).Scan(&n)
		return err == nil && n > 0
	}
	both := false
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !both; time.Sleep(20 * time.Millisecond) {
		both = waiting("a") && waiting("b")
	}
	for _, tx := range lockers {
		_ = tx.Commit(ctx)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !both {
		t.Fatal("the servers were never queried at the same time")
	}
	if len(got) != e.shards {
		t.Fatalf("%d rows, want %d", len(got), e.shards)
	}
	for i := 1; i < len(got); i++ {
		if got[i-1].ID >= got[i].ID {
			t.Fatalf("rows not merged in id order at %d", i)
		}
	}
}

// TestUnionFoldsIntoOneAppend: a read of many shards sends each server
// plain per-schema SELECTs, in groups of foldGroup ordered and limited
// (or counted) as a whole, which Postgres plans as one append of the
// tables per group: a Merge Append straight over each table's primary
// key index, no Limit, Sort or Aggregate per branch, no subquery per
// branch. Checked on the statements the servers get, with EXPLAIN on the
// server, and against the rows and count of the read.
func TestUnionFoldsIntoOneAppend(t *testing.T) {
	e := newEnv(t, envOpts{shards: 4*foldGroup + 10})
	for u := int64(1); u <= int64(2*e.shards); u++ {
		if err := e.db.Create(&Photo{UserID: u, Caption: "fold"}).Error; err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu   sync.Mutex
		sent []string
		vars [][]any
	)
	e.p.running = func(st *readStmt) {
		mu.Lock()
		sent = append(sent, st.sql)
		vars = append(vars, slices.Clone(st.vars))
		mu.Unlock()
	}
	t.Cleanup(func() { e.p.running = nil })
	ctx := context.Background()
	for _, read := range []struct {
		name  string
		run   func() error
		scan  string // the plan line of each branch
		group string // the plan node of each group, none per branch
	}{
		{"order by id desc limit 5", func() error {
			var ps []Photo
			if err := e.db.Clauses(AllShards()).Order("id desc").Limit(5).Find(&ps).Error; err != nil {
				return err
			}
			if len(ps) != 5 {
				return fmt.Errorf("%d rows, want 5", len(ps))
			}
			return nil
		}, "Index Scan Backward using photos_pkey on photos", "->  Limit"},
		{"count", func() error {
			var n int64
			if err := e.db.Clauses(AllShards()).Model(&Photo{}).Count(&n).Error; err != nil {
				return err
			}
			if n != int64(2*e.shards) {
				return fmt.Errorf("count %d, want %d", n, 2*e.shards)
			}
			return nil
		}, "Scan on photos", "->  Aggregate"},
		{"where, no order", func() error {
			var ps []Photo
			if err := e.db.Clauses(AllShards()).Where("caption = ?", "fold").Find(&ps).Error; err != nil {
				return err
			}
			if len(ps) != 2*e.shards {
				return fmt.Errorf("%d rows, want %d", len(ps), 2*e.shards)
			}
			return nil
		}, "Scan on photos", "->  Limit"},
	} {
		sent, vars = nil, nil
		if err := read.run(); err != nil {
			t.Fatalf("%s: %v", read.name, err)
		}
		stmts := sent
		if len(stmts) == 0 || len(stmts) > len(e.servers)*2 {
			t.Fatalf("%s: %d statements for %d shards on %d servers", read.name, len(stmts), e.shards, len(e.servers))
		}
		folded := false
		for si, sql := range stmts {
			branches := strings.Count(sql, `."photos"`)
			if branches < 2 || !strings.Contains(sql, " UNION ALL ") {
				t.Fatalf("%s: statement is not a union: %s", read.name, sql)
			}
			// EXPLAIN the statement on the server that holds its schemas.
			var plan []string
			for _, name := range e.servers {
				rows, err := pgtest.Connect(t, e.dsn[name]).Query(ctx, "EXPLAIN (COSTS OFF) "+sql, vars[si]...)
				if err != nil {
					continue
				}
				for rows.Next() {
					var line string
					if err := rows.Scan(&line); err != nil {
						t.Fatal(err)
					}
					plan = append(plan, line)
				}
				if rows.Err() == nil {
					break
				}
				plan = nil
			}
			text := strings.Join(plan, "\n") + "\n"
			if len(plan) == 0 {
				t.Fatalf("%s: no server plans %s", read.name, sql)
			}
			groups := (branches + foldGroup - 1) / foldGroup
			folded = folded || groups > 1
			if n := strings.Count(text, read.scan); n != branches {
				t.Fatalf("%s: %d scans %q for %d branches:\n%s", read.name, n, read.scan, branches, text)
			}
			if n := strings.Count(text, read.group); n > groups || (groups == 1 && n > 0) {
				t.Fatalf("%s: %d %q nodes for %d groups of %d branches:\n%s", read.name, n, read.group, groups, branches, text)
			}
			for _, per := range []string{"Subquery Scan", "Sort\n"} {
				if strings.Contains(text, per) {
					t.Fatalf("%s: plan has %q:\n%s", read.name, strings.TrimSpace(per), text)
				}
			}
		}
		if !folded {
			t.Fatalf("%s: no statement had more than one group of %d branches", read.name, foldGroup)
		}
	}
}
