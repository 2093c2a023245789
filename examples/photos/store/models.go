package store

import "time"

// User is a member. A user's home shard is chosen at sign-up and carried in
// the shard bits of the user's ID; the user row, the user's photos and
// follows all live there (shard:"id" on each user-ID column), so one user's
// data is one schema on one server.
type User struct {
	ID   int64  `gorm:"primaryKey;autoIncrement:false" shard:"id" json:"id,string"`
	Name string `json:"name"`
	// Username is unique across all shards (see CreateUser); nil for
	// users made without one.
	Username  *string   `shard:"lookup" json:"username,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// Photo is the metadata of an uploaded photo, on its owner's shard: its
// ID has the same shard bits as its owner's.
type Photo struct {
	ID        int64     `gorm:"primaryKey;autoIncrement:false" json:"id,string"`
	UserID    int64     `shard:"id" json:"user_id,string"`
	Caption   string    `json:"caption"`
	URL       string    `json:"url"`
	Width     int       `json:"width"`
	Height    int       `json:"height"`
	CreatedAt time.Time `json:"created_at"`
}

// Like is one user's like of a photo. It lives on the photo's shard (found
// from the photo ID's shard bits), so a photo's likes are one query away.
type Like struct {
	ID        int64     `gorm:"primaryKey;autoIncrement:false" json:"id,string"`
	PhotoID   int64     `shard:"id" json:"photo_id,string"`
	UserID    int64     `json:"user_id,string"`
	CreatedAt time.Time `json:"created_at"`
}

// Follow says FollowerID follows FolloweeID. It lives on the follower's
// shard: a feed starts by reading the follower's follows.
type Follow struct {
	ID         int64     `gorm:"primaryKey;autoIncrement:false" json:"id,string"`
	FollowerID int64     `shard:"id" json:"follower_id,string"`
	FolloweeID int64     `json:"followee_id,string"`
	CreatedAt  time.Time `json:"created_at"`
}

// Follower is Follow's twin on the followee's shard: who follows
// FolloweeID. Follow and Unfollow write both in one atomic transaction.
type Follower struct {
	ID         int64     `gorm:"primaryKey;autoIncrement:false" json:"id,string"`
	FolloweeID int64     `shard:"id" json:"followee_id,string"`
	FollowerID int64     `json:"follower_id,string"`
	CreatedAt  time.Time `json:"created_at"`
}

// Models lists every sharded model, for plugin.Register.
func Models() []any { return []any{&User{}, &Photo{}, &Like{}, &Follow{}, &Follower{}} }
