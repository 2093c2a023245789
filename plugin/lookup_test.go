package plugin

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/router"
)

// Member is keyed by its own ID, with two columns unique across shards.
type Member struct {
	ID       int64   `gorm:"primaryKey;autoIncrement:false" shard:"id"`
	Username string  `shard:"lookup"`
	Email    *string `shard:"lookup"`
	Name     string
}

func newLookupEnv(t testing.TB) *env {
	t.Helper()
	return newEnv(t, envOpts{models: []any{&Member{}}})
}

// signUp creates a member with a username in the shard of key.
func (e *env) signUp(ctx context.Context, db *gorm.DB, name string, key int64) (*Member, error) {
	m := &Member{Username: name, Name: "name of " + name}
	err := db.WithContext(ctx).Clauses(Shard(key)).Create(m).Error
	return m, err
}

// lookupRow is one row of a lookup table, read directly.
type lookupRow struct {
	value string
	owner int64
	shard int
}

// audit reads, with direct connections, every member row and every row
// of a lookup table, from each shard's home.
func (e *env) audit(t testing.TB, column string) (members map[int64]Member, lookups []lookupRow) {
	t.Helper()
	ctx := context.Background()
	members = map[int64]Member{}
	snap := e.r.Snapshot()
	conns := map[string]*pgx.Conn{}
	for _, name := range e.servers {
		conns[name] = pgtest.Connect(t, e.dsn[name])
	}
	for s := 0; s < e.shards; s++ {
		pl, err := snap.Placement(s)
		if err != nil {
			t.Fatal(err)
		}
		c := conns[pl.Server]
		rows, err := c.Query(ctx, "SELECT id, username, email, name FROM "+pgx.Identifier{pl.Schema, "members"}.Sanitize())
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var m Member
			if err := rows.Scan(&m.ID, &m.Username, &m.Email, &m.Name); err != nil {
				t.Fatal(err)
			}
			if got, _ := snap.Layout.ShardOf(m.ID); got != s {
				t.Fatalf("member %d in shard %d, its ID names shard %d", m.ID, s, got)
			}
			members[m.ID] = m
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows, err = c.Query(ctx, "SELECT value, owner_id FROM "+pgx.Identifier{pl.Schema, LookupTable("members", column)}.Sanitize())
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			r := lookupRow{shard: s}
			if err := rows.Scan(&r.value, &r.owner); err != nil {
				t.Fatal(err)
			}
			lookups = append(lookups, r)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return members, lookups
}

// checkLookups checks the invariants of the username lookup: each
// lookup row is in its value's shard; each member's username has a
// lookup row naming that member; no two members share a username. It
// returns the orphans (lookup rows whose owner does not hold the value).
func (e *env) checkLookups(t testing.TB) (members map[int64]Member, orphans []lookupRow) {
	t.Helper()
	members, lookups := e.audit(t, "username")
	byValue := map[string]lookupRow{}
	for _, r := range lookups {
		want, err := LookupShard(r.value, e.shards)
		if err != nil {
			t.Fatal(err)
		}
		if r.shard != want {
			t.Fatalf("lookup row %q in shard %d, want shard %d", r.value, r.shard, want)
		}
		byValue[r.value] = r
		if m, ok := members[r.owner]; !ok || m.Username != r.value {
			orphans = append(orphans, r)
		}
	}
	holder := map[string]int64{}
	for id, m := range members {
		if other, dup := holder[m.Username]; dup {
			t.Fatalf("username %q held by members %d and %d", m.Username, other, id)
		}
		holder[m.Username] = id
		if r, ok := byValue[m.Username]; !ok || r.owner != id {
			t.Fatalf("member %d (%q) has no lookup row naming it (lookup row: %+v, found %v)", id, m.Username, r, ok)
		}
	}
	return members, orphans
}

// LookupShard's hash is fixed forever: these values must never change
// (they were computed once with hash/fnv's New64a, top bit cleared).
func TestLookupShardIsStable(t *testing.T) {
	for _, c := range []struct {
		value  any
		shards int
		want   int
	}{
		{"alice", 2000, 0x508b2abb65a03907 % 2000},
		{"alice", 16, 7},
		{int64(42), 2000, 0x7ee7e07b4b19223 % 2000},
		{42, 16, 3},
		{uint8(42), 16, 3},
	} {
		got, err := LookupShard(c.value, c.shards)
		if err != nil || got != c.want {
			t.Errorf("LookupShard(%v, %d) = %d, %v; want %d", c.value, c.shards, got, err, c.want)
		}
	}
	if _, err := LookupShard(1.5, 16); !errors.Is(err, ErrLookupUnroutable) {
		t.Errorf("LookupShard(1.5) = %v, want ErrLookupUnroutable", err)
	}
}

func TestLookupDeclaration(t *testing.T) {
	db := offlineDB(t)
	m, err := parseModel(db, &Member{}, 16)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.lookups) != 2 || m.lookups[0].table != "members_username_lookup" || !m.lookups[0].text ||
		m.lookups[1].table != "members_email_lookup" {
		t.Fatalf("lookups %+v", m.lookups)
	}
	if m.lookups[0].quoted[3] != `"shard_0003"."members_username_lookup"` {
		t.Fatalf("quoted %s", m.lookups[0].quoted[3])
	}
	type badType struct {
		ID    int64   `shard:"id"`
		Score float64 `shard:"lookup"`
	}
	type onID struct {
		ID     int64 `shard:"lookup"`
		UserID int64 `shard:"key"`
	}
	type longName struct {
		ID                                                    int64  `shard:"id"`
		AVeryLongColumnNameThatMakesTheLookupTableNameTooLong string `shard:"lookup"`
	}
	for _, v := range []any{&badType{}, &onID{}, &longName{}} {
		if _, err := parseModel(db, v, 16); !errors.Is(err, ErrInvalidModel) {
			t.Errorf("%T: %v, want ErrInvalidModel", v, err)
		}
	}
}

// A start-up without the lookup table fails with what to do.
func TestLookupTableChecked(t *testing.T) {
	type Orphanless struct {
		ID     int64  `gorm:"primaryKey;autoIncrement:false" shard:"id"`
		Handle string `shard:"lookup"`
	}
	e := newEnv(t, envOpts{one: true, before: func(e *env) {
		for s := 0; s < 16; s++ {
			e.rawExec(t, "a", "CREATE TABLE "+pgx.Identifier{router.SchemaName(s), "orphanlesses"}.Sanitize()+" (id bigint PRIMARY KEY, handle text)")
		}
	}})
	p := Register(Config{Router: e.r}, &Orphanless{})
	db := e.db.Session(&gorm.Session{NewDB: true})
	db2, err := gorm.Open(db.Dialector, &gorm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	err = db2.Use(p)
	if !errors.Is(err, ErrInvalidModel) || !strings.Contains(err.Error(), "orphanlesses_handle_lookup") {
		t.Fatalf("Use: %v, want ErrInvalidModel naming the lookup table", err)
	}
	_ = p.Close()
}

func TestLookupCreateAndRead(t *testing.T) {
	ctx := context.Background()
	e := newLookupEnv(t)
	db := e.db.Session(&gormSkipTx)
	var made []*Member
	for i, name := range []string{"alice", "bob", "carol", "dave", "erin"} {
		m, err := e.signUp(ctx, e.db, name, int64(i*7+1))
		if err != nil {
			t.Fatalf("sign up %s: %v", name, err)
		}
		made = append(made, m)
	}
	mail := "alice@example.com"
	if err := db.Model(made[0]).Update("email", mail).Error; err != nil {
		t.Fatal(err)
	}
	// Duplicate: typed, wrapping Postgres's unique violation; nothing written.
	_, err := e.signUp(ctx, db, "bob", 3)
	var pe *pgconn.PgError
	if !errors.Is(err, ErrDuplicateLookup) || !errors.As(err, &pe) || pe.Code != "23505" || !strings.Contains(err.Error(), "taken") {
		t.Fatalf("duplicate sign-up: %v, want ErrDuplicateLookup wrapping a 23505", err)
	}
	members, orphans := e.checkLookups(t)
	if len(members) != 5 || len(orphans) != 0 {
		t.Fatalf("%d members, orphans %v", len(members), orphans)
	}

	for _, m := range made {
		var got Member
		if err := db.First(&got, "username = ?", m.Username).Error; err != nil || got.ID != m.ID {
			t.Fatalf("First by username %s: %+v, %v", m.Username, got, err)
		}
		got = Member{}
		if err := db.Where(&Member{Username: m.Username}).Take(&got).Error; err != nil || got.ID != m.ID {
			t.Fatalf("Take by struct %s: %+v, %v", m.Username, got, err)
		}
	}
	var got []Member
	if err := db.Where("username IN ?", []string{"alice", "carol", "nobody"}).Order("id").Find(&got).Error; err != nil || len(got) != 2 {
		t.Fatalf("IN: %+v, %v", got, err)
	}
	var byMail Member
	if err := db.Where("email = ?", mail).First(&byMail).Error; err != nil || byMail.ID != made[0].ID {
		t.Fatalf("by email: %+v, %v", byMail, err)
	}
	if err := db.First(&byMail, "username = ?", "nobody").Error; !errors.Is(err, gorm.ErrRecordNotFound) {
		t.Fatalf("unknown username: %v, want ErrRecordNotFound", err)
	}
	var n int64
	if err := db.Model(&Member{}).Where("username = ? AND name <> ?", "dave", "").Count(&n).Error; err != nil || n != 1 {
		t.Fatalf("Count: %d, %v", n, err)
	}
	e.defaultUntouched(t)
}

func TestLookupRefusals(t *testing.T) {
	ctx := context.Background()
	e := newLookupEnv(t)
	db := e.db.Session(&gormSkipTx)
	alice, err := e.signUp(ctx, db, "alice", 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		run  func(db *gorm.DB) error
		want error
	}{
		{"OR", func(db *gorm.DB) error {
			return db.Where("username = ? OR name = ?", "alice", "x").Find(&[]Member{}).Error
		}, ErrLookupUnroutable},
		{"Or()", func(db *gorm.DB) error {
			return db.Where("username = ?", "alice").Or("name = ?", "x").Find(&[]Member{}).Error
		}, ErrLookupUnroutable},
		{"Not", func(db *gorm.DB) error { return db.Not("username = ?", "alice").Find(&[]Member{}).Error }, ErrLookupUnroutable},
		{"LIKE", func(db *gorm.DB) error { return db.Where("username LIKE ?", "al%").Find(&[]Member{}).Error }, ErrLookupUnroutable},
		{"function", func(db *gorm.DB) error { return db.Where("lower(username) = ?", "alice").Find(&[]Member{}).Error }, ErrLookupUnroutable},
		{"wrong type", func(db *gorm.DB) error { return db.Where("username = ?", 5).Find(&[]Member{}).Error }, ErrLookupUnroutable},
		{"NULL", func(db *gorm.DB) error { return db.Where(map[string]any{"username": nil}).Find(&[]Member{}).Error }, ErrLookupUnroutable},
		{"no condition", func(db *gorm.DB) error { return db.Where("name = ?", "x").Find(&[]Member{}).Error }, ErrMissingShardKey},
		{"create in a transaction", func(db *gorm.DB) error {
			return db.Transaction(func(tx *gorm.DB) error {
				return tx.Clauses(Shard(int64(1))).Create(&Member{Username: "tx"}).Error
			})
		}, ErrLookupInTransaction},
		{"rename in a transaction", func(db *gorm.DB) error {
			return db.Clauses(ShardOfID(alice.ID)).Transaction(func(tx *gorm.DB) error {
				return tx.Model(&Member{ID: alice.ID}).Update("username", "alicia").Error
			})
		}, ErrLookupInTransaction},
		{"rename by condition", func(db *gorm.DB) error {
			return db.Model(&Member{}).Where("id = ?", alice.ID).Update("username", "alicia").Error
		}, ErrLookupWrite},
		{"rename to an expression", func(db *gorm.DB) error {
			return db.Model(&Member{ID: alice.ID}).Update("username", gorm.Expr("upper(username)")).Error
		}, ErrLookupWrite},
		{"upsert", func(db *gorm.DB) error {
			return db.Clauses(Shard(int64(1)), clause.OnConflict{UpdateAll: true}).Create(&Member{Username: "up"}).Error
		}, ErrLookupWrite},
		{"IN with an expression", func(db *gorm.DB) error {
			return db.Where("username IN (?)", gorm.Expr("SELECT 'alice'")).Find(&[]Member{}).Error
		}, ErrLookupUnroutable},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.run(db); !errors.Is(err, c.want) {
				t.Fatalf("%v, want %v", err, c.want)
			}
		})
	}
	members, orphans := e.checkLookups(t)
	if len(members) != 1 || members[alice.ID].Username != "alice" || len(orphans) != 0 {
		t.Fatalf("after refusals: members %v, orphans %v", members, orphans)
	}
	e.defaultUntouched(t)
}

// An orphan (a lookup row whose owner row is missing, or holds another
// value) is taken over by the next write of its value; a live owner's
// row is not.
func TestLookupReclaim(t *testing.T) {
	ctx := context.Background()
	e := newLookupEnv(t)
	db := e.db.Session(&gormSkipTx)
	snap := e.r.Snapshot()
	plant := func(value string, owner int64) {
		s, err := LookupShard(value, e.shards)
		if err != nil {
			t.Fatal(err)
		}
		pl, _ := snap.Placement(s)
		e.rawExec(t, pl.Server, "INSERT INTO "+pgx.Identifier{pl.Schema, "members_username_lookup"}.Sanitize()+" VALUES ($1, $2)", value, owner)
	}
	// A crash between the two inserts: a lookup row, no owner row.
	ghost, err := snap.Layout.Compose(snap.Layout.EpochMs+1000, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	plant("ghost", ghost)
	// An owner that holds another value now (renamed without clean-up).
	renamed, err := e.signUp(ctx, db, "renamed-now", 2)
	if err != nil {
		t.Fatal(err)
	}
	plant("renamed-before", renamed.ID)
	if _, orphans := e.checkLookups(t); len(orphans) != 2 {
		t.Fatalf("orphans %v, want 2", orphans)
	}
	// Reads through an orphan find nothing.
	if err := db.First(&Member{}, "username = ?", "ghost").Error; !errors.Is(err, gorm.ErrRecordNotFound) {
		t.Fatalf("read through an orphan: %v", err)
	}
	if err := db.First(&Member{}, "username = ?", "renamed-before").Error; !errors.Is(err, gorm.ErrRecordNotFound) {
		t.Fatalf("read through a stale value: %v", err)
	}
	for _, name := range []string{"ghost", "renamed-before"} {
		m, err := e.signUp(ctx, db, name, 5)
		if err != nil {
			t.Fatalf("sign up %s over an orphan: %v", name, err)
		}
		var got Member
		if err := db.First(&got, "username = ?", name).Error; err != nil || got.ID != m.ID {
			t.Fatalf("read %s: %+v, %v", name, got, err)
		}
	}
	if _, err := e.signUp(ctx, db, "renamed-now", 6); !errors.Is(err, ErrDuplicateLookup) {
		t.Fatalf("sign up over a live owner: %v", err)
	}
	if _, orphans := e.checkLookups(t); len(orphans) != 0 {
		t.Fatalf("orphans %v after reclaiming", orphans)
	}
}

func TestLookupRenameAndDelete(t *testing.T) {
	ctx := context.Background()
	e := newLookupEnv(t)
	db := e.db.Session(&gormSkipTx)
	a, err := e.signUp(ctx, e.db, "anna", 1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.signUp(ctx, e.db, "ben", 2)
	if err != nil {
		t.Fatal(err)
	}
	// Rename: the new value is claimed, the old one dropped.
	if err := e.db.Model(a).Update("username", "annie").Error; err != nil {
		t.Fatal(err)
	}
	// Rename onto a taken value: typed, nothing changes.
	if err := e.db.Model(b).Update("username", "annie").Error; !errors.Is(err, ErrDuplicateLookup) {
		t.Fatalf("rename onto a taken value: %v", err)
	}
	// Save with an unchanged username keeps its lookup row.
	b.Username, b.Name = "ben", "Ben B."
	if err := e.db.Save(b).Error; err != nil {
		t.Fatal(err)
	}
	// Updates(struct) renames too.
	if err := e.db.Model(b).Updates(Member{Username: "benjamin"}).Error; err != nil {
		t.Fatal(err)
	}
	members, orphans := e.checkLookups(t)
	if len(orphans) != 0 || members[a.ID].Username != "annie" || members[b.ID].Username != "benjamin" || members[b.ID].Name != "Ben B." {
		t.Fatalf("members %v, orphans %v", members, orphans)
	}
	if _, err := e.signUp(ctx, db, "anna", 3); err != nil {
		t.Fatalf("sign up with a released username: %v", err)
	}
	// Delete of a loaded row drops its lookup row; a delete by
	// condition leaves an orphan, which the next sign-up reclaims.
	if err := db.Delete(&Member{ID: a.ID, Username: "annie"}).Error; err != nil {
		t.Fatal(err)
	}
	if err := db.Where("username = ?", "benjamin").Delete(&Member{}).Error; err != nil {
		t.Fatal(err)
	}
	members, orphans = e.checkLookups(t)
	if len(members) != 1 || len(orphans) != 1 || orphans[0].value != "benjamin" {
		t.Fatalf("after deletes: members %v, orphans %v", members, orphans)
	}
	for _, name := range []string{"annie", "benjamin"} {
		if _, err := e.signUp(ctx, db, name, 4); err != nil {
			t.Fatalf("sign up %s after delete: %v", name, err)
		}
	}
	if _, orphans := e.checkLookups(t); len(orphans) != 0 {
		t.Fatalf("orphans %v", orphans)
	}
}

// A batch Create claims every row's values; a duplicate in the batch, or
// one taken already, fails the whole batch and leaves no lookup row.
func TestLookupBatchCreate(t *testing.T) {
	ctx := context.Background()
	e := newLookupEnv(t)
	db := e.db.Session(&gormSkipTx)
	mk := func(names ...string) []Member {
		var ms []Member
		for i, n := range names {
			id, err := e.gen.Next(ctx, (i*5)%e.shards)
			if err != nil {
				t.Fatal(err)
			}
			ms = append(ms, Member{ID: id, Username: n})
		}
		return ms
	}
	ok := mk("u1", "u2", "u3", "u4", "u5", "u6")
	if err := e.db.Create(&ok).Error; err != nil {
		t.Fatal(err)
	}
	for _, names := range [][]string{{"v1", "v2", "v1"}, {"v3", "u4", "v4"}} {
		batch := mk(names...)
		if err := db.Create(&batch).Error; !errors.Is(err, ErrDuplicateLookup) {
			t.Fatalf("batch %v: %v, want ErrDuplicateLookup", names, err)
		}
	}
	members, orphans := e.checkLookups(t)
	if len(members) != 6 || len(orphans) != 0 {
		t.Fatalf("members %d, orphans %v", len(members), orphans)
	}
	var names []string
	for _, m := range members {
		names = append(names, m.Username)
	}
	sort.Strings(names)
	if fmt.Sprint(names) != "[u1 u2 u3 u4 u5 u6]" {
		t.Fatalf("names %v", names)
	}
}

// Handle is keyed by a user, with a lookup column.
type Handle struct {
	ID     int64
	UserID int64  `shard:"key"`
	Handle string `shard:"lookup"`
}

// Without an ID source, a new row takes its ID from its shard's
// next_id() before its lookup row is claimed; a Create that leaves the
// ID column to the database is refused.
func TestLookupWithoutIDSource(t *testing.T) {
	e := newEnv(t, envOpts{noIDs: true, models: []any{&Member{}, &Handle{}}})
	db := e.db.Session(&gormSkipTx)
	h := &Handle{UserID: 5, Handle: "h5"}
	if err := e.db.Create(h).Error; err != nil {
		t.Fatal(err)
	}
	e.assertAt(t, "handles", h.ID, 5)
	var got Handle
	if err := db.First(&got, "handle = ?", "h5").Error; err != nil || got.ID != h.ID || got.UserID != 5 {
		t.Fatalf("read by handle: %+v, %v", got, err)
	}
	if err := e.db.Create(&Handle{UserID: 6, Handle: "h5"}).Error; !errors.Is(err, ErrDuplicateLookup) {
		t.Fatalf("duplicate handle: %v", err)
	}
	m := &Member{Username: "noid"}
	if err := e.db.Clauses(Shard(int64(1))).Create(m).Error; err != nil {
		t.Fatal(err)
	}
	e.assertAt(t, "members", m.ID, 1)
	if err := e.db.Clauses(Shard(int64(1))).Omit("id").Create(&Member{Username: "omitted"}).Error; !errors.Is(err, ErrLookupWrite) {
		t.Fatalf("Create leaving the ID to the database: %v, want ErrLookupWrite", err)
	}
	if _, orphans := e.checkLookups(t); len(orphans) != 0 {
		t.Fatalf("orphans %v", orphans)
	}
}
