// Package store is the photo service's data access: GORM models tagged for
// the shardkit plugin, queries that always name a shard key or an ID, and
// direct row counts per server for the admin page.
//
// A user's home shard is chosen at sign-up and carried in the shard bits of
// the user's ID. Every user-owned table tags its user-ID column shard:"id",
// so a user's row, photos and follows share one schema on one server; a
// like is tagged shard:"id" on its photo ID and lives with the photo.
//
//	st := store.New(db, rt) // db uses plugin.Register(plugin.Config{Router: rt, IDs: ids}, store.Models()...)
//	u, err := st.CreateUser(ctx, "ada", "ada_l") // name, unique username (or "")
//	p, err := st.CreatePhoto(ctx, store.Photo{UserID: u.ID, URL: "https://…"})
//	feed, missing, err := st.Feed(ctx, followerID, 0, 20) // missing: shards of unavailable servers
package store
