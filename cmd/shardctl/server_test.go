package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
)

// TestServerSetDSN registers a server with an app and an admin DSN, shows
// them masked, and changes them with `server set-dsn`: a DSN that does not
// connect changes nothing, unless --no-check says so; unknown servers and
// missing flags are refused.
func TestServerSetDSN(t *testing.T) {
	cat := pgtest.NewDatabase(t, 0)
	a, b := pgtest.NewDatabase(t, 0), pgtest.NewDatabase(t, 1)
	appA := a + "&password=app-s3cret" // the clusters trust local connections: any password connects
	adminA := a + "&password=admin-s3cret&application_name=admin"
	code, _, errOut := shardctl("init", "--catalog", cat, "--server", "a="+appA, "--admin", "a="+adminA,
		"--server", "b="+b, "--shards", "8", "--quiet")
	if code != 0 {
		t.Fatalf("init: exit %d: %s", code, errOut)
	}
	t.Setenv(CatalogEnv, cat)
	dsns := func() (app, admin string, version int64) {
		t.Helper()
		c, err := catalog.Open(context.Background(), cat)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		snap, err := c.Operator().Load(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		s, _ := snap.Server("a")
		return s.DSN, s.AdminDSN, snap.Version
	}
	if app, admin, _ := dsns(); app != appA || admin != adminA {
		t.Fatalf("after init: app %q admin %q", app, admin)
	}

	code, out, errOut := shardctl("status")
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errOut)
	}
	if strings.Contains(out, "s3cret") || !strings.Contains(out, "ADMIN DSN") || strings.Count(out, "password=xxxxx") != 2 ||
		!strings.Contains(out, "(the app DSN)") {
		t.Fatalf("status shows the DSNs wrong:\n%s", out)
	}
	code, out, _ = shardctl("status", "--json")
	var r struct {
		Servers []struct {
			Name     string `json:"name"`
			DSN      string `json:"dsn"`
			AdminDSN string `json:"admin_dsn"`
		} `json:"servers"`
	}
	if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil || strings.Contains(out, "s3cret") ||
		!strings.Contains(r.Servers[0].AdminDSN, "application_name=admin") || r.Servers[1].AdminDSN != "" {
		t.Fatalf("status --json: exit %d, %v:\n%s", code, err, out)
	}

	_, _, v0 := dsns()
	refused := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no DSN", []string{"server", "set-dsn", "a"}, 2, "give --app DSN, --admin DSN or both"},
		{"no name", []string{"server", "set-dsn", "--app", appA}, 2, "want 1 argument(s)"},
		{"unknown server", []string{"server", "set-dsn", "zz", "--app", b + "&application_name=zz"}, 1, `server not in the catalog: "zz"`},
		{"another server's DSN", []string{"server", "set-dsn", "a", "--admin", b}, 1, `the DSN is another server's "b"`},
		{"does not connect", []string{"server", "set-dsn", "a", "--app", "postgres://postgres:new-s3cret@127.0.0.1:1/x"}, 1,
			"the new app DSN postgres://postgres:xxxxx@127.0.0.1:1/x does not connect"},
	}
	for _, tt := range refused {
		code, _, errOut := shardctl(tt.args...)
		if code != tt.code || !strings.Contains(errOut, tt.want) || strings.Contains(errOut, "s3cret") {
			t.Fatalf("%s: exit %d, stderr %q; want exit %d and %q", tt.name, code, errOut, tt.code, tt.want)
		}
	}
	if app, admin, v := dsns(); app != appA || admin != adminA || v != v0 {
		t.Fatalf("refused changes changed the catalog: app %q admin %q version %d→%d", app, admin, v0, v)
	}

	// Password rotation: the app DSN alone, then the admin DSN alone.
	rotated := a + "&password=rotated-s3cret"
	code, out, errOut = shardctl("server", "set-dsn", "a", "--app", rotated)
	if app, admin, v := dsns(); code != 0 || app != rotated || admin != adminA || v != v0+1 || strings.Contains(out, "s3cret") {
		t.Fatalf("set-dsn --app: exit %d %q %q; app %q admin %q version %d", code, out, errOut, app, admin, v)
	}
	code, out, errOut = shardctl("server", "set-dsn", "a", "--admin", rotated)
	if app, admin, v := dsns(); code != 0 || app != rotated || admin != "" || v != v0+2 || !strings.Contains(out, "admin DSN the app DSN") {
		t.Fatalf("set-dsn --admin (same as app): exit %d %q %q; app %q admin %q version %d", code, out, errOut, app, admin, v)
	}
	// A server that is down: --no-check records the DSN all the same.
	down := "postgres://postgres@127.0.0.1:1/x"
	code, _, errOut = shardctl("server", "set-dsn", "a", "--app", down, "--no-check")
	if app, admin, _ := dsns(); code != 0 || app != down || admin != "" {
		t.Fatalf("set-dsn --no-check: exit %d %q; app %q admin %q", code, errOut, app, admin)
	}
}
