package procmem

import (
	"os"
	"testing"
)

func TestParseRssAnon(t *testing.T) {
	for _, tc := range []struct {
		name, status string
		mb           float64
		ok           bool
	}{
		{"kB line", "Name:\tpostgres\nRssAnon:\t    2048 kB\nRssFile:\t1 kB\n", 2, true},
		{"missing", "Name:\tpostgres\nVmRSS:\t2048 kB\n", 0, false},
		{"other unit", "RssAnon:\t2048 MB\n", 0, false},
		{"not a number", "RssAnon:\tx kB\n", 0, false},
	} {
		mb, ok := parseRssAnon(tc.status)
		if mb != tc.mb || ok != tc.ok {
			t.Errorf("%s: got %v, %v; want %v, %v", tc.name, mb, ok, tc.mb, tc.ok)
		}
	}
}

func TestOwnProcess(t *testing.T) {
	mb, ok := RssAnonMB(os.Getpid())
	if !ok || mb <= 0 {
		t.Fatalf("RssAnonMB(self) = %v, %v; want a positive size", mb, ok)
	}
	if _, ok := RssAnonMB(-1); ok {
		t.Fatal("RssAnonMB(-1) reported a size")
	}
}
