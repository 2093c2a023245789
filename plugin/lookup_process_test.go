package plugin

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/harness/shardtest"
	"github.com/shardkit/shardkit/internal/harness/testkit"
	"github.com/shardkit/shardkit/router"
)

// Environment of a lookup child process (see TestLookupChild).
const (
	lookupChildEnv   = "SHARDKIT_LOOKUP_CHILD" // mode: signup or kill
	lookupCatalogEnv = "SHARDKIT_LOOKUP_CATALOG"
	lookupNamesEnv   = "SHARDKIT_LOOKUP_NAMES"
	lookupOutEnv     = "SHARDKIT_LOOKUP_OUT"
)

// signUpOutcome is one sign-up attempt: the member's ID, or a loss.
type signUpOutcome struct {
	name string
	id   int64 // 0: lost with ErrDuplicateLookup
}

// signUpAll has workers each try every name once, in its own order, in a
// random shard; any error but ErrDuplicateLookup is returned.
func signUpAll(ctx context.Context, db *gorm.DB, names []string, workers int, seed uint64, out func(signUpOutcome)) error {
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			order := rng.Perm(len(names))
			for _, i := range order {
				m := &Member{Username: names[i], Name: "w" + strconv.Itoa(w)}
				err := db.WithContext(ctx).Clauses(Shard(rng.Int64N(1 << 20))).Create(m).Error
				switch {
				case err == nil:
					out(signUpOutcome{name: names[i], id: m.ID})
				case errors.Is(err, ErrDuplicateLookup):
					out(signUpOutcome{name: names[i]})
				default:
					errs <- fmt.Errorf("sign up %s: %w", names[i], err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// signUpBursts signs up each name from workers goroutines released
// together, one name after the other: the sign-ups of a name overlap as
// much as they can.
func signUpBursts(ctx context.Context, db *gorm.DB, names []string, workers int, out func(signUpOutcome)) error {
	for _, name := range names {
		start := make(chan struct{})
		errs := make(chan error, workers)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				m := &Member{Username: name, Name: "b" + strconv.Itoa(w)}
				err := db.WithContext(ctx).Clauses(Shard(int64(w))).Create(m).Error
				switch {
				case err == nil:
					out(signUpOutcome{name: name, id: m.ID})
				case errors.Is(err, ErrDuplicateLookup):
					out(signUpOutcome{name: name})
				default:
					errs <- fmt.Errorf("sign up %s: %w", name, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

// TestLookupChild is the body of a child process of the lookup tests; it
// is skipped when run as a test.
func TestLookupChild(t *testing.T) {
	mode := os.Getenv(lookupChildEnv)
	if mode == "" {
		t.Skip("runs only as a child process of the lookup tests")
	}
	ctx := context.Background()
	catDSN := os.Getenv(lookupCatalogEnv)
	cat, err := catalog.Open(ctx, catDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	r, err := router.New(ctx, cat)
	if err != nil {
		t.Fatal(err)
	}
	gen := shardtest.Generator(t, cat)
	def, err := sql.Open("pgx", catDSN) // the default connection: nothing sharded reaches it
	if err != nil {
		t.Fatal(err)
	}
	defer def.Close()
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: def}), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	p := Register(Config{Router: r, IDs: gen}, &Member{})
	if err := db.Use(p); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	names := strings.Split(os.Getenv(lookupNamesEnv), ",")
	switch mode {
	case "kill":
		// Die between the claim of the lookup row and the owner row.
		err := db.Callback().Create().After("shardkit:lookup_reserve").Before("shardkit:route").
			Register("test:kill", func(db *gorm.DB) {
				if db.Error == nil {
					_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				}
			})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			if _, err := (&env{}).signUp(ctx, db, name, 1); err != nil {
				t.Fatalf("sign up %s: %v", name, err)
			}
		}
		t.Fatal("not killed")
	case "signup":
		f, err := os.Create(os.Getenv(lookupOutEnv))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var mu sync.Mutex
		err = signUpAll(ctx, db.Session(&gorm.Session{}), names, 4, uint64(os.Getpid()), func(o signUpOutcome) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(f, "%s %d\n", o.name, o.id)
		})
		if err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("unknown mode %q", mode)
	}
}

func startLookupChild(t *testing.T, e *env, mode string, names []string, out string) *testkit.Child {
	t.Helper()
	return testkit.StartChild(t, "TestLookupChild", lookupChildEnv+"="+mode, lookupCatalogEnv+"="+e.catDSN,
		lookupNamesEnv+"="+strings.Join(names, ","), lookupOutEnv+"="+out)
}

func readOutcomes(t *testing.T, path string) []signUpOutcome {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []signUpOutcome
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var o signUpOutcome
		if _, err := fmt.Sscanf(sc.Text(), "%s %d", &o.name, &o.id); err != nil {
			t.Fatalf("child output %q: %v", sc.Text(), err)
		}
		out = append(out, o)
	}
	return out
}

// Many writers (goroutines here and in two other processes, each with its
// own plugin and ID slot) sign up the same usernames at once: every
// username ends with exactly one member, the one whose sign-up returned
// nil; every other attempt got ErrDuplicateLookup; every member's
// username has its lookup row, and no orphan is left.
func TestLookupConcurrentSignUps(t *testing.T) {
	ctx := context.Background()
	e := newLookupEnv(t)
	var names []string
	for i := range 24 {
		names = append(names, fmt.Sprintf("user%02d", i))
	}
	var outs []string
	var cmds []*testkit.Child
	if !testing.Short() {
		dir := t.TempDir()
		for i := range 2 {
			out := filepath.Join(dir, strconv.Itoa(i))
			outs = append(outs, out)
			cmds = append(cmds, startLookupChild(t, e, "signup", names, out))
		}
	}
	var mu sync.Mutex
	var all []signUpOutcome
	err := signUpAll(ctx, e.db, names, 8, 1, func(o signUpOutcome) {
		mu.Lock()
		defer mu.Unlock()
		all = append(all, o)
	})
	if err != nil {
		t.Fatal(err)
	}
	var bursts []string
	for i := range 16 {
		bursts = append(bursts, fmt.Sprintf("burst%02d", i))
	}
	err = signUpBursts(ctx, e.db, bursts, 16, func(o signUpOutcome) {
		mu.Lock()
		defer mu.Unlock()
		all = append(all, o)
	})
	if err != nil {
		t.Fatal(err)
	}
	names = append(names, bursts...)
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("child %d: %v", i, err)
		}
		all = append(all, readOutcomes(t, outs[i])...)
	}
	if want := (8+4*len(cmds))*(len(names)-len(bursts)) + 16*len(bursts); len(all) != want {
		t.Fatalf("%d outcomes, want %d", len(all), want)
	}
	winner := map[string]int64{}
	for _, o := range all {
		if o.id == 0 {
			continue
		}
		if w, ok := winner[o.name]; ok {
			t.Fatalf("%s signed up twice: members %d and %d", o.name, w, o.id)
		}
		winner[o.name] = o.id
	}
	members, orphans := e.checkLookups(t)
	if len(orphans) != 0 {
		t.Fatalf("orphans left: %v", orphans)
	}
	if len(members) != len(names) || len(winner) != len(names) {
		t.Fatalf("%d members and %d winners for %d names", len(members), len(winner), len(names))
	}
	for name, id := range winner {
		if members[id].Username != name {
			t.Fatalf("winner of %s is member %d, which holds %q", name, id, members[id].Username)
		}
	}
	e.defaultUntouched(t)
}

// A process killed between claiming a username and writing its member
// leaves an orphaned lookup row (and its held lock dies with it); the
// next sign-up of that username takes it over.
func TestLookupKilledSignUpIsReclaimed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	ctx := context.Background()
	e := newLookupEnv(t)
	child := startLookupChild(t, e, "kill", []string{"phoenix"}, "")
	if err := child.Wait(); !testkit.Killed(err) {
		t.Fatalf("child: %v, want killed by SIGKILL", err)
	}
	members, orphans := e.checkLookups(t)
	if len(members) != 0 || len(orphans) != 1 || orphans[0].value != "phoenix" {
		t.Fatalf("after the kill: members %v, orphans %v", members, orphans)
	}
	db := e.db.Session(&gormSkipTx)
	if err := db.First(&Member{}, "username = ?", "phoenix").Error; !errors.Is(err, gorm.ErrRecordNotFound) {
		t.Fatalf("read through the orphan: %v", err)
	}
	m, err := e.signUp(ctx, db, "phoenix", 9)
	if err != nil {
		t.Fatalf("sign up over the orphan: %v", err)
	}
	var got Member
	if err := db.First(&got, "username = ?", "phoenix").Error; err != nil || got.ID != m.ID {
		t.Fatalf("read: %+v, %v", got, err)
	}
	if members, orphans := e.checkLookups(t); len(members) != 1 || len(orphans) != 0 {
		t.Fatalf("members %v, orphans %v", members, orphans)
	}
}
