package main

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/harness/pgbouncer"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/router"
)

// TestServerLinkFlags: init records a server whose app DSN names its
// admin DSN's endpoint (another application_name and password, as a
// login of its own would) as direct and one given --pooled as pooled;
// server set-dsn --direct and --pooled change the record alone, and say
// it; both flags at once, or an unknown server, are refused.
func TestServerLinkFlags(t *testing.T) {
	cat := pgtest.NewDatabase(t, 0)
	a, b := pgtest.NewDatabase(t, 0), pgtest.NewDatabase(t, 1)
	appA := a + "&password=app-s3cret&application_name=app"
	code, _, errOut := shardctl("init", "--catalog", cat, "--server", "a="+appA, "--admin", "a="+a,
		"--server", "b="+b, "--pooled", "b", "--shards", "8", "--quiet")
	if code != 0 {
		t.Fatalf("init: exit %d: %s", code, errOut)
	}
	t.Setenv(CatalogEnv, cat)
	links := func() (a, b router.Server) {
		t.Helper()
		c, err := catalog.Open(context.Background(), cat)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		snap, err := c.Load(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		a, _ = snap.Server("a")
		b, _ = snap.Server("b")
		return a, b
	}
	if sa, sb := links(); sa.Link != router.LinkDirect || !sa.Direct() || sb.Link != router.LinkPooled || sb.Direct() {
		t.Fatalf("after init: a %v, b %v; want a direct (an app login on its admin DSN's endpoint), b pooled (--pooled)", sa.Link, sb.Link)
	}
	code, out, errOut := shardctl("server", "set-dsn", "a", "--pooled")
	if sa, _ := links(); code != 0 || sa.Link != router.LinkPooled || sa.DSN != appA || !strings.Contains(out, "(pooled)") {
		t.Fatalf("set-dsn a --pooled: exit %d %q %q; a %v %q", code, out, errOut, sa.Link, sa.DSN)
	}
	code, out, errOut = shardctl("server", "set-dsn", "b", "--direct")
	if _, sb := links(); code != 0 || sb.Link != router.LinkDirect || !sb.Direct() || !strings.Contains(out, "(direct)") {
		t.Fatalf("set-dsn b --direct: exit %d %q %q; b %v", code, out, errOut, sb.Link)
	}
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"server", "set-dsn", "a", "--direct", "--pooled"}, 2, "give --direct or --pooled, not both"},
		{[]string{"server", "set-dsn", "zz", "--direct"}, 1, `server not in the catalog: "zz"`},
	} {
		if code, _, errOut := shardctl(tt.args...); code != tt.code || !strings.Contains(errOut, tt.want) {
			t.Fatalf("%v: exit %d, stderr %q; want exit %d and %q", tt.args, code, errOut, tt.code, tt.want)
		}
	}
}

// TestServerSetDSNWarnsPooler: a server recorded direct whose app DSN
// reaches PgBouncer (1.18, transaction mode) is recorded as told, with a
// warning that a pooler stands between; recorded pooled, no warning.
func TestServerSetDSNWarnsPooler(t *testing.T) {
	if _, err := pgbouncer.Binary(); err != nil {
		t.Skip(err)
	}
	cat := pgtest.NewDatabase(t, 0)
	a := pgtest.NewDatabase(t, 0)
	if code, _, errOut := shardctl("init", "--catalog", cat, "--server", "a="+a, "--shards", "4", "--quiet"); code != 0 {
		t.Fatalf("init: exit %d: %s", code, errOut)
	}
	t.Setenv(CatalogEnv, cat)
	u, err := url.Parse(a)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := pgbouncer.Start(ctx, pgbouncer.Options{Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	pooled := b.DSN(strings.TrimPrefix(u.Path, "/"))
	code, out, errOut := shardctl("server", "set-dsn", "a", "--app", pooled, "--admin", a, "--direct")
	if code != 0 || !strings.Contains(out, "(direct)") || !strings.Contains(errOut, "a pooler (or a forwarded port) stands between") {
		t.Fatalf("set-dsn --direct through PgBouncer: exit %d, stdout %q, stderr %q; want it recorded direct, with a warning", code, out, errOut)
	}
	code, out, errOut = shardctl("server", "set-dsn", "a", "--pooled")
	if code != 0 || !strings.Contains(out, "(pooled)") || strings.Contains(errOut, "warning") {
		t.Fatalf("set-dsn --pooled: exit %d, stdout %q, stderr %q; want it recorded pooled, no warning", code, out, errOut)
	}
}
