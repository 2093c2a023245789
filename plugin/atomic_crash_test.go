package plugin

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/harness/testkit"
	"github.com/shardkit/shardkit/resolver"
	"github.com/shardkit/shardkit/router"
)

// Environment of the child process of TestAtomicCrash.
const (
	crashChildEnv = "SHARDKIT_ATOMIC_CHILD" // the step to stop at
	crashCatEnv   = "SHARDKIT_ATOMIC_CATALOG"
	crashDefEnv   = "SHARDKIT_ATOMIC_DEFAULT"
	crashUsersEnv = "SHARDKIT_ATOMIC_USERS" // "a,b": users on servers a and b
	crashStopAt   = 3                       // the transaction that stops
)

// TestAtomicCrash kills the application process (SIGKILL) at each step of
// a two-phase commit across servers a and b and the default connection,
// with a resolver running, and checks by direct SQL that every
// transaction ended all or nothing, that every acknowledged one is
// committed, and that no prepared transaction is left.
func TestAtomicCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	steps := []struct {
		step      string
		committed bool // the stopped transaction must end committed
	}{
		{"prepared:1", false}, // server b prepared, the default connection not
		{"prepared", false},   // every part prepared, no decision
		{"decided", true},     // the coordinator committed, no part committed
		{"committed:1", true}, // one part committed, one prepared
	}
	for _, st := range steps {
		t.Run(st.step, func(t *testing.T) {
			e := newEnv(t, envOpts{noIDs: true})
			e.auditTable(t)
			ua, ub := e.userOn(t, "a", 1), e.userOn(t, "b", 1)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			res := resolver.New(resolver.Config{Servers: e.r, Databases: map[string]string{"default": e.def},
				Interval: 20 * time.Millisecond, KeepDecisions: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			done := make(chan error, 1)
			go func() { done <- res.Run(ctx) }()

			child := testkit.StartChild(t, "TestAtomicCrashChild", crashChildEnv+"="+st.step, crashCatEnv+"="+e.catDSN,
				crashDefEnv+"="+e.def, crashUsersEnv+"="+fmt.Sprintf("%d,%d", ua, ub))
			// The child prints "ACK k" for each acknowledged transaction
			// and "STOP gid" at the step, where it waits to be killed.
			var acked map[int]bool
			stopped := ""
			testkit.Eventually(t, time.Minute, func() bool {
				acked, stopped = crashChildSaid(child.Output())
				return stopped != "" || child.Exited()
			})
			child.Kill()
			if stopped == "" {
				t.Fatalf("the child never reached step %s: %v", st.step, child.Wait())
			}
			testkit.Eventually(t, time.Minute, func() bool {
				rep := res.Last()
				return !rep.At.IsZero() && len(rep.InDoubt) == 0 && len(rep.Errors) == 0 &&
					prepared(t, e.dsn["a"])+prepared(t, e.dsn["b"])+prepared(t, e.def) == 0 &&
					e.decisions(t, "a")+e.decisions(t, "b") == 0 // cleaned once nothing needs them
			})
			cancel()
			<-done
			for k := 1; k <= crashStopAt; k++ {
				caption := fmt.Sprintf("crash-%d", k)
				n := e.photosWith(t, caption) + e.auditsWith(t, caption)
				if n != 0 && n != 3 {
					t.Fatalf("transaction %d: %d of its 3 rows committed", k, n)
				}
				want := acked[k] || k == crashStopAt && st.committed
				if want && n != 3 {
					t.Fatalf("transaction %d (acknowledged or decided) lost: %d rows", k, n)
				}
				if k == crashStopAt && !st.committed && n != 0 {
					t.Fatalf("transaction %d committed without a decision", k)
				}
			}
			if len(acked) != crashStopAt-1 {
				t.Fatalf("%d transactions acknowledged, want %d", len(acked), crashStopAt-1)
			}
		})
	}
}

// TestAtomicCrashChild is the application process of TestAtomicCrash: it
// commits atomic transactions until the chosen step of transaction
// crashStopAt, where it prints STOP and waits to be killed.
func TestAtomicCrashChild(t *testing.T) {
	step := os.Getenv(crashChildEnv)
	if step == "" {
		t.Skip("the child process of TestAtomicCrash")
	}
	ctx := context.Background()
	cat, err := catalog.Open(ctx, os.Getenv(crashCatEnv))
	if err != nil {
		t.Fatal(err)
	}
	r, err := router.New(ctx, cat)
	if err != nil {
		t.Fatal(err)
	}
	db, err := gorm.Open(postgres.Open(os.Getenv(crashDefEnv)), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Use(Register(Config{Router: r}, &Photo{}, &Like{})); err != nil {
		t.Fatal(err)
	}
	var users []int64
	for _, s := range strings.Split(os.Getenv(crashUsersEnv), ",") {
		u, _ := strconv.ParseInt(s, 10, 64)
		users = append(users, u)
	}
	k := 0
	afterStep = func(s, gid string) {
		if s == step && k == crashStopAt {
			fmt.Printf("STOP %s\n", gid)
			select {} // killed here
		}
	}
	for k = 1; k <= crashStopAt; k++ {
		caption := fmt.Sprintf("crash-%d", k)
		err := db.Clauses(Atomic()).Transaction(func(tx *gorm.DB) error {
			for _, u := range users {
				if err := tx.Create(&Photo{UserID: u, Caption: caption}).Error; err != nil {
					return err
				}
			}
			return tx.Create(&Audit{Note: caption}).Error
		})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("ACK %d\n", k)
	}
	t.Fatal("the step was never reached")
}

// crashChildSaid reads the child's output of TestAtomicCrash: the
// transactions it acknowledged, and the gid it stopped at ("" before it
// printed that line whole).
func crashChildSaid(out string) (acked map[int]bool, stopped string) {
	acked = map[int]bool{}
	lines := strings.Split(out, "\n")
	for _, line := range lines[:len(lines)-1] { // whole lines only

		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "ACK" {
			k, _ := strconv.Atoi(f[1])
			acked[k] = true
		}
		if len(f) == 2 && f[0] == "STOP" {
			return acked, f[1]
		}
	}
	return acked, ""
}
