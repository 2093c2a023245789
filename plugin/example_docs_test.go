package plugin_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"gorm.io/gorm"

	"github.com/shardkit/shardkit/plugin"
)

// The examples in this file need a database, so they are compiled but not
// run; db stands for a *gorm.DB with the plugin registered, as in
// ExampleRegister. docs/ quotes their code, and internal/harness/docscheck checks
// that it still does.

// A transaction scoped to one user's shard: every statement in it runs on
// that shard's server, and raw SQL resolves unqualified names in the
// shard's schema.
func ExampleShard() {
	var db *gorm.DB // with the plugin registered, as in ExampleRegister
	userID, id, c := int64(42), int64(3236157012032419020), "at the beach"
	err := db.Clauses(plugin.Shard(userID)).Transaction(func(tx *gorm.DB) error {
		// every statement here runs on the user's shard, in one transaction;
		// raw SQL sees the shard's schema on its search_path
		return tx.Exec("UPDATE photos SET caption = ? WHERE id = ?", c, id).Error
	})
	if err != nil {
		log.Print(err)
	}
}

// A read of every shard, asked for explicitly: the newest photos of all
// users, merged in order across the servers.
func ExampleAllShards() {
	var db *gorm.DB // with the plugin registered, as in ExampleRegister
	var latest []Photo
	db.Clauses(plugin.AllShards()).Order("id desc").Limit(20).Find(&latest) // explicit fan-out
	fmt.Println(len(latest))
}

// A read across shards that returns what the reachable servers hold when
// one is down, and says which shards it could not read.
func ExamplePartial() {
	var db *gorm.DB // with the plugin registered, as in ExampleRegister
	var latest []Photo
	var pr plugin.PartialResult
	err := db.Clauses(plugin.AllShards(), plugin.Partial(&pr)).Order("id desc").Limit(20).Find(&latest).Error
	// err == nil; latest holds the servers that answered; pr.Missing lists the shards not read
	if err != nil {
		log.Fatal(err)
	}
	if !pr.Complete() {
		log.Printf("%d photos; shards %v not read: %v", len(latest), pr.Missing, pr.Errors)
	}
}

// A bulk load of rows from any mix of shards with COPY, and what to do
// with the parts that failed: the other parts stay committed.
func ExampleCopyFrom() {
	var db *gorm.DB // with the plugin registered, as in ExampleRegister
	ctx := context.Background()
	photos := []Photo{{UserID: 1}, {UserID: 2}, {UserID: 3}}
	report, err := plugin.CopyFrom(ctx, db, photos, // []Photo or []*Photo, any mix of shards
		plugin.OnCopyProgress(func(p plugin.CopyProgress) { log.Printf("%d of %d rows", p.Rows, p.TotalRows) }))
	var ce *plugin.CopyError
	if errors.As(err, &ce) {
		for _, part := range ce.Report.Failed() { // the other shards' parts are committed
			log.Printf("shard %d on %s: %d rows %s: %v", part.Shard, part.Server, part.Rows, part.State, part.Err)
			// photos[i] for i in part.Index: load them again after fixing the cause
		}
	}
	if err == nil {
		log.Printf("%d rows", report.Rows)
	}
}

// Lookup columns: a username and an email unique across all shards, and
// reads routed by them.
func Example_lookupColumns() {
	type User struct {
		ID       int64   `gorm:"primaryKey;autoIncrement:false" shard:"id"`
		Username string  `shard:"lookup"`
		Email    *string `shard:"lookup"` // nil (NULL) holds no value
	}
	var db *gorm.DB // with the plugin registered for &User{}
	k, u, us, names := int64(42), User{Username: "alice"}, []User{}, []string{"alice", "bob"}

	err := db.Clauses(plugin.Shard(k)).Create(&u).Error // errors.Is(err, plugin.ErrDuplicateLookup): taken
	db.First(&u, "username = ?", "alice")               // one read on the lookup's shard, one on alice's
	db.Where("username IN ?", names).Find(&us)          // the owners' shards only
	fmt.Println(errors.Is(err, plugin.ErrDuplicateLookup), len(us))
}

// The shard that holds a lookup value's row: a hash of the value's
// canonical text that never changes.
func ExampleLookupShard() {
	shard, err := plugin.LookupShard("alice", 2000)
	if err != nil {
		panic(err)
	}
	fmt.Println(shard, plugin.LookupTable("users", "username"))
	// Output: 183 users_username_lookup
}

// Reads across shards run as named prepared statements through a pooler
// that carries them in transaction mode (PgBouncer 1.21 or later with
// max_prepared_statements set, PgDog): docs/pooler.md.
func ExamplePreparedReads_always() {
	var db *gorm.DB       // opened on the application's default database
	var r plugin.ShardMap // the router, as in ExampleRegister
	err := db.Use(plugin.Register(plugin.Config{Router: r, PreparedReads: plugin.PreparedReadsAlways}, &Photo{}))
	if err != nil {
		log.Fatal(err)
	}
}
