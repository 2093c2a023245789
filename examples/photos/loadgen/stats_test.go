package loadgen

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestStats(t *testing.T) {
	s := newStats()
	for i := 1; i <= 100; i++ {
		s.record(OpFeed, time.Duration(i)*time.Millisecond, nil)
	}
	s.record(OpUpload, 5*time.Millisecond, errors.New("HTTP 500"))
	s.windowOn = true
	s.record(OpUpload, 40*time.Millisecond, nil)
	s.record(OpFeed, 900*time.Millisecond, nil) // a read: not a write in the window
	s.windowOn = false
	s.record(OpUpload, 700*time.Millisecond, nil)

	if s.windowMx != 40*time.Millisecond {
		t.Errorf("longest write in the window %s, want 40ms", s.windowMx)
	}
	total, errs := s.counts()
	if total != 104 || errs != 1 {
		t.Errorf("counts %d, %d; want 104, 1", total, errs)
	}
	byOp := map[string]OpStats{}
	for _, o := range s.ops() {
		byOp[o.Op] = o
	}
	feed := byOp[OpFeed]
	if feed.Requests != 101 || feed.P50 != 51*time.Millisecond || feed.P99 != 100*time.Millisecond || feed.Max != 900*time.Millisecond {
		t.Errorf("feed stats %+v", feed)
	}
	if byOp[OpUpload].Errors != 1 || byOp["all"].Requests != 104 || byOp["all"].Errors != 1 {
		t.Errorf("upload %+v, all %+v", byOp[OpUpload], byOp["all"])
	}
	r := Result{Elapsed: 2 * time.Second, Requests: 104, Errors: 1, Ops: s.ops(), FirstErrors: s.firstErrs}
	if r.Throughput() != 52 {
		t.Errorf("throughput %f, want 52", r.Throughput())
	}
	var b strings.Builder
	r.Print(&b)
	for _, want := range []string{"104 requests", "52 req/s", "1 errors", "feed", "upload: HTTP 500"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("printed result lacks %q:\n%s", want, b.String())
		}
	}
}

func TestPercentile(t *testing.T) {
	cases := []struct {
		name string
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{"empty", nil, .5, 0},
		{"one", []time.Duration{7}, .99, 7},
		{"median of four", []time.Duration{1, 2, 3, 4}, .5, 2},
		{"max", []time.Duration{1, 2, 3, 4}, 1, 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := percentile(c.in, c.p); got != c.want {
				t.Fatalf("percentile %v = %v, want %v", c.p, got, c.want)
			}
		})
	}
}
