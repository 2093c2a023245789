package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

// photoIn has the shape of the upload route's body.
type photoIn struct {
	Caption string `json:"caption"`
	URL     string `json:"url"`
	Width   int    `json:"width"`
	Height  int    `json:"height"`
}

// FuzzDecode feeds arbitrary bodies to the request decoder, without a
// database: it never panics; a refusal is 400 (or 413 over MaxBody) with a
// JSON error; an accepted body is exactly one JSON object of the route's
// shape, which decodes to the same value on its own.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"url": "u", "caption": "c", "width": 5, "height": 7}`, `{"url": "u"} {}`, `{"url": "u"} x`, `[]`, ``, `null`,
		`{"url": "u", "width": 3000000000}`, `{"url": "u", "width": 1e20}`, `{"url": "\u0000"}`, `{"admin": true}`,
		`{"url": "u"}   ` + "\n", `{"url": "u", "url": "v"}`, `"` + strings.Repeat("x", MaxBody) + `"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("POST", "/users/1/photos", bytes.NewReader(body))
		var got photoIn
		ok := decode(rec, req, &got)
		if !ok {
			if rec.Code != http.StatusBadRequest && rec.Code != http.StatusRequestEntityTooLarge {
				t.Fatalf("%q refused with %d", body, rec.Code)
			}
			if rec.Code == http.StatusRequestEntityTooLarge && len(body) <= MaxBody {
				t.Fatalf("%d bytes refused as too large", len(body))
			}
			var e struct {
				Error string `json:"error"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" {
				t.Fatalf("%q refused with body %q, want a JSON error", body, rec.Body.Bytes())
			}
			return
		}
		if rec.Code != http.StatusOK || rec.Body.Len() != 0 {
			t.Fatalf("%q accepted but answered %d %q", body, rec.Code, rec.Body.Bytes())
		}
		if len(body) > MaxBody {
			t.Fatalf("%d bytes accepted, over MaxBody", len(body))
		}
		trimmed := bytes.TrimSpace(body)
		if !json.Valid(trimmed) || trimmed[0] != '{' && string(trimmed) != "null" {
			t.Fatalf("%q accepted, but it is not one JSON object", body)
		}
		// Accepted means the same value as a strict decode of the body alone.
		var again photoIn
		dec := json.NewDecoder(bytes.NewReader(trimmed))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&again); err != nil || !reflect.DeepEqual(got, again) {
			t.Fatalf("%q decoded to %+v, a strict decode gives %+v (%v)", body, got, again, err)
		}
	})
}
