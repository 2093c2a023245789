package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/shardkit/shardkit/plugin"
	"github.com/shardkit/shardkit/router"
)

// Page bounds for list calls.
const (
	DefaultLimit = 20
	MaxLimit     = 100
)

// Store is the photo service's data access, through GORM and the shardkit
// plugin: every statement names a shard key or an ID, so the plugin sends
// it to the right server and schema.
type Store struct {
	db *gorm.DB
	rt *router.Router
}

// New returns a store over a GORM handle on which the shardkit plugin is registered.
// New IDs come from the plugin (see OpenDB).
func New(db *gorm.DB, rt *router.Router) *Store {
	return &Store{db: db, rt: rt}
}

// DB returns the store's GORM handle.
func (s *Store) DB() *gorm.DB { return s.db }

// Router returns the store's router.
func (s *Store) Router() *router.Router { return s.rt }

func clampLimit(n int) int {
	if n <= 0 {
		return DefaultLimit
	}
	return min(n, MaxLimit)
}

// CreateUser creates a user on a random logical shard: the user's ID comes
// from the generator for that shard, so its shard bits name the user's home
// shard, where the user's photos and follows will live too. A username
// (optional: "" for none) is unique across all shards, through the
// plugin's lookup table; a taken one is ErrConflict.
func (s *Store) CreateUser(ctx context.Context, name, username string) (User, error) {
	name = strings.TrimSpace(name)
	if err := checkText("name", name, true, MaxNameChars); err != nil {
		return User{}, err
	}
	var handle *string
	if username != "" {
		username = strings.ToLower(username) // one user per spelling
		if err := checkUsername(username); err != nil {
			return User{}, err
		}
		handle = &username
	}
	// A user's shard key is its own ID: the Shard scope places the new
	// row, and the plugin makes its ID there (in Go from the leased slot,
	// or, with no usable slot — the catalog down —, by the shard's
	// next_id(), read back).
	shard := rand.IntN(s.rt.Snapshot().Shards)
	u := User{Name: name, Username: handle}
	err := s.db.WithContext(ctx).Clauses(plugin.Shard(int64(shard))).Create(&u).Error
	if errors.Is(err, plugin.ErrDuplicateLookup) {
		return User{}, fmt.Errorf("%w: username %q is taken", ErrConflict, username)
	}
	if err != nil {
		return User{}, err
	}
	return u, nil
}

// GetUserByUsername returns the user with a username: the plugin reads the
// username's lookup row, then the user on its home shard.
func (s *Store) GetUserByUsername(ctx context.Context, username string) (User, error) {
	username = strings.ToLower(username)
	if err := checkUsername(username); err != nil {
		return User{}, err
	}
	var u User
	err := s.db.WithContext(ctx).Where("username = ?", username).Take(&u).Error
	if isNotFound(err) {
		return User{}, fmt.Errorf("%w: user @%s", ErrNotFound, username)
	}
	return u, err
}

// GetUser returns a user by ID.
func (s *Store) GetUser(ctx context.Context, id int64) (User, error) {
	if err := s.checkID("user id", id); err != nil {
		return User{}, err
	}
	var u User
	err := s.db.WithContext(ctx).Where("id = ?", id).Take(&u).Error
	if isNotFound(err) {
		return User{}, fmt.Errorf("%w: user %d", ErrNotFound, id)
	}
	return u, err
}

// CreatePhoto stores a photo's metadata on its owner's shard, in one
// shard-pinned transaction that also checks the owner exists.
func (s *Store) CreatePhoto(ctx context.Context, p Photo) (Photo, error) {
	if err := s.checkID("user id", p.UserID); err != nil {
		return Photo{}, err
	}
	if err := checkText("url", p.URL, true, MaxURLChars); err != nil {
		return Photo{}, err
	}
	if err := checkText("caption", p.Caption, false, MaxCaptionChars); err != nil {
		return Photo{}, err
	}
	if err := checkDimension("width", p.Width); err != nil {
		return Photo{}, err
	}
	if err := checkDimension("height", p.Height); err != nil {
		return Photo{}, err
	}
	err := s.shardTx(ctx, p.UserID, func(tx *gorm.DB) error {
		p.ID = 0
		var n int64
		if err := tx.Model(&User{}).Where("id = ?", p.UserID).Count(&n).Error; err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("%w: user %d", ErrNotFound, p.UserID)
		}
		return tx.Create(&p).Error
	})
	return p, err
}

// txAttempts bounds the runs of a shard transaction that the shard's move
// interrupted.
const txAttempts = 3

// shardTx runs fn in a transaction pinned to the shard of id. A move that
// cuts the shard over while the transaction runs makes the old server
// refuse its statements (plugin.ErrShardMoved): its fence refuses writes,
// and the application role is refused reads too from the cutover's write
// barrier on. Nothing was committed; once the map places the shard on its
// new server (awaitFlip), the whole transaction is run again there.
func (s *Store) shardTx(ctx context.Context, id int64, fn func(tx *gorm.DB) error) error {
	return s.pinnedTx(ctx, plugin.ShardOfID(id), []int64{id}, fn)
}

// pinnedTx is shardTx for any plugin scope of a transaction: one shard
// named, or plugin.Atomic() for a transaction across shards, whose parts
// all roll back when one shard's old server refuses a write (or its
// PREPARE) after a move, so it too is run again whole. ids are the keys
// whose shards the transaction touches.
func (s *Store) pinnedTx(ctx context.Context, scope clause.Expression, ids []int64, fn func(tx *gorm.DB) error) error {
	var err error
	deadline := time.Now().Add(moveWait)
	for attempt := 1; ; attempt++ {
		snap := s.rt.Snapshot()
		err = s.db.WithContext(ctx).Clauses(scope).Transaction(fn)
		if !errors.Is(err, plugin.ErrShardMoved) || attempt == txAttempts {
			return err
		}
		s.awaitFlip(ctx, snap, ids, deadline)
	}
}

// GetPhoto returns a photo by ID: the shard comes from the ID's bits.
func (s *Store) GetPhoto(ctx context.Context, id int64) (Photo, error) {
	if err := s.checkID("photo id", id); err != nil {
		return Photo{}, err
	}
	var p Photo
	err := s.db.WithContext(ctx).Where("id = ?", id).Take(&p).Error
	if isNotFound(err) {
		return Photo{}, fmt.Errorf("%w: photo %d", ErrNotFound, id)
	}
	return p, err
}

// ListPhotos returns a user's photos newest first (IDs grow with time),
// those with an ID below before when it is not zero, at most limit.
func (s *Store) ListPhotos(ctx context.Context, userID, before int64, limit int) ([]Photo, error) {
	if err := s.checkID("user id", userID); err != nil {
		return nil, err
	}
	q := s.db.WithContext(ctx).Where("user_id = ?", userID)
	if before > 0 {
		q = q.Where("id < ?", before)
	}
	out := []Photo{}
	err := q.Order("id DESC").Limit(clampLimit(limit)).Find(&out).Error
	return out, err
}

// Like records that userID likes a photo, on the photo's shard.
func (s *Store) Like(ctx context.Context, photoID, userID int64) (Like, error) {
	if err := s.checkID("photo id", photoID); err != nil {
		return Like{}, err
	}
	if err := s.checkID("user_id", userID); err != nil {
		return Like{}, err
	}
	if _, err := s.GetPhoto(ctx, photoID); err != nil {
		return Like{}, err
	}
	if _, err := s.GetUser(ctx, userID); err != nil {
		return Like{}, err
	}
	l := Like{PhotoID: photoID, UserID: userID}
	err := s.db.WithContext(ctx).Create(&l).Error
	if isUniqueViolation(err) {
		return Like{}, fmt.Errorf("%w: user %d already likes photo %d", ErrConflict, userID, photoID)
	}
	return l, err
}

// Likes returns a photo's likes, newest first.
func (s *Store) Likes(ctx context.Context, photoID, before int64, limit int) ([]Like, error) {
	if err := s.checkID("photo id", photoID); err != nil {
		return nil, err
	}
	q := s.db.WithContext(ctx).Where("photo_id = ?", photoID)
	if before > 0 {
		q = q.Where("id < ?", before)
	}
	out := []Like{}
	err := q.Order("id DESC").Limit(clampLimit(limit)).Find(&out).Error
	return out, err
}

// Follow records that follower follows followee: a Follow on the
// follower's shard and a Follower on the followee's, in one atomic
// transaction (two-phase commit when the shards are on two servers), so
// that Following and Followers never disagree.
func (s *Store) Follow(ctx context.Context, follower, followee int64) (Follow, error) {
	if err := s.checkID("user id", follower); err != nil {
		return Follow{}, err
	}
	if err := s.checkID("followee_id", followee); err != nil {
		return Follow{}, err
	}
	if follower == followee {
		return Follow{}, fmt.Errorf("%w: a user cannot follow themselves", ErrInvalid)
	}
	for _, id := range []int64{follower, followee} {
		if _, err := s.GetUser(ctx, id); err != nil {
			return Follow{}, err
		}
	}
	f := Follow{FollowerID: follower, FolloweeID: followee}
	err := s.pinnedTx(ctx, plugin.Atomic(), []int64{follower, followee}, func(tx *gorm.DB) error {
		if err := tx.Create(&f).Error; err != nil {
			return err
		}
		return tx.Create(&Follower{FolloweeID: followee, FollowerID: follower}).Error
	})
	if isUniqueViolation(err) {
		return Follow{}, fmt.Errorf("%w: user %d already follows %d", ErrConflict, follower, followee)
	}
	return f, err
}

// Unfollow deletes both rows of a follow in one atomic transaction. It
// returns ErrNotFound when follower does not follow followee.
func (s *Store) Unfollow(ctx context.Context, follower, followee int64) error {
	if err := s.checkID("user id", follower); err != nil {
		return err
	}
	if err := s.checkID("followee_id", followee); err != nil {
		return err
	}
	return s.pinnedTx(ctx, plugin.Atomic(), []int64{follower, followee}, func(tx *gorm.DB) error {
		res := tx.Where("follower_id = ? AND followee_id = ?", follower, followee).Delete(&Follow{})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return fmt.Errorf("%w: user %d does not follow %d", ErrNotFound, follower, followee)
		}
		return tx.Where("followee_id = ? AND follower_id = ?", followee, follower).Delete(&Follower{}).Error
	})
}

// Followers returns the IDs of the users who follow userID, read from
// userID's own shard.
func (s *Store) Followers(ctx context.Context, userID int64) ([]int64, error) {
	if err := s.checkID("user id", userID); err != nil {
		return nil, err
	}
	ids := []int64{}
	err := s.db.WithContext(ctx).Model(&Follower{}).Where("followee_id = ?", userID).
		Order("id").Pluck("follower_id", &ids).Error
	return ids, err
}

// Following returns the IDs of the users userID follows.
func (s *Store) Following(ctx context.Context, userID int64) ([]int64, error) {
	if err := s.checkID("user id", userID); err != nil {
		return nil, err
	}
	ids := []int64{}
	err := s.db.WithContext(ctx).Model(&Follow{}).Where("follower_id = ?", userID).
		Order("id").Pluck("followee_id", &ids).Error
	return ids, err
}

// Feed returns the newest photos of the users userID follows, newest first,
// below before when it is not zero. The followees' keys span several
// shards: the plugin reads them in one statement per server (a UNION ALL
// of that server's shards) and merges the pages by ID, which orders by
// time across shards. When a server is unavailable the feed holds the
// other servers' photos and missing lists the shards left out.
func (s *Store) Feed(ctx context.Context, userID, before int64, limit int) (photos []Photo, missing []int, err error) {
	limit = clampLimit(limit)
	followees, err := s.Following(ctx, userID)
	if err != nil || len(followees) == 0 {
		return []Photo{}, nil, err
	}
	// A home that is no longer the home refuses the application role: a
	// move's cutover revokes the role's grants there with its write
	// barrier, and flips the map right after. The plugin reroutes a
	// one-shard statement on that refusal, not yet a read across shards:
	// the feed waits for the flip (awaitFlip) and reads again on the new
	// map. A refusal with no move under way is a grant the role lacks,
	// which no retry cures.
	deadline := time.Now().Add(moveWait)
	for attempt := 1; ; attempt++ {
		snap := s.rt.Snapshot()
		photos, missing, err = s.feed(ctx, followees, before, limit)
		if !isPrivilegeError(err) || attempt == txAttempts || !s.awaitFlip(ctx, snap, followees, deadline) {
			return photos, missing, err
		}
	}
}

// moveWait bounds how long a statement that a moved shard's old home
// refused waits for the move's flip before it runs again: as long as the
// plugin holds a write on a fenced shard.
const moveWait = 2 * time.Second

// awaitFlip reloads the map until it is newer than was and has none of
// the shards of ids fenced, and reports whether it got there before
// deadline. It gives up at once on a map as old as was with none of those
// shards under a move (fenced or moving): no move is coming to end.
func (s *Store) awaitFlip(ctx context.Context, was *router.Snapshot, ids []int64, deadline time.Time) bool {
	for {
		now, err := s.rt.Reload(ctx)
		if err != nil {
			return false
		}
		fenced, moving := shardStates(now, ids)
		if now.Version > was.Version && !fenced {
			return true
		}
		if now.Version == was.Version && !fenced && !moving || time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// shardStates reports whether the map has the shard of one of ids fenced,
// and whether it has one moving.
func shardStates(snap *router.Snapshot, ids []int64) (fenced, moving bool) {
	for _, id := range ids {
		shard, err := snap.Layout.ShardOf(id)
		if err != nil {
			continue
		}
		if pl, err := snap.Placement(shard); err == nil {
			fenced = fenced || pl.State == router.StateFenced
			moving = moving || pl.State == router.StateMoving
		}
	}
	return fenced, moving
}

func (s *Store) feed(ctx context.Context, followees []int64, before int64, limit int) ([]Photo, []int, error) {
	var pr plugin.PartialResult
	q := s.db.WithContext(ctx).Clauses(plugin.Partial(&pr)).Where("user_id IN ?", followees)
	if before > 0 {
		q = q.Where("id < ?", before)
	}
	photos := []Photo{}
	if err := q.Order("id DESC").Limit(limit).Find(&photos).Error; err != nil {
		return nil, nil, err
	}
	return photos, pr.Missing, nil
}

// isPrivilegeError reports Postgres's insufficient_privilege (42501).
func isPrivilegeError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42501"
}
