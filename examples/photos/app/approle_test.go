package app_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/examples/photos/loadgen"
	"github.com/shardkit/shardkit/internal/harness/shardtest"
	"github.com/shardkit/shardkit/internal/harness/testkit"
	"github.com/shardkit/shardkit/rebalance"
)

// isInsufficientPrivilege reports Postgres's 42501.
func isInsufficientPrivilege(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42501"
}

// TestServiceAsAppRole: the service runs as a login of the application
// role, not a superuser. From its own connection to the catalog (its GORM
// handle's default connection) reading the servers' admin DSNs and writing
// the shard map are refused (42501), and every DSN it holds logs in as that
// login. A shard moved by the operator while the load generator runs
// (atomic follows across shards included) costs no request, and the
// moved user's next writes land on the new home.
func TestServiceAsAppRole(t *testing.T) {
	ctx := context.Background()
	f := newFixtureShards(t, badInputShards)
	db := f.app.Store.DB().WithContext(ctx)

	var role struct {
		Name  string
		Super bool
	}
	if err := db.Raw(`SELECT current_user AS name, rolsuper AS super FROM pg_roles WHERE rolname = current_user`).Scan(&role).Error; err != nil {
		t.Fatal(err)
	}
	if role.Name != shardtest.AppLogin || role.Super {
		t.Fatalf("the service's catalog connection runs as %q (superuser %v); want %s, not a superuser", role.Name, role.Super, shardtest.AppLogin)
	}
	var admin *string
	if err := db.Raw(`SELECT admin_dsn FROM shardkit.servers LIMIT 1`).Scan(&admin).Error; !isInsufficientPrivilege(err) {
		t.Errorf("the service reads shardkit.servers.admin_dsn: err %v; want insufficient_privilege (42501)", err)
	}
	if err := db.Exec(`UPDATE shardkit.shard_map SET server = server WHERE shard = 0`).Error; !isInsufficientPrivilege(err) {
		t.Errorf("the service writes shardkit.shard_map: err %v; want insufficient_privilege (42501)", err)
	}
	for _, s := range f.app.Router.Snapshot().Servers() {
		u, err := url.Parse(s.DSN)
		if err != nil || u.User.Username() != shardtest.AppLogin || s.Admin() != "" {
			t.Errorf("the service's router holds server %s as user %q (admin DSN %v, err %v); want %s and no admin DSN",
				s.Name, u.User.Username(), s.Admin() != "", err, shardtest.AppLogin)
		}
	}

	// A user on alpha, whose shard the operator moves to beta under load.
	var u userJSON
	for i := 0; ; i++ {
		if i == 64 {
			t.Fatal("64 users and none on alpha")
		}
		f.mustCall(t, http.StatusCreated, "POST", "/users", map[string]string{"name": fmt.Sprintf("mover %d", i)}, &u)
		if _, server := f.home(t, id(t, u.ID)); server == "alpha" {
			break
		}
	}
	shard, _ := f.home(t, id(t, u.ID))
	f.mustCall(t, http.StatusCreated, "POST", "/users/"+u.ID+"/photos", map[string]any{"url": "https://img.example/before.jpg"}, nil)

	runner := loadgen.New(loadgen.Config{URL: f.url, Users: 16, Follows: 4, Workers: 4})
	if err := runner.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	loaded := make(chan loadgen.Result, 1)
	go func() { loaded <- runner.Run(loadCtx) }()

	mv, err := rebalance.New(rebalance.Config{Catalog: f.operator, StepTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer mv.Close()
	if _, err := mv.Move(ctx, shard, "beta", rebalance.MoveOptions{}); err != nil {
		t.Fatalf("the operator's move of shard %d: %v", shard, err)
	}
	testkit.Eventually(t, testkit.Wait, func() bool {
		p, err := f.app.Router.Snapshot().Placement(shard)
		return err == nil && p.Server == "beta"
	})
	if _, err := mv.Complete(ctx, shard); err != nil {
		t.Fatal(err)
	}
	// The load runs on past the move until it has served requests on the
	// moved map too.
	after, _ := runner.Counts()
	testkit.Eventually(t, testkit.Wait, func() bool { n, _ := runner.Counts(); return n > after+50 })
	stopLoad()
	res := <-loaded
	if res.Errors != 0 || res.Requests == 0 {
		var b strings.Builder
		res.Print(&b)
		t.Fatalf("load across the operator's move: %s", b.String())
	}
	t.Logf("load across the move: %d requests, 0 errors", res.Requests)

	var p photoJSON
	f.mustCall(t, http.StatusCreated, "POST", "/users/"+u.ID+"/photos", map[string]any{"url": "https://img.example/after.jpg"}, &p)
	f.assertPlaced(t, shard, "beta", "photos", "id = $1", id(t, p.ID))
	var pg pageJSON[photoJSON]
	f.mustCall(t, http.StatusOK, "GET", "/users/"+u.ID+"/photos", nil, &pg)
	if len(pg.Items) != 2 {
		t.Fatalf("the moved user's photos: %d, want 2", len(pg.Items))
	}
}
