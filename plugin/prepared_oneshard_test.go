package plugin

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// oneShardEnv is an environment whose servers have one connection each,
// so that a test reads the session its statements ran in, and users
// whose shards are on server a, one per shard.
func oneShardEnv(t *testing.T, prepared PreparedReads, users int) (*env, *sql.DB, []int64) {
	t.Helper()
	e := newEnv(t, envOpts{serial: true, shards: 64, cfg: func(c *Config) {
		c.MaxOpenConns, c.MaxIdleConns = 1, 1
		c.PreparedReads = prepared
	}})
	var onA []int64
	for u := int64(1); len(onA) < users; u++ {
		if e.serverOf(t, e.shardOf(u)) == "a" {
			onA = append(onA, u)
		}
	}
	srv, err := e.p.pools.get(e.r.Snapshot(), "a")
	if err != nil {
		t.Fatal(err)
	}
	return e, srv.DB, onA
}

// preparedOnShards counts the statements on photos prepared in the one
// session of db.
func preparedOnShards(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE '%"shard\_%"."photos"%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestOneShardStatementsPrepared(t *testing.T) {
	for _, c := range []struct {
		name     string
		prepared PreparedReads
		want     int
	}{{"direct", PreparedReadsDirect, 4}, {"never", PreparedReadsNever, 0}} {
		t.Run(c.name, func(t *testing.T) {
			e, a, users := oneShardEnv(t, c.prepared, 1)
			u := users[0]
			p := Photo{UserID: u, Caption: "x"}
			for range 3 {
				p = Photo{UserID: u, Caption: "x"}
				if err := e.db.Create(&p).Error; err != nil {
					t.Fatal(err)
				}
				var got Photo
				if err := e.db.First(&got, p.ID).Error; err != nil || got.ID != p.ID {
					t.Fatalf("First: %v, %+v", err, got)
				}
				if err := e.db.Where("user_id = ?", u).Take(&got).Error; err != nil || got.UserID != u {
					t.Fatalf("Take: %v, %+v", err, got)
				}
				if err := e.db.Model(&Photo{ID: p.ID}).Update("caption", "y").Error; err != nil {
					t.Fatal(err)
				}
			}
			// Raw text is the user's: never prepared by the plugin.
			var n int64
			if err := e.db.Clauses(Shard(u)).Transaction(func(tx *gorm.DB) error {
				return tx.Raw(`SELECT count(*) FROM photos WHERE user_id = ?`, u).Scan(&n).Error
			}); err != nil || n != 3 {
				t.Fatalf("raw: %v, %d", err, n)
			}
			if got := preparedOnShards(t, a); got != c.want {
				t.Fatalf("%d one-shard statements prepared on server a's connection, want %d (read by ID, read by key, insert, update by ID; raw SQL stays unnamed)", got, c.want)
			}
		})
	}
}

func TestOneShardStatementsBounded(t *testing.T) {
	defer func(n int) { preparedShardStmtsPerConn = n }(preparedShardStmtsPerConn)
	preparedShardStmtsPerConn = 5
	e, a, users := oneShardEnv(t, PreparedReadsDirect, 12)
	for _, u := range users {
		var got []Photo
		if err := e.db.Where("user_id = ?", u).Find(&got).Error; err != nil {
			t.Fatal(err)
		}
	}
	if got := preparedOnShards(t, a); got != 5 {
		t.Fatalf("%d one-shard statements prepared after reading %d shards, want the bound, 5", got, len(users))
	}
}

// preparedWrites counts the writes on photos prepared in the one session
// of db.
func preparedWrites(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM pg_prepared_statements WHERE statement ~ '^(INSERT|UPDATE|DELETE)' AND statement LIKE '%"shard\_%"."photos"%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Writes keep a cache of their own: writes to more shards than it holds
// close writes, never the reads the connection keeps prepared.
func TestOneShardWritesBounded(t *testing.T) {
	defer func(r, w int) { preparedShardStmtsPerConn, preparedShardWritesPerConn = r, w }(preparedShardStmtsPerConn, preparedShardWritesPerConn)
	preparedShardStmtsPerConn, preparedShardWritesPerConn = 5, 3
	e, a, users := oneShardEnv(t, PreparedReadsDirect, 12)
	for _, u := range users[:5] {
		var got []Photo
		if err := e.db.Where("user_id = ?", u).Find(&got).Error; err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range users {
		p := Photo{UserID: u, Caption: "x"}
		if err := e.db.Create(&p).Error; err != nil {
			t.Fatal(err)
		}
	}
	if got := preparedWrites(t, a); got != 3 {
		t.Fatalf("%d one-shard writes prepared after inserting into %d shards, want the bound, 3", got, len(users))
	}
	if got := preparedOnShards(t, a) - 3; got != 5 {
		t.Fatalf("%d one-shard reads still prepared after the writes, want all 5: writes closed reads", got)
	}
}

// What a prepared one-shard write holds of its backend's memory, by
// insert and update by ID: its cached plan's memory contexts, after the
// runs past which Postgres may plan it once for all.
func TestOneShardWritesMemory(t *testing.T) {
	const users = 16
	e, a, onA := oneShardEnv(t, PreparedReadsDirect, users)
	for range warmRounds {
		for _, u := range onA {
			p := Photo{UserID: u, Caption: "x"}
			if err := e.db.Create(&p).Error; err != nil {
				t.Fatal(err)
			}
			if err := e.db.Model(&Photo{ID: p.ID}).Update("caption", "y").Error; err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := preparedWrites(t, a); got != 2*users {
		t.Fatalf("%d one-shard writes prepared on server a's connection, want %d (an insert and an update of each shard)", got, 2*users)
	}
	var bytes int64
	if err := a.QueryRow(`SELECT coalesce(sum(total_bytes), 0) FROM pg_backend_memory_contexts
		WHERE name IN ('CachedPlanSource', 'CachedPlanQuery', 'CachedPlan') AND ident ~ '^(INSERT|UPDATE)' AND ident LIKE '%"shard\_%"."photos"%'`).Scan(&bytes); err != nil {
		t.Fatal(err)
	}
	per := bytes / (2 * users)
	t.Logf("a prepared one-shard write holds %d bytes of its backend's memory (%d statements, %d bytes)", per, 2*users, bytes)
	// The bound documented at preparedShardWritesPerConn.
	if per == 0 || per > 16<<10 {
		t.Fatalf("a prepared one-shard write holds %d bytes of its backend's memory, want at most the 16 KB the cache's bound assumes", per)
	}
}

// A column added under a prepared SELECT * changes its result type;
// Postgres refuses to run the statement again, and the read runs once
// unnamed, then prepared afresh.
func TestOneShardPreparedAfterAddColumn(t *testing.T) {
	e, a, users := oneShardEnv(t, PreparedReadsDirect, 1)
	u := users[0]
	p := Photo{UserID: u, Caption: "x"}
	if err := e.db.Create(&p).Error; err != nil {
		t.Fatal(err)
	}
	read := func() {
		t.Helper()
		var got Photo
		if err := e.db.First(&got, p.ID).Error; err != nil || got.ID != p.ID {
			t.Fatalf("First: %v, %+v", err, got)
		}
	}
	read()
	if _, err := a.ExecContext(context.Background(), fmt.Sprintf(`ALTER TABLE "shard_%04d"."photos" ADD COLUMN extra int`, e.shardOf(u))); err != nil {
		t.Fatal(err)
	}
	read()
	read()
	if err := e.db.Transaction(func(tx *gorm.DB) error {
		var got Photo
		return tx.First(&got, p.ID).Error
	}); err != nil {
		t.Fatal(err)
	}
}

// A prepared write runs on after a column is added to its table (Postgres
// plans it again), and a write returning every column is never prepared:
// inside GORM's transaction its changed result could not run past the
// prepared statement.
func TestOneShardWritePreparedAfterAddColumn(t *testing.T) {
	e, a, users := oneShardEnv(t, PreparedReadsDirect, 1)
	u := users[0]
	write := func() Photo {
		t.Helper()
		p := Photo{UserID: u, Caption: "x"}
		if err := e.db.Create(&p).Error; err != nil {
			t.Fatalf("Create: %v", err)
		}
		if err := e.db.Clauses(clause.Returning{}).Create(&Photo{UserID: u, Caption: "r"}).Error; err != nil {
			t.Fatalf("Create returning every column: %v", err)
		}
		if err := e.db.Model(&Photo{ID: p.ID}).Update("caption", "y").Error; err != nil {
			t.Fatalf("Update: %v", err)
		}
		return p
	}
	write()
	if _, err := a.ExecContext(context.Background(), fmt.Sprintf(`ALTER TABLE "shard_%04d"."photos" ADD COLUMN extra int NOT NULL DEFAULT 7`, e.shardOf(u))); err != nil {
		t.Fatal(err)
	}
	p := write()
	var extra int
	if err := a.QueryRow(fmt.Sprintf(`SELECT extra FROM "shard_%04d"."photos" WHERE id = $1 AND caption = 'y'`, e.shardOf(u)), p.ID).Scan(&extra); err != nil || extra != 7 {
		t.Fatalf("the row written after the column was added: extra %d, %v", extra, err)
	}
	if got := preparedWrites(t, a); got != 2 {
		t.Fatalf("%d one-shard writes prepared, want 2 (the insert and the update; not the insert returning every column)", got)
	}
}

// preparedOneShard counts the one-shard statements prepared in the one
// session of db.
func preparedOneShard(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'shardkit\_one\_%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The one-shard statements of a connection share its memory budget with
// its reads across shards: once it has run one, they hold what the
// reads across shards leave, their least recently used closed.
func TestOneShardStatementsMemoryBudget(t *testing.T) {
	defer func(n int) { preparedBytesPerConn = n }(preparedBytesPerConn)
	const share = 5 // one-shard reads left beside the reads across shards
	preparedBytesPerConn = preparedReadsPerConn*readAcrossBytes + share*oneShardReadBytes
	e, a, users := oneShardEnv(t, PreparedReadsDirect, 12)
	read := func(u int64) {
		t.Helper()
		var got []Photo
		if err := e.db.Where("user_id = ?", u).Find(&got).Error; err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range users {
		read(u)
	}
	if got := preparedOneShard(t, a); got != len(users) {
		t.Fatalf("%d one-shard reads prepared, want all %d: no read across shards takes the budget yet", got, len(users))
	}
	var all []Photo
	if err := e.db.Clauses(AllShards()).Find(&all).Error; err != nil {
		t.Fatal(err)
	}
	read(users[0]) // a statement the connection holds: closes one
	if got := preparedOneShard(t, a); got != len(users)-1 {
		t.Fatalf("%d one-shard reads prepared after a run over the budget, want %d: one closed", got, len(users)-1)
	}
	var some []Photo // a new read on users[0]'s shard: closes what is over
	if err := e.db.Where("user_id = ? AND caption = ?", users[0], "x").Find(&some).Error; err != nil {
		t.Fatal(err)
	}
	if got := preparedOneShard(t, a); got != share {
		t.Fatalf("%d one-shard reads prepared after the connection ran a read across shards, want the %d its budget leaves", got, share)
	}
	var held int64
	if err := a.QueryRow(`SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'shardkit\_one\_%' AND statement LIKE '%' || $1 || '%'`, fmt.Sprintf(`"shard_%04d"`, e.shardOf(users[0]))).Scan(&held); err != nil || held != 2 {
		t.Fatalf("the most recently used shard's reads: %d prepared (%v), want both kept", held, err)
	}
}

// What a prepared one-shard read holds of its backend's memory, by ID
// and by key, after the runs past which Postgres may plan it once for
// all: at most the oneShardReadBytes the budget counts it for.
func TestOneShardReadsMemory(t *testing.T) {
	const users = 16
	e, a, onA := oneShardEnv(t, PreparedReadsDirect, users)
	ids := map[int64]int64{}
	for _, u := range onA {
		p := Photo{UserID: u, Caption: "x"}
		if err := e.db.Create(&p).Error; err != nil {
			t.Fatal(err)
		}
		ids[u] = p.ID
	}
	for range warmRounds {
		for _, u := range onA {
			var p Photo
			if err := e.db.First(&p, ids[u]).Error; err != nil {
				t.Fatal(err)
			}
			if err := e.db.Where("user_id = ?", u).Take(&p).Error; err != nil {
				t.Fatal(err)
			}
		}
	}
	var bytes int64
	if err := a.QueryRow(`SELECT coalesce(sum(total_bytes), 0) FROM pg_backend_memory_contexts
		WHERE name IN ('CachedPlanSource', 'CachedPlanQuery', 'CachedPlan') AND ident ~ '^SELECT' AND ident LIKE '%"shard\_%"."photos"%'`).Scan(&bytes); err != nil {
		t.Fatal(err)
	}
	per := bytes / (2 * users)
	t.Logf("a prepared one-shard read holds %d bytes of its backend's memory (%d statements, %d bytes)", per, 2*users, bytes)
	if per == 0 || per > oneShardReadBytes {
		t.Fatalf("a prepared one-shard read holds %d bytes of its backend's memory, want at most the %d its budget counts", per, oneShardReadBytes)
	}
}
