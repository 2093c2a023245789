package plugin

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"
	"gorm.io/plugin/dbresolver"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/shardschema"
	"github.com/shardkit/shardkit/router"
)

// TestReadsGoToReplicas gives server "a" a replica: a database with the
// same shard schemas whose rows differ, standing in for a streaming
// replica, so that where each read went shows in what it returns.
func TestReadsGoToReplicas(t *testing.T) {
	var replica string
	e := newEnv(t, envOpts{before: func(e *env) {
		ctx := context.Background()
		replica = pgtest.NewDatabase(t, 1)
		conn := pgtest.Connect(t, replica)
		snap, err := e.cat.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, shard := range snap.ShardsOn("a") {
			if err := shardschema.ApplyShard(ctx, conn, snap.Layout, shard, testSQL, shardschema.ApplyOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		pgtest.Exec(t, e.dsnCatalog(t), `UPDATE shardkit.servers SET replicas = ARRAY[$1] WHERE name = 'a'`, replica)
	}})
	user := int64(1)
	shard := e.shardOf(user)
	if e.serverOf(t, shard) != "a" {
		t.Fatalf("user %d is not on server a", user)
	}
	p := Photo{UserID: user, Caption: "primary"}
	if err := e.db.Create(&p).Error; err != nil {
		t.Fatal(err)
	}
	// The "replica" has the row with another caption.
	pgtest.Exec(t, replica, "INSERT INTO "+pgx.Identifier{router.SchemaName(shard), "photos"}.Sanitize()+" (id, user_id, caption) VALUES ($1, $2, 'replica')", p.ID, user)

	var got Photo
	if err := e.db.First(&got, p.ID).Error; err != nil || got.Caption != "replica" {
		t.Fatalf("read: err %v caption %q, want the replica's", err, got.Caption)
	}
	if err := e.db.Clauses(dbresolver.Write).First(&got, p.ID).Error; err != nil || got.Caption != "primary" {
		t.Fatalf("read with dbresolver.Write: err %v caption %q, want the primary's", err, got.Caption)
	}
	// Writes go to the primary; reads in a transaction too.
	if err := e.db.Model(&p).Update("caption", "updated").Error; err != nil {
		t.Fatal(err)
	}
	err := e.db.Clauses(Shard(user)).Transaction(func(tx *gorm.DB) error {
		return tx.First(&got, p.ID).Error
	})
	if err != nil || got.Caption != "updated" {
		t.Fatalf("read in a transaction: err %v caption %q", err, got.Caption)
	}
}

// dsnCatalog returns the catalog's DSN.
func (e *env) dsnCatalog(t *testing.T) string {
	t.Helper()
	return e.catDSN
}
