package pgdsn

import (
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	tests := []struct {
		name, dsn, want string
	}{
		{"url without password", "postgres://app@db:5432/photos", "postgres://app@db:5432/photos"},
		{"url with password", "postgres://app:s3cret@db:5432/photos?sslmode=disable", "postgres://app:xxxxx@db:5432/photos?sslmode=disable"},
		{"url password parameter", "postgresql://db/photos?password=s3cret&sslmode=disable", "postgresql://db/photos?password=xxxxx&sslmode=disable"},
		{"url that does not parse", "postgres://app:s3%ZZcret@db/photos", "postgres://xxxxx@db/photos"},
		{"keyword/value", "host=db user=app password=s3cret dbname=photos", "host=db user=app password=xxxxx dbname=photos"},
		{"keyword/value quoted", `host=db password='s3 c\'ret' dbname=photos`, "host=db password=xxxxx dbname=photos"},
		{"keyword/value spaced", "host=db password = s3cret", "host=db password = xxxxx"},
		{"keyword/value without password", "host=db user=app", "host=db user=app"},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Redact(tt.dsn)
			if got != tt.want {
				t.Fatalf("Redact(%q) = %q, want %q", tt.dsn, got, tt.want)
			}
			if strings.Contains(got, "s3") {
				t.Fatalf("Redact(%q) = %q shows the password", tt.dsn, got)
			}
		})
	}
}
