package rebalance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"gorm.io/gorm"

	"github.com/shardkit/shardkit/internal/harness/shardtest/photos"
	"github.com/shardkit/shardkit/migrations"
	"github.com/shardkit/shardkit/plugin"
	"github.com/shardkit/shardkit/router"
)

// A shard move carries the lookup tables of lookup columns
// (shard:"lookup") like any other per-shard table: the lookup rows of the
// moving shard, and those that sign-ups claim there while it moves.

// membersSQL is a per-shard migration adding members, whose username is
// unique across shards, and its lookup table.
const membersSQL = `CREATE TABLE members (
    id       bigint PRIMARY KEY DEFAULT next_id(),
    user_id  bigint NOT NULL,
    username text   NOT NULL
);
CREATE TABLE members_username_lookup (
    value    text   PRIMARY KEY,
    owner_id bigint NOT NULL
);
`

// lookupMember is a member keyed by its user, with a lookup column.
type lookupMember struct {
	ID       int64
	UserID   int64  `shard:"key"`
	Username string `shard:"lookup"`
}

func (lookupMember) TableName() string { return "members" }

// addMembers migrates every shard of the env to the members tables; the
// catalog records the migration, so a move creates them on its target.
func addMembers(t *testing.T, e *env) {
	t.Helper()
	sql := photos.With(fstest.MapFS{"0002_members.sql": {Data: []byte(membersSQL)}})
	if err := migrations.Migrate(context.Background(), e.cat, sql, migrations.MigrateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// newMembersDB is the GORM plugin on the env for lookupMember, with IDs
// from leased slots, following the map through r.
func newMembersDB(t *testing.T, e *env, r *router.Router) *gorm.DB {
	t.Helper()
	return newPluginDB(t, e, r, plugin.Config{}, &lookupMember{})
}

// signUps is the members the test made: username → ID.
type signUps struct {
	mu       sync.Mutex
	ids      map[string]int64
	ops      int
	failures []error
}

func (s *signUps) add(name string, id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids[name] = id
	s.ops++
}

func (s *signUps) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures = append(s.failures, err)
}

func (s *signUps) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ops
}

// waitSignUps waits until n more sign-ups than before have succeeded.
func waitSignUps(t *testing.T, s *signUps, before, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for s.count() < before+n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d sign-ups in a minute, want %d", s.count()-before, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// nameInShard returns a username with the prefix whose lookup row is in
// the shard.
func nameInShard(t *testing.T, prefix string, shard, shards int) string {
	t.Helper()
	for i := range 10000 {
		name := fmt.Sprintf("%s%d", prefix, i)
		if s, _ := plugin.LookupShard(name, shards); s == shard {
			return name
		}
	}
	t.Fatalf("no %s… username in shard %d", prefix, shard)
	return ""
}

// TestOnlineMoveCarriesLookupTable moves a shard holding lookup rows
// (and owner rows) while sign-ups claim new values in it and others try
// to take values it holds, then rolls the move back the same way. After
// each: every member has its lookup row in its value's shard, a read by
// username finds every member, and a duplicate sign-up is refused.
func TestOnlineMoveCarriesLookupTable(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 2, 2, 4) // shards 0 and 1 on s0, 2 and 3 on s1
	addMembers(t, e)
	r, err := router.New(ctx, e.cat)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { defer close(watched); _ = r.Watch(wctx) }()
	t.Cleanup(func() { stopWatch(); <-watched })
	db := newMembersDB(t, e, r).Session(&gorm.Session{SkipDefaultTransaction: true})
	const moving = 0
	made := &signUps{ids: map[string]int64{}}
	signUp := func(ctx context.Context, name string, user int64) error {
		m := lookupMember{UserID: user, Username: name}
		err := db.WithContext(ctx).Create(&m).Error
		if err == nil {
			made.add(name, m.ID)
		}
		return err
	}
	// Lookup rows in the moving shard, owners on every shard; and owners
	// in the moving shard with lookup rows elsewhere.
	var held []string // values whose lookup rows the moving shard holds
	for i := 0; len(held) < 30; i++ {
		name := nameInShard(t, fmt.Sprintf("seed%d-", i), moving, e.shards)
		if err := signUp(ctx, name, int64(1+i)); err != nil {
			t.Fatal(err)
		}
		held = append(held, name)
	}
	for i := range 15 {
		if err := signUp(ctx, fmt.Sprintf("owner%d", i), int64(e.shards*(i+1)+moving)); err != nil {
			t.Fatal(err)
		}
	}

	// Writers: three sign up new names (a quarter of them claimed in the
	// moving shard, a quarter owned there), one keeps trying to take
	// values the moving shard holds.
	phase := 0
	run := func() (stop func()) {
		phase++
		sctx, cancel := context.WithCancel(ctx)
		qctx := context.WithoutCancel(ctx) // a statement runs to its end
		var wg sync.WaitGroup
		for g := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; sctx.Err() == nil; i++ {
					time.Sleep(2 * time.Millisecond) // pace, not synchronisation
					if err := signUp(qctx, fmt.Sprintf("p%d-w%d-%d", phase, g, i), int64(1+g+3*i)); err != nil {
						made.fail(err)
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; sctx.Err() == nil; i++ {
				time.Sleep(2 * time.Millisecond)
				err := signUp(qctx, held[i%len(held)], int64(2+i))
				if !errors.Is(err, plugin.ErrDuplicateLookup) {
					made.fail(fmt.Errorf("sign-up of the taken %q: %v, want ErrDuplicateLookup", held[i%len(held)], err))
				}
			}
		}()
		return func() { cancel(); wg.Wait() }
	}

	mv := e.mover(t, Config{})
	before := made.count()
	stop := run()
	waitSignUps(t, made, before, 20)
	m, err := mv.Move(ctx, moving, "s1", MoveOptions{})
	if err != nil {
		stop()
		t.Fatal(err)
	}
	before = made.count()
	waitSignUps(t, made, before, 20) // on the new map
	stop()
	if p := e.placement(t, moving); p.Server != "s1" {
		t.Fatalf("shard %d on %s after the move", moving, p.Server)
	}
	t.Logf("move: fenced %v; %d sign-ups", m.FencedFor, made.count())
	checkMembers(t, e, db, made, held)
	_, err = e.pools["s0"].Exec(ctx, `INSERT INTO `+ident(router.SchemaName(moving), "members_username_lookup")+` VALUES ('stale', 1)`)
	if !router.IsFenceError(err) {
		t.Errorf("write to the lookup table on the old home: %v, want the fence", err)
	}
	if _, err := mv.Verify(ctx, moving); err != nil {
		t.Errorf("verify: %v", err)
	}

	// Rollback: the shard cuts back over to s0 with what was signed up on
	// s1. No sign-ups run during it: the rollback drops s1's copy right
	// after its flip, and a router that has not heard of the flip yet
	// would find no table there (not the barrier's refusal).
	before = made.count()
	stop = run()
	waitSignUps(t, made, before, 20)
	stop()
	if _, err := mv.Rollback(ctx, moving); err != nil {
		t.Fatal(err)
	}
	if p := e.placement(t, moving); p.Server != "s0" {
		t.Fatalf("shard %d on %s after the rollback", moving, p.Server)
	}
	deadline := time.Now().Add(time.Minute)
	for pl, _ := r.Snapshot().Placement(moving); pl.Server != "s0"; pl, _ = r.Snapshot().Placement(moving) {
		if time.Now().After(deadline) {
			t.Fatal("the router did not hear of the rollback in a minute")
		}
		time.Sleep(5 * time.Millisecond)
	}
	checkMembers(t, e, db, made, held)
	before = made.count()
	stop = run()
	waitSignUps(t, made, before, 20)
	stop()
	checkMembers(t, e, db, made, held)
	if left := e.leftovers(t); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// checkMembers checks, after the writers stopped: no sign-up failed other
// than as expected; on each shard's current home every member's username
// has its lookup row naming it, in the username's shard, and no lookup
// row is an orphan; a read by username finds every member the test made;
// a duplicate sign-up is refused.
func checkMembers(t *testing.T, e *env, db *gorm.DB, made *signUps, held []string) {
	t.Helper()
	ctx := context.Background()
	made.mu.Lock()
	defer made.mu.Unlock()
	if len(made.failures) > 0 {
		t.Fatalf("%d sign-ups failed; first: %v", len(made.failures), made.failures[0])
	}
	type member struct {
		id    int64
		shard int
	}
	byName := map[string]member{}
	lookups := map[string]int64{}
	for s := range e.shards {
		p := e.placement(t, s)
		pool := e.pools[p.Server]
		rows, err := pool.Query(ctx, `SELECT id, username FROM `+ident(p.Schema, "members"))
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id int64
			var name string
			if err := rows.Scan(&id, &name); err != nil {
				t.Fatal(err)
			}
			if other, dup := byName[name]; dup {
				t.Errorf("username %q held by members %d and %d", name, other.id, id)
			}
			byName[name] = member{id, s}
		}
		rows.Close()
		rows, err = pool.Query(ctx, `SELECT value, owner_id FROM `+ident(p.Schema, "members_username_lookup"))
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var v string
			var owner int64
			if err := rows.Scan(&v, &owner); err != nil {
				t.Fatal(err)
			}
			if want, _ := plugin.LookupShard(v, e.shards); want != s {
				t.Errorf("lookup row %q in shard %d, want shard %d", v, s, want)
			}
			lookups[v] = owner
		}
		rows.Close()
	}
	for name, m := range byName {
		if owner, ok := lookups[name]; !ok || owner != m.id {
			t.Errorf("member %d (%q) has no lookup row naming it (found %d, %v)", m.id, name, owner, ok)
		}
	}
	for v, owner := range lookups {
		if m, ok := byName[v]; !ok || m.id != owner {
			t.Errorf("orphaned lookup row %q → %d", v, owner)
		}
	}
	if len(byName) != len(made.ids) {
		t.Errorf("%d members on the shards, the test signed up %d", len(byName), len(made.ids))
	}
	names := make([]string, 0, len(made.ids))
	for name, id := range made.ids {
		names = append(names, name)
		if byName[name].id != id {
			t.Errorf("%q signed up as member %d, on the shards as %d", name, id, byName[name].id)
		}
		var got lookupMember
		if err := db.WithContext(ctx).First(&got, "username = ?", name).Error; err != nil || got.ID != id {
			t.Errorf("read %q by username: %+v, %v; want member %d", name, got, err, id)
		}
	}
	var n int64
	if err := db.WithContext(ctx).Model(&lookupMember{}).Where("username IN ?", names).Count(&n).Error; err != nil || int(n) != len(names) {
		t.Errorf("count by username IN: %d, %v; want %d", n, err, len(names))
	}
	for _, name := range []string{held[0], held[len(held)-1], names[0]} {
		err := db.WithContext(ctx).Create(&lookupMember{UserID: 3, Username: name}).Error
		if !errors.Is(err, plugin.ErrDuplicateLookup) {
			t.Errorf("duplicate sign-up of %q: %v, want ErrDuplicateLookup", name, err)
		}
	}
}
