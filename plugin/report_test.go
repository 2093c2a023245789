package plugin

import (
	"testing"
	"time"
)

// TestReportKnownDown: a statement failed at once because its server is
// known down (a multi-shard read reports such failures per server) leaves
// the server down; a real failure marks it down, a success up.
func TestReportKnownDown(t *testing.T) {
	s := &serverDB{name: "b"}
	s.report(&ServerError{Server: "b", Err: errKnownDown}, time.Second)
	if s.downUntil.Load() != 0 {
		t.Fatal("a known-down failure marked an up server down")
	}
	s.downUntil.Store(time.Now().Add(time.Minute).UnixNano())
	s.report(&ServerError{Server: "b", Err: errKnownDown}, time.Minute)
	if s.downUntil.Load() == 0 {
		t.Fatal("a known-down failure marked a down server up")
	}
	s.report(nil, time.Minute)
	if s.downUntil.Load() != 0 {
		t.Fatal("a success left the server down")
	}
	s.report(&ServerError{Server: "b", Err: ErrServerUnavailable}, time.Minute)
	if s.downUntil.Load() == 0 {
		t.Fatal("an unreachable server was not marked down")
	}
}
