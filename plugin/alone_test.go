package plugin

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"
)

// writeTracer records the transaction commands and writes sent to the
// servers, in order.
type writeTracer struct {
	mu   sync.Mutex
	sent []string
}

func (w *writeTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	word, _, _ := strings.Cut(strings.TrimSpace(d.SQL), " ")
	switch word = strings.ToLower(word); word {
	case "begin", "commit", "rollback", "insert", "update", "delete":
		w.mu.Lock()
		w.sent = append(w.sent, word)
		w.mu.Unlock()
	}
	return ctx
}

func (*writeTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// take returns what was sent since the last take.
func (w *writeTracer) take() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := strings.Join(w.sent, ",")
	w.sent = nil
	return s
}

// TestOneShardWriteAlone: a one-shard Create, Update or Delete that is the
// only statement of GORM's transaction runs without BEGIN and COMMIT, and
// one with anything that could run after it in the transaction (an
// association to save, a callback of another's) keeps the transaction.
func TestOneShardWriteAlone(t *testing.T) {
	tr := &writeTracer{}
	e := newEnv(t, envOpts{cfg: func(c *Config) {
		c.OpenDB = func(dsn string) (*sql.DB, error) {
			pc, err := pgx.ParseConfig(dsn)
			if err != nil {
				return nil, err
			}
			pc.Tracer = tr
			return stdlib.OpenDB(*pc), nil
		}
	}})
	const user = 1
	db := e.db
	want := func(t *testing.T, sent string) {
		t.Helper()
		if got := tr.take(); got != sent {
			t.Fatalf("sent %q, want %q", got, sent)
		}
	}
	tr.take()

	p := Photo{UserID: user, Caption: "one"}
	if err := db.Create(&p).Error; err != nil {
		t.Fatal(err)
	}
	want(t, "insert")
	if err := db.Model(&Photo{ID: p.ID}).Update("caption", "two").Error; err != nil {
		t.Fatal(err)
	}
	want(t, "update")
	var back Photo
	if err := db.First(&back, p.ID).Error; err != nil || back.Caption != "two" {
		t.Fatalf("read back %+v, %v; want caption two", back, err)
	}
	if err := db.Delete(&Photo{}, p.ID).Error; err != nil {
		t.Fatal(err)
	}
	want(t, "delete")

	// A failed write that ran alone reports its own error.
	if err := db.Create(&Photo{ID: back.ID, UserID: user, Caption: "first"}).Error; err != nil {
		t.Fatal(err)
	}
	tr.take()
	var pe *pgconn.PgError
	if err := db.Create(&Photo{ID: back.ID, UserID: user, Caption: "dup"}).Error; !errors.As(err, &pe) || pe.Code != "23505" {
		t.Fatalf("a second row of the same ID: %v, want a unique violation", err)
	}
	want(t, "insert")

	// An update of every shard has a transaction on each server.
	if err := db.Clauses(AllShards()).Model(&Photo{}).Where("caption = ?", "none").Update("likes", 1).Error; err != nil {
		t.Fatal(err)
	}
	if got := tr.take(); strings.Count(got, "begin") != len(e.servers) || strings.Count(got, "commit") != len(e.servers) {
		t.Fatalf("an update of every shard sent %q, want a begin and a commit on each of %d servers", got, len(e.servers))
	}

	// Its likes are saved after the photo, in the photo's transaction.
	if err := db.Create(&Photo{UserID: user, Caption: "liked", LikeRows: []Like{{UserID: 2}}}).Error; err != nil {
		t.Fatal(err)
	}
	want(t, "begin,insert,insert,commit")

	// So is whatever another's callback after the write may run.
	if err := db.Callback().Create().After("gorm:create").Register("test:after_create", func(*gorm.DB) {}); err != nil {
		t.Fatal(err)
	}
	if err := db.Create(&Photo{UserID: user, Caption: "watched"}).Error; err != nil {
		t.Fatal(err)
	}
	want(t, "begin,insert,commit")
	if err := db.Callback().Create().Remove("test:after_create"); err != nil {
		t.Fatal(err)
	}
	if err := db.Create(&Photo{UserID: user, Caption: "unwatched"}).Error; err != nil {
		t.Fatal(err)
	}
	want(t, "insert")

	// And a user's transaction stays one.
	if err := db.Transaction(func(tx *gorm.DB) error {
		return tx.Create(&Photo{UserID: user, Caption: "in tx"}).Error
	}); err != nil {
		t.Fatal(err)
	}
	if got := tr.take(); !strings.HasPrefix(got, "begin") || !strings.HasSuffix(got, "insert,commit") {
		t.Fatalf("a user's transaction sent %q, want begin … insert,commit", got)
	}
}
