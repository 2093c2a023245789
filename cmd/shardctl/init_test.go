package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest/photos"
)

// TestMain gives this package's tests two Postgres clusters. It is the
// package's only TestMain: other command tests that need a database use
// these clusters (pgtest.NewDatabase(t, 0 or 1)).
func TestMain(m *testing.M) { pgtest.Main(m, 2) }

// testSQLDir is a directory of the test's holding the shared photos schema
// (version 1), for --sql.
func testSQLDir(t *testing.T) string { return photos.SQL.Dir(t) }

// testSQLDirV2 is testSQLDir with version 2 (comments, photos.width).
func testSQLDirV2(t *testing.T) string { return photos.V2.Dir(t) }

func TestInitMigrateStatus(t *testing.T) {
	catalog := pgtest.NewDatabase(t, 0)
	a, b := pgtest.NewDatabase(t, 0), pgtest.NewDatabase(t, 1)
	args := []string{"init", "--catalog", catalog, "--server", "a=" + a, "--server", "b=" + b,
		"--shards", "20", "--sql", testSQLDir(t)}
	code, out, errOut := shardctl(args...)
	if code != 0 {
		t.Fatalf("init: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "2 servers given (20 shard schemas created or updated now)") {
		t.Fatalf("init output %q", out)
	}
	code, out, errOut = shardctl(args...)
	if code != 0 || !strings.Contains(out, "(0 shard schemas created or updated now)") {
		t.Fatalf("init again: exit %d, %q %q; want a no-op", code, out, errOut)
	}

	// The catalog from the environment from here on, read from a file.
	catFile := filepath.Join(t.TempDir(), "catalog.dsn")
	if err := os.WriteFile(catFile, []byte(catalog+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(CatalogEnv, "@"+catFile)
	v2 := testSQLDirV2(t)
	code, out, errOut = shardctl("migrate", "--sql", v2, "--quiet")
	if code != 0 || !strings.Contains(out, "migrated 20 shard schemas") {
		t.Fatalf("migrate: exit %d, %q %q", code, out, errOut)
	}
	code, out, _ = shardctl("migrate", "--sql", v2)
	if code != 0 || !strings.Contains(out, "up to date") {
		t.Fatalf("migrate again: exit %d, %q", code, out)
	}
	pgtest.Exec(t, b, `INSERT INTO shard_0015.photos (user_id) SELECT 15 FROM generate_series(1, 300); ANALYZE shard_0015.photos`)

	code, out, errOut = shardctl("status")
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errOut)
	}
	t.Logf("status:\n%s", out)
	for _, want := range []string{"shard map version 1: 20 logical shards", "0-9", "10-19", "every shard is active", "300"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q", want)
		}
	}
	code, out, errOut = shardctl("status", "--json")
	if code != 0 {
		t.Fatalf("status --json: exit %d: %s", code, errOut)
	}
	var r struct {
		MapVersion int64 `json:"map_version"`
		Shards     int   `json:"shards"`
		Servers    []struct {
			Name   string `json:"name"`
			Shards int    `json:"shards"`
			Rows   int64  `json:"rows"`
			Bytes  int64  `json:"bytes"`
		} `json:"servers"`
		NotActive []any `json:"not_active"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("status --json output %q: %v", out, err)
	}
	if r.Shards != 20 || len(r.Servers) != 2 || r.Servers[1].Rows != 300 || r.Servers[0].Bytes == 0 || r.NotActive == nil {
		t.Fatalf("status --json: %+v", r)
	}
}

func TestInitErrors(t *testing.T) {
	catalog := pgtest.NewDatabase(t, 0)
	a := pgtest.NewDatabase(t, 1)
	if code, _, errOut := shardctl("init", "--catalog", catalog, "--server", "a="+a, "--shards", "8", "--quiet"); code != 0 {
		t.Fatalf("init: %s", errOut)
	}
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no servers", []string{"init", "--catalog", catalog}, 2, "--server NAME=DSN"},
		{"no catalog", []string{"init", "--server", "a=" + a}, 2, "SHARDKIT_CATALOG"},
		{"bad server flag", []string{"init", "--catalog", catalog, "--server", "a"}, 2, "want NAME=DSN"},
		{"admin DSN of no server", []string{"init", "--catalog", catalog, "--server", "a=" + a, "--admin", "z=" + a}, 2, "--admin \"z="},
		{"admin DSN of another server", []string{"init", "--catalog", catalog, "--server", "a=" + a, "--server", "c=postgres://c", "--admin", "c=" + a}, 2, `the same DSN as server "a"`},
		{"shard count", []string{"init", "--catalog", catalog, "--server", "a=" + a, "--shards", "16"}, 1, "rekey"},
		{"unreachable", []string{"init", "--catalog", catalog, "--server", "a=" + a, "--server", "z=postgres://postgres@127.0.0.1:1/x"}, 1, `server "z": server unreachable`},
		{"duplicate", []string{"init", "--catalog", catalog, "--server", "a=" + pgtest.NewDatabase(t, 0), "--shards", "8"}, 1, "duplicate server name"},
		{"missing sql dir", []string{"migrate", "--catalog", catalog, "--sql", "/nonexistent"}, 2, "not a directory"},
		{"unknown server", []string{"migrate", "--catalog", catalog, "--server", "nope"}, 2, `--server "nope": no such server in the catalog (servers: a)`},
		// Values that only the catalog can refuse are still usage errors.
		{"move shard past the count", []string{"move", "--catalog", catalog, "--shard", "8", "--to", "a"}, 2, "--shard 8: no such logical shard; the catalog has 8 (0 to 7)"},
		{"move range past the count", []string{"move", "--catalog", catalog, "--shard", "6-9", "--to", "a"}, 2, "--shard 8: no such logical shard"},
		{"resume shard past the count", []string{"move", "--catalog", catalog, "--shard", "64", "--resume"}, 2, "--shard 64: no such logical shard"},
		{"move to unknown server", []string{"move", "--catalog", catalog, "--shard", "1", "--to", "zz"}, 2, `--to "zz": no such server`},
		{"rollback shard past the count", []string{"rollback", "--catalog", catalog, "--shard", "8"}, 2, "no such logical shard"},
		{"verify shard past the count", []string{"verify", "--catalog", catalog, "--shard", "3,8"}, 2, "--shard 8: no such logical shard"},
		{"rebalance unknown server", []string{"rebalance", "--catalog", catalog, "--dry-run", "--servers", "a,zz"}, 2, `--servers "zz": no such server`},
	}
	t.Setenv(CatalogEnv, "")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := shardctl(tt.args...)
			if code != tt.code || !strings.Contains(errOut, tt.want) || !strings.HasPrefix(errOut, "shardctl: ") || strings.Count(errOut, "\n") != 1 {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", code, errOut, tt.code, tt.want)
			}
		})
	}
}

// TestFlagErrorsRedactDSN: a malformed or conflicting NAME=DSN flag is
// refused with the DSN shown redacted, whatever form its password takes;
// a DSN read from a file (NAME=@PATH) is the file's content.
func TestFlagErrorsRedactDSN(t *testing.T) {
	const url, kv = "postgres://u:s3cret@h/db", `host=h password=s3c\ ret dbname=db`
	file := filepath.Join(t.TempDir(), "a.dsn")
	if err := os.WriteFile(file, []byte(url+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name                      string
		servers, admins, replicas []string
	}{
		{"same DSN twice", []string{"a=" + url, "b=" + url}, nil, nil},
		{"same DSN twice, one from a file", []string{"a=@" + file, "b=" + url}, nil, nil},
		{"name twice", []string{"a=" + kv, "a=postgres://x"}, nil, nil},
		{"admin of no server", []string{"a=postgres://x"}, []string{"z=" + kv}, nil},
		{"admin given twice", []string{"a=postgres://x"}, []string{"a=" + kv, "a=" + url}, nil},
		{"replica of no server", []string{"a=postgres://x"}, nil, []string{"z=" + url}},
		{"no name", []string{"=" + kv}, nil, nil},
		{"unreadable file", []string{"a=@" + file + ".missing"}, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseServers(tt.servers, tt.admins, tt.replicas)
			if !errors.Is(err, errUsage) {
				t.Fatalf("error %v, want a usage error", err)
			}
			if strings.Contains(err.Error(), "s3c") || strings.Contains(err.Error(), "ret") {
				t.Fatalf("error %q shows a password", err)
			}
		})
	}
	specs, err := parseServers([]string{"a=@" + file}, []string{"a=" + kv}, nil)
	if err != nil || specs[0].DSN != url || specs[0].AdminDSN != kv {
		t.Fatalf("parseServers with a DSN file: %+v, %v", specs, err)
	}
}

// TestInitAppRole: init --app-role creates the named group role on the
// catalog's cluster and every server's, records it in the catalog and
// grants it the application's part: the map, not a server's admin DSN nor
// a write to the map, and the shard tables of each server's homes. Without
// the flag a new catalog records shardkit_app; a name shardkit does not
// accept is a usage error.
func TestInitAppRole(t *testing.T) {
	ctx := context.Background()
	const role = "shardctl_init_app"
	cat := pgtest.NewDatabase(t, 0)
	a, b := pgtest.NewDatabase(t, 0), pgtest.NewDatabase(t, 1)
	code, out, errOut := shardctl("init", "--catalog", cat, "--server", "a="+a, "--server", "b="+b,
		"--shards", "4", "--sql", testSQLDir(t), "--quiet", "--app-role", role)
	if code != 0 {
		t.Fatalf("init --app-role: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "application role "+role) {
		t.Errorf("init output %q does not name the application role", out)
	}
	c := pgtest.Connect(t, cat)
	var recorded string
	if err := c.QueryRow(ctx, `SELECT app_role FROM shardkit.config`).Scan(&recorded); err != nil || recorded != role {
		t.Fatalf("catalog records application role %q (err %v), want %q", recorded, err, role)
	}
	var login, super, mapRead, mapWrite, adminRead bool
	err := c.QueryRow(ctx, `SELECT rolcanlogin, rolsuper,
		has_table_privilege($1, 'shardkit.shard_map', 'SELECT'), has_table_privilege($1, 'shardkit.shard_map', 'UPDATE'),
		has_column_privilege($1, 'shardkit.servers', 'admin_dsn', 'SELECT')
		FROM pg_roles WHERE rolname = $1`, role).Scan(&login, &super, &mapRead, &mapWrite, &adminRead)
	if err != nil {
		t.Fatalf("the role on the catalog's cluster: %v", err)
	}
	if login || super || !mapRead || mapWrite || adminRead {
		t.Errorf("catalog: login %v, superuser %v, reads the map %v, writes it %v, reads admin_dsn %v; want only the map read",
			login, super, mapRead, mapWrite, adminRead)
	}
	for name, dsn := range map[string]string{"a": a, "b": b} {
		var home string
		if err := c.QueryRow(ctx, `SELECT 'shard_' || lpad(min(shard)::text, 4, '0') FROM shardkit.shard_map WHERE server = $1`, name).Scan(&home); err != nil {
			t.Fatal(err)
		}
		var usage, write, server, decide bool
		err := pgtest.Connect(t, dsn).QueryRow(ctx, `SELECT has_schema_privilege($1, $2, 'USAGE'), has_table_privilege($1, $2 || '.photos', 'INSERT'),
			has_schema_privilege($1, 'shardkit', 'USAGE'), has_table_privilege($1, 'shardkit.tx_decisions', 'INSERT')`,
			role, home).Scan(&usage, &write, &server, &decide)
		if err != nil || !usage || !write {
			t.Errorf("server %s: %s's usage of its home %s %v, insert into its photos %v (err %v); want both", name, role, home, usage, write, err)
		}
		// next_id() (the column defaults) and an atomic transaction's
		// commit decision are in the server's schema shardkit.
		if !server || !decide {
			t.Errorf("server %s: %s's usage of schema shardkit %v, insert into shardkit.tx_decisions %v; want both", name, role, server, decide)
		}
	}

	cat2 := pgtest.NewDatabase(t, 0)
	code, out, errOut = shardctl("init", "--catalog", cat2, "--server", "a="+pgtest.NewDatabase(t, 1), "--shards", "2", "--quiet")
	if code != 0 || !strings.Contains(out, "application role shardkit_app") {
		t.Errorf("init without --app-role: exit %d, %q %q; want application role shardkit_app", code, out, errOut)
	}

	code, _, errOut = shardctl("init", "--catalog", cat, "--server", "a="+a, "--app-role", "Photos-App")
	if code != 2 || !strings.Contains(errOut, `--app-role "Photos-App"`) || !strings.Contains(errOut, "lower case letters") {
		t.Errorf("init --app-role Photos-App: exit %d, %q; want a usage error naming the flag", code, errOut)
	}
}
