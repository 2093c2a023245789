package plugin

import (
	"context"
	"errors"
	"testing"

	"gorm.io/gorm"
)

// The tests below hold the plugin to GORM's own transaction semantics for
// what it does not shard: each mirrors a test of GORM's suite that fails
// when the plugin changes them (TestCancelTransaction,
// TestTransactionOnClosedConn, TestPreparedStmtConcurrentClose).

func TestTransactionOnCancelledContextFails(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	err := e.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		ran = true
		var a Account
		tx.First(&a) // an unsharded table; its error is ignored, as in GORM's test
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Transaction on a cancelled context: err = %v, want context.Canceled", err)
	}
	if ran {
		t.Fatal("the transaction's function ran on a cancelled context")
	}
	// A Shard scope begins at once, on the shard's server: the same answer.
	err = e.db.WithContext(ctx).Clauses(Shard(3)).Transaction(func(*gorm.DB) error { return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Transaction with a Shard scope on a cancelled context: err = %v", err)
	}
}

func TestTransactionOnClosedDefaultPoolFails(t *testing.T) {
	e := newEnv(t, envOpts{})
	// A transaction that ran nothing commits on the default connection, as
	// in plain GORM: it works while the pool is open…
	if err := e.db.Transaction(func(*gorm.DB) error { return nil }); err != nil {
		t.Fatalf("empty transaction: %v", err)
	}
	if err := e.defPool.DB.Close(); err != nil {
		t.Fatal(err)
	}
	// …and fails once it is closed, with and without PrepareStmt.
	if err := e.db.Transaction(func(*gorm.DB) error { return nil }); err == nil {
		t.Error("Transaction on a closed default pool: no error")
	}
	if err := e.db.Session(&gorm.Session{PrepareStmt: true}).Transaction(func(*gorm.DB) error { return nil }); err == nil {
		t.Error("Transaction with PrepareStmt on a closed default pool: no error")
	}
	// Sharded statements do not use the default pool and still run.
	if err := e.db.Transaction(func(tx *gorm.DB) error { return tx.Create(&Photo{UserID: 3}).Error }); err != nil {
		t.Errorf("sharded transaction with the default pool closed: %v", err)
	}
}

func TestPrepareStmtKeepsGORMsStatementManager(t *testing.T) {
	e := newEnv(t, envOpts{})
	db := e.openDB(t, &gorm.Config{PrepareStmt: true})
	pdb, ok := db.ConnPool.(*gorm.PreparedStmtDB)
	if !ok {
		t.Fatalf("db.ConnPool is %T, want *gorm.PreparedStmtDB", db.ConnPool)
	}
	if err := db.Exec(`CREATE TABLE notes (id bigserial PRIMARY KEY, body text)`).Error; err != nil {
		t.Fatal(err)
	}
	type Note struct {
		ID   int64
		Body string
	}
	// Unsharded statements are prepared by GORM on the default connection,
	// in and out of transactions; sharded ones are routed. A transaction
	// that mixes both is atomic (two-phase commit through GORM's
	// PreparedStmtTX).
	if err := db.Create(&Note{Body: "a"}).Error; err != nil {
		t.Fatal(err)
	}
	var p Photo
	err := db.Clauses(Atomic()).Transaction(func(tx *gorm.DB) error {
		p = Photo{UserID: 11, Caption: "prepared"}
		if err := tx.Create(&p).Error; err != nil {
			return err
		}
		return tx.Create(&Note{Body: "b"}).Error
	})
	if err != nil {
		t.Fatal(err)
	}
	e.assertAt(t, "photos", p.ID, e.shardOf(11))
	pdb.Mux.Lock()
	prepared := len(pdb.Stmts.Keys())
	pdb.Mux.Unlock()
	if prepared == 0 {
		t.Fatal("GORM prepared no statement on the default connection")
	}
	pdb.Close()
	pdb.Mux.Lock()
	left := len(pdb.Stmts.Keys())
	pdb.Mux.Unlock()
	if left != 0 {
		t.Fatalf("%d prepared statements left after Close", left)
	}
	var n int64
	if err := db.Model(&Note{}).Count(&n).Error; err != nil || n != 2 {
		t.Fatalf("notes after Close: %d, err %v", n, err)
	}
	var got Photo
	if err := db.Where("user_id = ?", 11).First(&got).Error; err != nil || got.ID != p.ID {
		t.Fatalf("sharded read after Close: %+v, err %v", got, err)
	}
}
