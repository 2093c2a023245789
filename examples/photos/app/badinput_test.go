package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/shardkit/shardkit/examples/photos/api"
)

// badInputShards keeps the bad-input fixture small: a few shards are
// enough, and an ID naming shard 9 is outside the map.
const badInputShards = 8

// raw sends body as is and returns the status and the answer.
func (f *fixture) raw(t testing.TB, method, path string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, f.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, data
}

// checkErrorBody fails unless a 4xx/5xx answer is a JSON object with a
// non-empty "error".
func checkErrorBody(t testing.TB, what string, code int, body []byte) {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
		t.Fatalf("%s: %d with body %q; want a JSON error", what, code, body)
	}
}

// TestBadInput sends every kind of malformed request to every route: each
// is answered 400, 404 or 413 with a JSON error, never 500, and stores
// nothing it should not.
func TestBadInput(t *testing.T) {
	f := newFixtureShards(t, badInputShards)
	var u userJSON
	f.mustCall(t, http.StatusCreated, "POST", "/users", map[string]string{"name": "owner"}, &u)
	var other userJSON
	f.mustCall(t, http.StatusCreated, "POST", "/users", map[string]string{"name": "other"}, &other)
	var p photoJSON
	f.mustCall(t, http.StatusCreated, "POST", "/users/"+u.ID+"/photos", map[string]any{"url": "https://img.example/1.jpg"}, &p)

	// An ID whose shard bits name shard 9 of 8: it cannot name any row.
	noShard, err := f.layout.Compose(f.layout.EpochMs+1000, badInputShards+1, 1)
	if err != nil {
		t.Fatal(err)
	}
	bad := fmt.Sprint(noShard)
	js := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := []struct {
		name, method, path string
		body               []byte
		want               int
		errorHas           string
	}{
		// IDs that name no shard, on every route that takes one.
		{"get user, no such shard", "GET", "/users/" + bad, nil, 400, "shard bits name shard 9"},
		{"upload, no such shard", "POST", "/users/" + bad + "/photos", js(map[string]string{"url": "u"}), 400, "shard 9"},
		{"list photos, no such shard", "GET", "/users/" + bad + "/photos", nil, 400, "shard 9"},
		{"follow, no such shard", "POST", "/users/" + bad + "/follows", js(map[string]string{"followee_id": u.ID}), 400, "shard 9"},
		{"followee, no such shard", "POST", "/users/" + u.ID + "/follows", js(map[string]string{"followee_id": bad}), 400, "followee_id"},
		{"following, no such shard", "GET", "/users/" + bad + "/following", nil, 400, "shard 9"},
		{"feed, no such shard", "GET", "/users/" + bad + "/feed", nil, 400, "shard 9"},
		{"get photo, no such shard", "GET", "/photos/" + bad, nil, 400, "shard 9"},
		{"like, no such shard", "POST", "/photos/" + bad + "/likes", js(map[string]string{"user_id": u.ID}), 400, "shard 9"},
		{"liker, no such shard", "POST", "/photos/" + p.ID + "/likes", js(map[string]string{"user_id": bad}), 400, "user_id"},
		{"likes, no such shard", "GET", "/photos/" + bad + "/likes", nil, 400, "shard 9"},
		{"admin photos, no such shard", "GET", "/admin/api/users/" + bad + "/photos", nil, 400, "shard 9"},
		// IDs that are not IDs.
		{"zero path id", "GET", "/users/0", nil, 400, "positive"},
		{"huge path id", "GET", "/users/9223372036854775808", nil, 400, "positive"},
		{"zero liker", "POST", "/photos/" + p.ID + "/likes", js(map[string]string{"user_id": "0"}), 400, "IDs are positive"},
		{"liker as a number", "POST", "/photos/" + p.ID + "/likes", []byte(`{"user_id": 5}`), 400, "bad JSON"},
		{"followee not a number", "POST", "/users/" + u.ID + "/follows", js(map[string]string{"followee_id": "abc"}), 400, "bad JSON"},
		{"negative cursor", "GET", "/users/" + u.ID + "/photos?before=-1", nil, 400, "before"},
		{"zero limit", "GET", "/users/" + u.ID + "/feed?limit=0", nil, 400, "limit"},
		// Text Postgres cannot store, and lengths in characters.
		{"NUL in name", "POST", "/users", js(map[string]string{"name": "a\x00b"}), 400, "NUL"},
		{"NUL in caption", "POST", "/users/" + u.ID + "/photos", js(map[string]string{"url": "u", "caption": "x\x00"}), 400, "NUL"},
		{"NUL in url", "POST", "/users/" + u.ID + "/photos", js(map[string]string{"url": "\x00"}), 400, "NUL"},
		{"101 characters", "POST", "/users", js(map[string]string{"name": strings.Repeat("é", 101)}), 400, "101 characters"},
		{"long caption", "POST", "/users/" + u.ID + "/photos", js(map[string]string{"url": "u", "caption": strings.Repeat("x", 2201)}), 400, "caption"},
		{"long url", "POST", "/users/" + u.ID + "/photos", js(map[string]string{"url": strings.Repeat("x", 2049)}), 400, "url"},
		// Numbers outside what a photo can be or the column can hold.
		{"width past int4", "POST", "/users/" + u.ID + "/photos", []byte(`{"url": "u", "width": 3000000000}`), 400, "width 3000000000"},
		{"negative width", "POST", "/users/" + u.ID + "/photos", []byte(`{"url": "u", "width": -5}`), 400, "width -5"},
		{"negative height", "POST", "/users/" + u.ID + "/photos", []byte(`{"url": "u", "height": -1}`), 400, "height -1"},
		{"width past int64", "POST", "/users/" + u.ID + "/photos", []byte(`{"url": "u", "width": 1e20}`), 400, "bad JSON"},
		{"fractional width", "POST", "/users/" + u.ID + "/photos", []byte(`{"url": "u", "width": 1.5}`), 400, "bad JSON"},
		// Bodies that are not one JSON object of the right shape.
		{"empty body", "POST", "/users", nil, 400, "bad JSON"},
		{"not JSON", "POST", "/users", []byte("name=x"), 400, "bad JSON"},
		{"array", "POST", "/users", []byte(`[{"name": "x"}]`), 400, "bad JSON"},
		{"two objects", "POST", "/users", []byte(`{"name": "x"} {"name": "y"}`), 400, "more than one JSON value"},
		{"trailing garbage", "POST", "/users", []byte(`{"name": "x"} ]`), 400, "bad JSON"},
		{"unknown field", "POST", "/users", []byte(`{"name": "x", "admin": true}`), 400, "unknown field"},
		{"name not a string", "POST", "/users", []byte(`{"name": 5}`), 400, "bad JSON"},
		{"body too large", "POST", "/users", js(map[string]string{"name": strings.Repeat("x", api.MaxBody)}), 413, "over 65536 bytes"},
		// Well-formed requests for rows that do not exist.
		{"unknown user", "GET", "/users/" + fmt.Sprint(mustCompose(t, f, 3)), nil, 404, "not found"},
		{"like by unknown user", "POST", "/photos/" + p.ID + "/likes", js(map[string]string{"user_id": fmt.Sprint(mustCompose(t, f, 3))}), 404, "not found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := f.raw(t, c.method, c.path, c.body)
			if code != c.want {
				t.Fatalf("%s %s: %d %s, want %d", c.method, c.path, code, body, c.want)
			}
			checkErrorBody(t, c.name, code, body)
			if !strings.Contains(string(body), c.errorHas) {
				t.Fatalf("error %s lacks %q", body, c.errorHas)
			}
		})
	}

	// The limit counts characters: 60 × "é" is 120 bytes and a good name.
	var e userJSON
	f.mustCall(t, http.StatusCreated, "POST", "/users", map[string]string{"name": strings.Repeat("é", 60)}, &e)
	if e.Name != strings.Repeat("é", 60) {
		t.Fatalf("stored name %q", e.Name)
	}
	f.mustCall(t, http.StatusCreated, "POST", "/users", map[string]string{"name": strings.Repeat("é", 100)}, nil)
	var big photoJSON
	f.mustCall(t, http.StatusCreated, "POST", "/users/"+u.ID+"/photos", map[string]any{"url": "u", "width": 100000, "height": 0}, &big)
	// Nothing refused was stored: the owner has exactly the two good photos.
	var pg pageJSON[photoJSON]
	f.mustCall(t, http.StatusOK, "GET", "/users/"+u.ID+"/photos", nil, &pg)
	if len(pg.Items) != 2 {
		t.Fatalf("owner has %d photos, want 2 (refused uploads must store nothing)", len(pg.Items))
	}
}

// mustCompose returns a well-formed ID in a shard that exists, for a row
// that does not.
func mustCompose(t testing.TB, f *fixture, shard int) int64 {
	t.Helper()
	id, err := f.layout.Compose(f.layout.EpochMs+1000, shard, 1)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// fuzzRoutes are the API's routes as (method, path template); {id} is
// replaced by the fuzzed path value.
var fuzzRoutes = []struct{ method, path string }{
	{"POST", "/users"},
	{"GET", "/users/{id}"},
	{"POST", "/users/{id}/photos"},
	{"GET", "/users/{id}/photos"},
	{"POST", "/users/{id}/follows"},
	{"GET", "/users/{id}/following"},
	{"GET", "/users/{id}/feed"},
	{"GET", "/photos/{id}"},
	{"POST", "/photos/{id}/likes"},
	{"GET", "/photos/{id}/likes"},
	{"GET", "/admin/api/users/{id}/photos"},
}

// FuzzAPI sends arbitrary path IDs, query strings and bodies to every
// route of a real service on Postgres: no answer may be a 5xx, and every
// 4xx is a JSON error.
func FuzzAPI(f *testing.F) {
	fx := newFixtureShards(f, badInputShards)
	var u userJSON
	code, body := fx.raw(f, "POST", "/users", []byte(`{"name": "fuzz"}`))
	if code != http.StatusCreated || json.Unmarshal(body, &u) != nil {
		f.Fatalf("create the fuzz user: %d %s", code, body)
	}
	user := u.ID
	for i := range fuzzRoutes {
		f.Add(uint8(i), "1", "", `{"name": "x"}`)
		f.Add(uint8(i), "USER", "limit=5&before=USER", `{"url": "u", "caption": "c", "width": 5, "height": 7}`)
		f.Add(uint8(i), "USER", "", `{"user_id": "USER"}`)
		f.Add(uint8(i), "USER", "", `{"followee_id": "USER"}`)
		f.Add(uint8(i), "4611686018427387904", "limit=0", `{"name": "a\u0000"}`)
		f.Add(uint8(i), "-1", "before=x", `{"url": "u", "width": 3000000000}`)
	}
	f.Fuzz(func(t *testing.T, route uint8, id, query, body string) {
		r := fuzzRoutes[int(route)%len(fuzzRoutes)]
		// "USER" stands for a user that exists, so that deep paths are reached.
		id = strings.ReplaceAll(id, "USER", user)
		body = strings.ReplaceAll(body, "USER", user)
		query = strings.ReplaceAll(query, "USER", user)
		path := strings.ReplaceAll(r.path, "{id}", urlPathEscape(id))
		if query != "" {
			path += "?" + urlQueryClean(query)
		}
		code, answer := fx.serve(t, r.method, path, []byte(body))
		if code >= 500 {
			t.Fatalf("%s %s %q: %d %s", r.method, path, body, code, answer)
		}
		// The mux's own "404 page not found" (a path that names no route,
		// like an ID with a slash) is plain text; every answer of ours is JSON.
		if code >= 400 && !strings.HasPrefix(string(answer), "404 page not found") && code != http.StatusMethodNotAllowed {
			checkErrorBody(t, r.method+" "+path, code, answer)
		}
	})
}

// serve runs one request through the service's handler in-process, with a
// deadline: a request that does not finish in time fails the test (a hang
// is a bug too) instead of stalling the fuzzer.
func (f *fixture) serve(t testing.TB, method, path string, body []byte) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, method, path, bytes.NewReader(body))
	req.RemoteAddr = "127.0.0.1:40000" // this host: the admin endpoints answer it
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.app.Server.Handler.ServeHTTP(rec, req)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s %s %q: no answer in 30 s", method, path, body)
	}
	return rec.Code, rec.Body.Bytes()
}

// urlPathEscape makes a fuzzed ID one path segment.
func urlPathEscape(s string) string { return url.PathEscape(s) }

// urlQueryClean percent-encodes the bytes a URL cannot carry raw, leaving
// the query's own structure (&, =, %) to the server's parser.
func urlQueryClean(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '#' {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
