package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/examples/photos/store"
	"github.com/shardkit/shardkit/plugin"
)

// TestAdminGuard: the admin endpoints answer loopback clients, and others
// only with the token.
func TestAdminGuard(t *testing.T) {
	ok := func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }
	tests := []struct {
		name, token, remote, auth string
		want                      int
	}{
		{"loopback, no token set", "", "127.0.0.1:5000", "", http.StatusNoContent},
		{"loopback v6", "", "[::1]:5000", "", http.StatusNoContent},
		{"remote, no token set", "", "192.0.2.1:5000", "", http.StatusForbidden},
		{"remote, no token set, one presented", "", "192.0.2.1:5000", "Bearer ", http.StatusForbidden},
		{"remote, the token", "t0ken", "192.0.2.1:5000", "Bearer t0ken", http.StatusNoContent},
		{"remote, another token", "t0ken", "192.0.2.1:5000", "Bearer t0ke", http.StatusForbidden},
		{"remote, no header", "t0ken", "192.0.2.1:5000", "", http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/admin/api/rows", nil)
			req.RemoteAddr = tt.remote
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			rec := httptest.NewRecorder()
			AdminToken(tt.token).guard(ok)(rec, req)
			if rec.Code != tt.want {
				t.Fatalf("%d, want %d: %s", rec.Code, tt.want, rec.Body)
			}
		})
	}
	// A browser: the token once in the address, a cookie after.
	g := AdminToken("t0ken").guard(ok)
	req := httptest.NewRequest(http.MethodGet, "/admin?token=t0ken", nil)
	rec := httptest.NewRecorder()
	g(rec, req)
	cookies := rec.Result().Cookies()
	if rec.Code != http.StatusSeeOther || len(cookies) != 1 || !cookies[0].HttpOnly {
		t.Fatalf("/admin?token=: %d, cookies %v", rec.Code, cookies)
	}
	req = httptest.NewRequest(http.MethodGet, "/admin/api/map", nil)
	req.AddCookie(cookies[0])
	rec = httptest.NewRecorder()
	g(rec, req)
	if rec.Code != http.StatusNoContent {
		t.Fatalf("with the cookie: %d", rec.Code)
	}
	req = httptest.NewRequest(http.MethodGet, "/admin?token=wrong", nil)
	rec = httptest.NewRecorder()
	g(rec, req)
	if rec.Code != http.StatusForbidden || len(rec.Result().Cookies()) != 0 {
		t.Fatalf("/admin?token=wrong: %d, cookies %v", rec.Code, rec.Result().Cookies())
	}
}

// TestErrorText: a client learns what to change from a request error, and
// nothing of the service's insides (addresses, DSNs, SQL) from the others.
func TestErrorText(t *testing.T) {
	inside := "dial tcp 10.0.0.7:5432: postgres://app:s3cret@10.0.0.7/photos"
	for _, err := range []error{
		errors.New(inside),
		&plugin.ServerError{Server: "beta", Err: errors.New(inside)},
		fmt.Errorf("%w: %s", plugin.ErrServerUnavailable, inside),
	} {
		got := errorText(err)
		if strings.Contains(got, "10.0.0.7") || strings.Contains(got, "s3cret") {
			t.Errorf("%v: the client sees %q", err, got)
		}
	}
	if got := errorText(&plugin.ServerError{Server: "beta", Err: errors.New(inside)}); !strings.Contains(got, "server beta") {
		t.Errorf("an unavailable server: %q does not name it", got)
	}
	bad := fmt.Errorf("%w: caption over 2000 characters", store.ErrInvalid)
	if got := errorText(bad); got != bad.Error() {
		t.Errorf("a request error: %q, want its message", got)
	}
}
