package api

import (
	"crypto/subtle"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// AdminToken opens the admin endpoints to clients beyond this host: a
// request with "Authorization: Bearer TOKEN", or with the cookie that
// opening /admin?token=TOKEN in a browser sets, is served from anywhere.
// Empty, the admin endpoints answer loopback clients only.
type AdminToken string

// adminCookie carries the token for the admin page's own requests.
const adminCookie = "photos_admin"

// guard serves h to loopback clients, and to others that present the
// token; the rest get 403 without a word about why beyond what to do.
func (t AdminToken) guard(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if loopback(r.RemoteAddr) || t.presented(r) {
			h(w, r)
			return
		}
		if q := r.URL.Query().Get("token"); t != "" && subtle.ConstantTimeCompare([]byte(q), []byte(t)) == 1 {
			// A browser opening /admin?token=…: the page's requests carry
			// the cookie from here on; the token leaves the address bar.
			http.SetCookie(w, &http.Cookie{Name: adminCookie, Value: string(t), Path: "/admin",
				HttpOnly: true, SameSite: http.SameSiteStrictMode})
			http.Redirect(w, r, r.URL.Path, http.StatusSeeOther)
			return
		}
		writeJSON(w, http.StatusForbidden, map[string]string{
			"error": "photos: the admin endpoints answer this host only, or a request with Authorization: Bearer and the service's admin token"})
	}
}

func (t AdminToken) presented(r *http.Request) bool {
	if t == "" {
		return false
	}
	if got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return subtle.ConstantTimeCompare([]byte(got), []byte(t)) == 1
	}
	c, err := r.Cookie(adminCookie)
	return err == nil && subtle.ConstantTimeCompare([]byte(c.Value), []byte(t)) == 1
}

// loopback reports a client address on this host.
func loopback(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// rowsEvery is how long a row count is served again before the servers
// are counted anew: a count runs one query per table of every shard, so
// however many clients ask, the servers count at most once a rowsEvery.
const rowsEvery = 10 * time.Second

// rowsCache keeps the last row count and lets one count run at a time;
// the other requests wait for it, bounded by their own contexts.
type rowsCache struct {
	running chan struct{} // a count holds it
	mu      sync.Mutex
	at      time.Time
	version int64
	rows    any
}

func newRowsCache() *rowsCache { return &rowsCache{running: make(chan struct{}, 1)} }

// fresh returns the last count if it is of the map version asked and
// younger than rowsEvery.
func (c *rowsCache) fresh(version int64) (any, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rows != nil && c.version == version && time.Since(c.at) < rowsEvery {
		return c.rows, true
	}
	return nil, false
}

func (c *rowsCache) keep(version int64, rows any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at, c.version, c.rows = time.Now(), version, rows
}
