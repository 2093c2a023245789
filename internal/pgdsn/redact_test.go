package pgdsn

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestRedact(t *testing.T) {
	tests := []struct {
		name, dsn, want string
	}{
		{"url without password", "postgres://app@db:5432/photos", "postgres://app@db:5432/photos"},
		{"url with password", "postgres://app:s3cret@db:5432/photos?sslmode=disable", "postgres://app:xxxxx@db:5432/photos?sslmode=disable"},
		{"url password parameter", "postgresql://db/photos?password=s3cret&sslmode=disable", "postgresql://db/photos?password=xxxxx&sslmode=disable"},
		{"url sslpassword parameter", "postgres://app@db/photos?sslkey=/k&sslpassword=s3cret", "postgres://app@db/photos?sslkey=/k&sslpassword=xxxxx"},
		{"url encoded parameter name", "postgres://db/photos?pass%77ord=s3cret", "postgres://db/photos?pass%77ord=xxxxx"},
		{"url that does not parse", "postgres://app:s3%ZZcret@db/photos", "postgres://app:xxxxx@db/photos"},
		{"url password with slash and at", "postgres://app:s3/c@ret@db/photos", "postgres://app:xxxxx@db/photos"},
		{"url password with question mark", "postgres://app:s3?cret@db/photos", "postgres://app:xxxxx@db/photos"},
		{"multi-host url", "postgres://app:s3cret@h1:5432,h2:5433/photos?target_session_attrs=read-write",
			"postgres://app:xxxxx@h1:5432,h2:5433/photos?target_session_attrs=read-write"},
		{"keyword/value", "host=db user=app password=s3cret dbname=photos", "host=db user=app password=xxxxx dbname=photos"},
		{"keyword/value quoted", `host=db password='s3 c\'ret' dbname=photos`, "host=db password=xxxxx dbname=photos"},
		{"keyword/value escaped space", `host=db password=s3c\ ret dbname=photos`, "host=db password=xxxxx dbname=photos"},
		{"keyword/value escaped backslash", `password=s3c\\ dbname=photos`, "password=xxxxx dbname=photos"},
		{"keyword/value unterminated quote", `host=db password='s3 cret dbname=photos`, "host=db password=xxxxx"},
		{"keyword/value spaced", "host=db password = s3cret", "host=db password = xxxxx"},
		{"keyword/value sslpassword", "host=db sslkey=/k sslpassword='s3 cret'", "host=db sslkey=/k sslpassword=xxxxx"},
		{"keyword/value upper case", "host=db PASSWORD=s3cret", "host=db PASSWORD=xxxxx"},
		{"keyword/value without password", "host=db user=app", "host=db user=app"},
		{"keyword/value multi-host", "host=h1,h2 port=5432,5433 password=s3cret", "host=h1,h2 port=5432,5433 password=xxxxx"},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Redact(tt.dsn)
			if got != tt.want {
				t.Fatalf("Redact(%q) = %q, want %q", tt.dsn, got, tt.want)
			}
			for _, part := range []string{"s3", "ret"} {
				if strings.Contains(got, part) {
					t.Fatalf("Redact(%q) = %q shows part of the password", tt.dsn, got)
				}
			}
		})
	}
}

// TestScrub: the driver's own parse errors quote the DSN with a password
// masked only in part; Scrub's do not, and stay typed.
func TestScrub(t *testing.T) {
	for _, dsn := range []string{
		`host=db password='s3 c\'ret' port=notaport`,
		`host=db password=s3c\ ret port=notaport`,
		"postgres://app:s3%ZZcret@db/photos",
		"postgres://app:s3cret@db:notaport/photos",
	} {
		_, err := pgconn.ParseConfig(dsn)
		if err == nil {
			t.Fatalf("%s parsed", dsn)
		}
		got := Scrub(err)
		if !errors.Is(got, ErrBadDSN) {
			t.Errorf("Scrub(%v) = %v, not ErrBadDSN", err, got)
		}
		for _, part := range []string{"s3", "ret"} {
			if strings.Contains(got.Error(), part) {
				t.Errorf("%s: Scrub gives %q", dsn, got)
			}
		}
	}
	if plain := errors.New("x"); Scrub(plain) != plain {
		t.Error("Scrub changed an error that quotes no DSN")
	}
}

// FuzzRedact: whatever the DSN, a password or key passphrase pgx would read
// from it does not survive Redact; and a DSN pgx parses still parses
// redacted, to the same host, user and database.
func FuzzRedact(f *testing.F) {
	for _, s := range []string{
		"postgres://u:p@h:5433/db?sslmode=disable",
		"postgres://u:pw@h1,h2:5433/db?password=x&sslpassword=y",
		`host=h user=u password='p\'w x' dbname=d`,
		`host=h password=p\ w\\x sslpassword=q dbname=d`,
	} {
		f.Add(s, "s3cret")
	}
	f.Fuzz(func(t *testing.T, dsn, secret string) {
		if cfg, err := pgconn.ParseConfig(dsn); err == nil {
			got := Redact(dsn)
			back, err := pgconn.ParseConfig(got)
			if err != nil {
				t.Fatalf("%q → %q does not parse: %v", dsn, got, err)
			}
			if back.Host != cfg.Host || back.User != cfg.User || back.Database != cfg.Database {
				t.Fatalf("%q → %q: connection differs", dsn, got)
			}
			if back.Password != "" && back.Password != redacted {
				t.Fatalf("%q → %q: password %q", dsn, got, back.Password)
			}
		}
		// The secret, written in each form a DSN can carry it, is gone. A
		// secret that is also template text (a host, a keyword) or that
		// could run into the mask is not a leak to look for.
		if len(secret) < 4 || strings.ContainsAny(secret, "xX") {
			return
		}
		quoted := "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(secret) + "'"
		forms := []func(string, string) string{
			func(s, q string) string { return "host=h user=u password=" + q + " dbname=d" },
			func(s, q string) string { return "host=h sslkey=/k sslpassword=" + q },
			func(s, q string) string { return "postgres://u:" + url.PathEscape(s) + "@h1,h2/d" },
			func(s, q string) string {
				return "postgres://u@h/d?password=" + url.QueryEscape(s) + "&sslpassword=" + url.QueryEscape(s)
			},
			func(s, q string) string { return "postgres://u:" + s + "@h/d" },
		}
		for _, form := range forms {
			if strings.Contains(form(redacted, redacted), secret) {
				continue
			}
			d := form(secret, quoted)
			if got := Redact(d); strings.Contains(got, secret) {
				t.Fatalf("Redact(%q) = %q shows the secret", d, got)
			}
		}
	})
}
