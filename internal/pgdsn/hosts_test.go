package pgdsn

import (
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestLibpqMultiHost: every host of an HA group's DSN, and its
// target_session_attrs, reach libpq's form, each host once even where
// sslmode=prefer makes pgx try it twice.
func TestLibpqMultiHost(t *testing.T) {
	cases := []struct{ dsn, want string }{
		{"host=a,b port=5432,5433 user=u dbname=db sslmode=disable target_session_attrs=read-write",
			`host='a,b' port='5432,5433' target_session_attrs='read-write' dbname='db' user='u' sslmode='disable'`},
		{"postgres://u@a:5432,b:5433/db?sslmode=disable&target_session_attrs=primary",
			`host='a,b' port='5432,5433' target_session_attrs='primary' dbname='db' user='u' sslmode='disable'`},
		{"host=a,b user=u dbname=db sslmode=prefer",
			`host='a,b' port='5432,5432' dbname='db' user='u' sslmode='prefer'`},
		{"host=a user=u dbname=db sslmode=disable target_session_attrs=any",
			`host='a' port='5432' dbname='db' user='u' sslmode='disable'`},
	}
	for _, c := range cases {
		got, err := Libpq(c.dsn)
		if err != nil {
			t.Fatalf("%s: %v", c.dsn, err)
		}
		if got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.dsn, got, c.want)
		}
		back, err := pgconn.ParseConfig(got)
		if err != nil {
			t.Fatalf("%s: libpq form does not parse: %v", c.dsn, err)
		}
		orig, _ := pgconn.ParseConfig(c.dsn)
		if h, o := Hosts(back), Hosts(orig); len(h) != len(o) || TargetSessionAttrs(back) != TargetSessionAttrs(orig) {
			t.Errorf("%s: parses back to hosts %v (%q), want %v (%q)", c.dsn, h, TargetSessionAttrs(back), o, TargetSessionAttrs(orig))
		}
	}
}

// TestLibpqAt: the libpq form pinned to one host of an HA group's DSN
// names that host alone, with everything else of the DSN kept.
func TestLibpqAt(t *testing.T) {
	dsn := "host=a,b port=5432,5433 user=u password=p dbname=db sslmode=disable target_session_attrs=read-write"
	got, err := LibpqAt(dsn, HostPort{"b", 5433})
	if err != nil {
		t.Fatal(err)
	}
	want := `host='b' port='5433' target_session_attrs='read-write' dbname='db' user='u' password='p' sslmode='disable'`
	if got != want {
		t.Errorf("LibpqAt:\n got %s\nwant %s", got, want)
	}
}

func TestSharesHost(t *testing.T) {
	parse := func(s string) *pgconn.Config {
		c, err := pgconn.ParseConfig(s)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"host=a port=1 sslmode=disable", "host=a port=1 sslmode=disable dbname=other", true},
		{"host=a port=1 sslmode=disable", "host=a port=2 sslmode=disable", false},
		{"host=a,b port=1,2 sslmode=disable", "host=c,b port=3,2 sslmode=disable", true},
		{"host=a,b port=1,2 sslmode=disable", "host=c,d port=1,2 sslmode=disable", false},
	} {
		if got := SharesHost(parse(c.a), parse(c.b)); got != c.want {
			t.Errorf("SharesHost(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
