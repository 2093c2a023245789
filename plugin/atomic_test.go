package plugin

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"gorm.io/gorm"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest"
)

// Audit is an unsharded table on the default connection.
type Audit struct {
	ID   int64
	Note string
}

// userOn returns the n-th user key (from 1) whose shard lives on server.
func (e *env) userOn(t testing.TB, server string, n int) int64 {
	t.Helper()
	return shardtest.UserOn(t, e.r, e.shards, server, n)
}

// prepared counts the prepared transactions of a database.
func prepared(t testing.TB, dsn string) int {
	t.Helper()
	var n int
	conn := pgtest.Connect(t, dsn)
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// decisions counts the decision rows on a server.
func (e *env) decisions(t testing.TB, server string) int {
	t.Helper()
	var n int
	conn := pgtest.Connect(t, e.dsn[server])
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM shardkit.tx_decisions`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// photosWith counts, by direct SQL on every server, the photos with a caption.
func (e *env) photosWith(t testing.TB, caption string) int {
	t.Helper()
	total := 0
	for _, name := range e.servers {
		conn := pgtest.Connect(t, e.dsn[name])
		for _, s := range e.r.Snapshot().ShardsOn(name) {
			var n int
			q := fmt.Sprintf(`SELECT count(*) FROM shard_%04d.photos WHERE caption = $1`, s)
			if err := conn.QueryRow(context.Background(), q, caption).Scan(&n); err != nil {
				t.Fatal(err)
			}
			total += n
		}
	}
	return total
}

func (e *env) auditTable(t testing.TB) {
	t.Helper()
	pgtest.Exec(t, e.def, `CREATE TABLE audits (id bigserial PRIMARY KEY, note text NOT NULL)`)
}

func (e *env) auditsWith(t testing.TB, note string) int {
	t.Helper()
	var n int
	conn := pgtest.Connect(t, e.def)
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM audits WHERE note = $1`, note).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (e *env) noPrepared(t testing.TB) {
	t.Helper()
	for _, name := range e.servers {
		if n := prepared(t, e.dsn[name]); n != 0 {
			t.Fatalf("%d prepared transactions left on server %s", n, name)
		}
	}
	if n := prepared(t, e.def); n != 0 {
		t.Fatalf("%d prepared transactions left on the default connection", n)
	}
}

func TestAtomicAcrossServersAndDefault(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.auditTable(t)
	ua, ub := e.userOn(t, "a", 1), e.userOn(t, "b", 1)
	tests := []struct {
		name      string
		audit     bool
		users     []int64
		decisions int // rows added on the coordinator
	}{
		{"two servers", false, []int64{ua, ub}, 1},
		{"two servers and the default connection", true, []int64{ua, ub}, 1},
		{"one server and the default connection", true, []int64{ua}, 1},
		{"two shards on one server", false, []int64{ua, e.userOn(t, "a", 2)}, 0},
		{"one shard", false, []int64{ub}, 0},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			caption := fmt.Sprintf("atomic-%d", i)
			before := e.decisions(t, "a") + e.decisions(t, "b")
			stats := e.p.AtomicStats()
			err := e.db.Clauses(Atomic()).Transaction(func(tx *gorm.DB) error {
				for _, u := range tt.users {
					if err := tx.Create(&Photo{UserID: u, Caption: caption}).Error; err != nil {
						return err
					}
				}
				if tt.audit {
					return tx.Create(&Audit{Note: caption}).Error
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if n := e.photosWith(t, caption); n != len(tt.users) {
				t.Fatalf("%d photos committed, want %d", n, len(tt.users))
			}
			if tt.audit && e.auditsWith(t, caption) != 1 {
				t.Fatal("the default connection's part is not committed")
			}
			e.noPrepared(t)
			if got := e.decisions(t, "a") + e.decisions(t, "b") - before; got != tt.decisions {
				t.Fatalf("%d decision rows recorded, want %d (a single participant commits plainly)", got, tt.decisions)
			}
			if got := e.p.AtomicStats().Committed - stats.Committed; got != int64(tt.decisions) {
				t.Fatalf("AtomicStats.Committed grew by %d, want %d", got, tt.decisions)
			}
		})
	}
}

func TestAtomicRollsBackEverywhere(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.auditTable(t)
	ua, ub := e.userOn(t, "a", 1), e.userOn(t, "b", 1)
	write := func(tx *gorm.DB, caption string) error {
		for _, u := range []int64{ua, ub} {
			if err := tx.Create(&Photo{UserID: u, Caption: caption}).Error; err != nil {
				return err
			}
		}
		return tx.Create(&Audit{Note: caption}).Error
	}
	t.Run("the function fails", func(t *testing.T) {
		boom := errors.New("boom")
		err := e.db.Clauses(Atomic()).Transaction(func(tx *gorm.DB) error {
			if err := write(tx, "fn-fails"); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("err = %v", err)
		}
		if e.photosWith(t, "fn-fails") != 0 || e.auditsWith(t, "fn-fails") != 0 {
			t.Fatal("rows of a rolled-back transaction are visible")
		}
	})
	t.Run("a participant fails to prepare", func(t *testing.T) {
		// PostgreSQL refuses to prepare a transaction that used a
		// temporary table: the default connection's part fails after
		// server b's part prepared.
		err := e.db.Clauses(Atomic()).Transaction(func(tx *gorm.DB) error {
			if err := write(tx, "prepare-fails"); err != nil {
				return err
			}
			return tx.Exec(`CREATE TEMP TABLE scratch (i int)`).Error
		})
		if !errors.Is(err, ErrAtomicCommit) {
			t.Fatalf("err = %v, want ErrAtomicCommit", err)
		}
		if e.photosWith(t, "prepare-fails") != 0 || e.auditsWith(t, "prepare-fails") != 0 {
			t.Fatal("rows of a transaction that failed to prepare are visible")
		}
		if e.p.AtomicStats().Aborted == 0 {
			t.Fatal("AtomicStats.Aborted not counted")
		}
	})
	e.noPrepared(t)
	if n := e.decisions(t, "a") + e.decisions(t, "b"); n != 0 {
		t.Fatalf("%d decision rows of aborted transactions", n)
	}
}

func TestAtomicMultiShardStatements(t *testing.T) {
	e := newEnv(t, envOpts{})
	var users []int64
	for _, s := range []string{"a", "b"} {
		for n := 1; n <= 3; n++ {
			users = append(users, e.userOn(t, s, n))
		}
	}
	rows := func(caption string) []Photo {
		var ps []Photo
		for _, u := range users {
			ps = append(ps, Photo{UserID: u, Caption: caption})
		}
		return ps
	}
	// A Create of rows of several shards, in one transaction of its own.
	ps := rows("many")
	if err := e.db.Clauses(Atomic()).Create(&ps).Error; err != nil {
		t.Fatal(err)
	}
	if n := e.photosWith(t, "many"); n != len(users) {
		t.Fatalf("%d rows, want %d", n, len(users))
	}
	if e.decisions(t, "a")+e.decisions(t, "b") != 1 {
		t.Fatal("a Create under Atomic did not commit by two-phase commit")
	}
	// CreateInBatches and multi-shard updates inside a user transaction.
	err := e.db.Clauses(Atomic()).Transaction(func(tx *gorm.DB) error {
		more := rows("batched")
		if err := tx.CreateInBatches(&more, 2).Error; err != nil {
			return err
		}
		return tx.Clauses(AllShards()).Model(&Photo{}).Where("caption = ?", "many").Update("likes", 7).Error
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := e.photosWith(t, "batched"); n != len(users) {
		t.Fatalf("%d batched rows, want %d", n, len(users))
	}
	var liked int64
	if err := e.db.Clauses(AllShards()).Model(&Photo{}).Where("likes = 7").Count(&liked).Error; err != nil || liked != int64(len(users)) {
		t.Fatalf("%d rows updated across shards, %v", liked, err)
	}
	e.noPrepared(t)
}

func TestAtomicRefusals(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.auditTable(t)
	ua, ub := e.userOn(t, "a", 1), e.userOn(t, "b", 1)
	tests := []struct {
		name string
		tx   *gorm.DB
		fn   func(tx *gorm.DB) error
		want error
	}{
		{"cross shard without the opt-in", e.db, func(tx *gorm.DB) error {
			if err := tx.Create(&Photo{UserID: ua}).Error; err != nil {
				return err
			}
			return tx.Create(&Photo{UserID: ub}).Error
		}, ErrCrossShard},
		{"a shard, then the default connection", e.db, func(tx *gorm.DB) error {
			if err := tx.Create(&Photo{UserID: ua}).Error; err != nil {
				return err
			}
			return tx.Create(&Audit{Note: "x"}).Error
		}, ErrMixedTransaction},
		{"the default connection, then a shard", e.db, func(tx *gorm.DB) error {
			if err := tx.Create(&Audit{Note: "x"}).Error; err != nil {
				return err
			}
			return tx.Create(&Photo{UserID: ua}).Error
		}, ErrMixedTransaction},
		{"raw SQL on the default connection in a Shard transaction", e.db.Clauses(Shard(ua)), func(tx *gorm.DB) error {
			return tx.Exec(`INSERT INTO audits (note) VALUES ('x')`).Error
		}, ErrMixedTransaction},
		{"raw SQL on a sharded table in an atomic transaction", e.db.Clauses(Atomic()), func(tx *gorm.DB) error {
			if err := tx.Create(&Photo{UserID: ua}).Error; err != nil {
				return err
			}
			return tx.Exec(`UPDATE photos SET likes = 1 WHERE user_id = ?`, ua).Error
		}, ErrUnroutableSQL},
		{"no shard key in an atomic transaction", e.db.Clauses(Atomic()), func(tx *gorm.DB) error {
			return tx.Model(&Photo{}).Where("caption = ?", "x").Update("likes", 1).Error
		}, ErrMissingShardKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.tx.Transaction(tt.fn)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
	var n int64
	if err := e.db.Clauses(AllShards()).Model(&Photo{}).Count(&n).Error; err != nil || n != 0 {
		t.Fatalf("%d photos after refused transactions (%v)", n, err)
	}
	if e.auditsWith(t, "x") != 0 {
		t.Fatal("an audit row of a refused transaction is committed")
	}
	// Reads and writes of the default connection alone stay allowed, and so
	// do a shard alone.
	if err := e.db.Transaction(func(tx *gorm.DB) error { return tx.Create(&Audit{Note: "alone"}).Error }); err != nil {
		t.Fatal(err)
	}
}
