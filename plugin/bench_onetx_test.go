package plugin

import (
	"testing"

	"gorm.io/gorm"
)

// BenchmarkOneShardTx measures one-shard transactions, which atomic
// transactions must leave as they were: a Shard-scoped Transaction that
// creates a photo, and a Create in GORM's own transaction. The file uses
// nothing newer than the plugin before atomic transactions, so that it
// runs on that code too, for comparison:
//
//	SHARDKIT_PG_DURABLE=1 go test ./plugin -run '^$' -bench BenchmarkOneShardTx -benchtime 3000x -count 5
func BenchmarkOneShardTx(b *testing.B) {
	e := newEnv(b, envOpts{})
	const user = 7
	b.Run("Shard-Transaction", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			err := e.db.Clauses(Shard(int64(user))).Transaction(func(tx *gorm.DB) error { return tx.Create(&Photo{UserID: user}).Error })
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Create", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if err := e.db.Create(&Photo{UserID: user}).Error; err != nil {
				b.Fatal(err)
			}
		}
	})
}
