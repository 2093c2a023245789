package pgdsn

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m, 1) }

func TestLibpq(t *testing.T) {
	cases := []struct{ dsn, want string }{
		{"postgres://u:p%27w@h:5433/db?sslmode=disable",
			`host='h' port='5433' dbname='db' user='u' password='p\'w' sslmode='disable'`},
		{"postgres://u@h/db?sslmode=disable&statement_cache_capacity=256&pool_max_conns=4&default_query_exec_mode=exec",
			`host='h' port='5432' dbname='db' user='u' sslmode='disable'`},
		{"host=h user=u dbname=db sslmode=disable connect_timeout=3 application_name='my app' search_path='a, b'",
			`host='h' port='5432' dbname='db' user='u' sslmode='disable' connect_timeout='3' application_name='my app' options='-c search_path=a,\\ b'`},
		{`host=/run/pg user=u dbname=db sslmode=disable options='-c work_mem=64MB' statement_timeout=5000`,
			`host='/run/pg' port='5432' dbname='db' user='u' sslmode='disable' options='-c work_mem=64MB -c statement_timeout=5000'`},
	}
	for _, c := range cases {
		got, err := Libpq(c.dsn)
		if err != nil {
			t.Fatalf("%s: %v", c.dsn, err)
		}
		if got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.dsn, got, c.want)
		}
	}
	if _, err := Libpq("postgres://h:notaport/db"); err == nil {
		t.Error("a malformed DSN was accepted")
	}
}

// TestLibpqAcceptedByPostgres: Postgres checks a subscription's connection
// string with libpq even when it does not connect, and refuses pgx's own
// settings; what Libpq returns passes. With psql at hand, the run-time
// parameters also take effect on a real connection.
func TestLibpqAcceptedByPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a cluster")
	}
	dsn := pgtest.NewDatabase(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := pgtest.Connect(t, dsn)
	withPgx := dsn + "&statement_cache_capacity=256&pool_max_conns=3&search_path=public,pg_catalog"
	sub := func(conninfo string) error {
		q := fmt.Sprintf("CREATE SUBSCRIPTION s CONNECTION %s PUBLICATION p WITH (connect = false)", quote(conninfo))
		if _, err := conn.Exec(ctx, q); err != nil {
			return err
		}
		_, err := conn.Exec(ctx, "ALTER SUBSCRIPTION s SET (slot_name = NONE); DROP SUBSCRIPTION s")
		return err
	}
	if err := sub(withPgx); err == nil || !strings.Contains(err.Error(), "statement_cache_capacity") {
		t.Fatalf("Postgres took a pgx DSN as a connection string: %v", err)
	}
	info, err := Libpq(withPgx)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub(info); err != nil {
		t.Fatalf("Postgres refused %s: %v", info, err)
	}
	psql, err := exec.LookPath("psql")
	if err != nil {
		t.Log("psql not found: the parameters' effect is not checked")
		return
	}
	out, err := exec.CommandContext(ctx, psql, info, "-XAtc", "SHOW search_path").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "public,pg_catalog" {
		t.Fatalf("psql %s: search_path %q, %v", info, out, err)
	}
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// FuzzLibpq: for every DSN pgx accepts, the libpq string Libpq makes
// parses back to the same connection: host, port, database, user,
// password, TLS mode, connect timeout and every run-time parameter (the
// others inside options, as -c settings).
func FuzzLibpq(f *testing.F) {
	for _, s := range []string{
		"postgres://u:p@h:5433/db?sslmode=disable",
		"host=h user=u dbname=db sslmode=disable application_name='a b' search_path='x y'",
		"postgres://u@h/db?sslmode=require&statement_cache_capacity=9&work_mem=1MB",
		`host=h user='o\'k' password='p\\q' dbname=d options='-c a=b'`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, dsn string) {
		orig, err := pgconn.ParseConfig(dsn)
		if err != nil {
			return
		}
		info, err := Libpq(dsn)
		if err != nil {
			t.Fatalf("Libpq refused what pgx parsed: %v", err)
		}
		back, err := pgconn.ParseConfig(info)
		if err != nil {
			t.Fatalf("%q → %q does not parse: %v", dsn, info, err)
		}
		if orig.User == "" || orig.Database == "" {
			return // left to libpq's defaults, which need not be pgx's
		}
		if back.Host != orig.Host || back.Port != orig.Port || back.Database != orig.Database || back.User != orig.User ||
			back.Password != orig.Password || SSLMode(back) != SSLMode(orig) {
			t.Fatalf("%q → %q: connection differs: %+v vs %+v", dsn, info, back, orig)
		}
		want := map[string]string{}
		var opts []string
		for k, v := range orig.RuntimeParams {
			switch k {
			case "application_name":
				want[k] = v
			case "options":
				opts = append(opts, v)
			default:
				if pgxOnly(k) {
					continue
				}
				opts = append(opts, "-c "+escapeOption(k)+"="+escapeOption(v))
			}
		}
		for k, v := range back.RuntimeParams {
			if k == "options" {
				for _, o := range opts {
					if !strings.Contains(v, o) {
						t.Fatalf("%q → %q: options %q lack %q", dsn, info, v, o)
					}
				}
				continue
			}
			if want[k] != v {
				t.Fatalf("%q → %q: run-time parameter %s = %q, want %q", dsn, info, k, v, want[k])
			}
		}
	})
}
