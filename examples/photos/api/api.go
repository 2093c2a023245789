package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/shardkit/shardkit/examples/photos/store"
	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/plugin"
)

// API serves the photo service's JSON routes. IDs are JSON strings: they
// are 63-bit numbers, beyond what JavaScript numbers hold exactly.
type API struct {
	st  *store.Store
	log *slog.Logger
}

// NewAPI returns the JSON API over a store.
func NewAPI(st *store.Store, log *slog.Logger) *API { return &API{st: st, log: log} }

// Register adds the routes to mux.
func (a *API) Register(mux *http.ServeMux) {
	mux.HandleFunc("POST /users", a.createUser)
	mux.HandleFunc("GET /users/{id}", a.getUser)
	mux.HandleFunc("GET /usernames/{username}", a.getUserByUsername)
	mux.HandleFunc("POST /users/{id}/photos", a.createPhoto)
	mux.HandleFunc("GET /users/{id}/photos", a.listPhotos)
	mux.HandleFunc("POST /users/{id}/follows", a.follow)
	mux.HandleFunc("GET /users/{id}/following", a.following)
	mux.HandleFunc("DELETE /users/{id}/follows/{followee}", a.unfollow)
	mux.HandleFunc("GET /users/{id}/followers", a.followers)
	mux.HandleFunc("GET /users/{id}/feed", a.feed)
	mux.HandleFunc("GET /photos/{id}", a.getPhoto)
	mux.HandleFunc("POST /photos/{id}/likes", a.like)
	mux.HandleFunc("GET /photos/{id}/likes", a.likes)
}

// Page is a page of a list: the items and the cursor of the next page
// ("" when this page is the last).
type Page[T any] struct {
	Items      []T    `json:"items"`
	NextBefore string `json:"next_before,omitempty"`
	// MissingShards lists the logical shards a feed could not read
	// because their server was unavailable: the page holds the rest.
	MissingShards []int `json:"missing_shards,omitempty"`
}

func (a *API) createUser(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Name     string `json:"name"`
		Username string `json:"username"`
	}
	if !decode(w, r, &in) {
		return
	}
	u, err := a.st.CreateUser(r.Context(), in.Name, in.Username)
	a.reply(w, r, http.StatusCreated, u, err)
}

func (a *API) getUserByUsername(w http.ResponseWriter, r *http.Request) {
	u, err := a.st.GetUserByUsername(r.Context(), r.PathValue("username"))
	a.reply(w, r, http.StatusOK, u, err)
}

func (a *API) getUser(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	u, err := a.st.GetUser(r.Context(), id)
	a.reply(w, r, http.StatusOK, u, err)
}

func (a *API) createPhoto(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	var in struct {
		Caption string `json:"caption"`
		URL     string `json:"url"`
		Width   int    `json:"width"`
		Height  int    `json:"height"`
	}
	if !decode(w, r, &in) {
		return
	}
	p, err := a.st.CreatePhoto(r.Context(), store.Photo{UserID: id, Caption: in.Caption, URL: in.URL, Width: in.Width, Height: in.Height})
	a.reply(w, r, http.StatusCreated, p, err)
}

func (a *API) listPhotos(w http.ResponseWriter, r *http.Request) {
	id, before, limit, ok := listArgs(w, r)
	if !ok {
		return
	}
	ps, err := a.st.ListPhotos(r.Context(), id, before, limit)
	a.reply(w, r, http.StatusOK, page(ps, limit, func(p store.Photo) int64 { return p.ID }), err)
}

func (a *API) getPhoto(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	p, err := a.st.GetPhoto(r.Context(), id)
	a.reply(w, r, http.StatusOK, p, err)
}

func (a *API) like(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	var in struct {
		UserID int64 `json:"user_id,string"`
	}
	if !decode(w, r, &in) {
		return
	}
	l, err := a.st.Like(r.Context(), id, in.UserID)
	a.reply(w, r, http.StatusCreated, l, err)
}

func (a *API) likes(w http.ResponseWriter, r *http.Request) {
	id, before, limit, ok := listArgs(w, r)
	if !ok {
		return
	}
	ls, err := a.st.Likes(r.Context(), id, before, limit)
	a.reply(w, r, http.StatusOK, page(ls, limit, func(l store.Like) int64 { return l.ID }), err)
}

func (a *API) follow(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	var in struct {
		FolloweeID int64 `json:"followee_id,string"`
	}
	if !decode(w, r, &in) {
		return
	}
	f, err := a.st.Follow(r.Context(), id, in.FolloweeID)
	a.reply(w, r, http.StatusCreated, f, err)
}

func (a *API) unfollow(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	followee, err := strconv.ParseInt(r.PathValue("followee"), 10, 64)
	if err != nil || followee <= 0 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "photos: the followee id in the path must be a positive integer"})
		return
	}
	err = a.st.Unfollow(r.Context(), id, followee)
	a.reply(w, r, http.StatusOK, map[string]string{}, err)
}

func (a *API) following(w http.ResponseWriter, r *http.Request) {
	a.idList(w, r, a.st.Following)
}

func (a *API) followers(w http.ResponseWriter, r *http.Request) {
	a.idList(w, r, a.st.Followers)
}

// idList answers with the user IDs list gives for the path's user.
func (a *API) idList(w http.ResponseWriter, r *http.Request, list func(context.Context, int64) ([]int64, error)) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	ids, err := list(r.Context(), id)
	out := make([]string, len(ids))
	for i, v := range ids {
		out[i] = strconv.FormatInt(v, 10)
	}
	a.reply(w, r, http.StatusOK, map[string][]string{"items": out}, err)
}

func (a *API) feed(w http.ResponseWriter, r *http.Request) {
	id, before, limit, ok := listArgs(w, r)
	if !ok {
		return
	}
	ps, missing, err := a.st.Feed(r.Context(), id, before, limit)
	pg := page(ps, limit, func(p store.Photo) int64 { return p.ID })
	pg.MissingShards = missing
	a.reply(w, r, http.StatusOK, pg, err)
}

func page[T any](items []T, limit int, id func(T) int64) Page[T] {
	p := Page[T]{Items: items}
	if n := len(items); n > 0 && n >= clamp(limit) {
		p.NextBefore = strconv.FormatInt(id(items[n-1]), 10)
	}
	return p
}

func clamp(limit int) int {
	if limit <= 0 {
		return store.DefaultLimit
	}
	return min(limit, store.MaxLimit)
}

// reply writes v as JSON with status, or the error with its HTTP status.
func (a *API) reply(w http.ResponseWriter, r *http.Request, status int, v any, err error) {
	if err != nil {
		code := statusOf(err)
		if r.Context().Err() != nil {
			return // the client went away: nobody to answer, nothing to report
		}
		if code == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		if code >= 500 {
			a.log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		}
		writeJSON(w, code, map[string]string{"error": errorText(err)})
		return
	}
	writeJSON(w, status, v)
}

// internalError is what a client learns of a failure inside the service;
// the service's log has the error itself.
const internalError = "photos: internal error; the service's log has the details"

// unavailableError is what a client learns of a failure it may retry.
const unavailableError = "photos: temporarily unavailable (a shard moving or a server down); retry after a second"

// errorText is the error as a client sees it: the message of a request
// error (4xx), which says what to change; for the others a fixed text, so
// no server name, DSN part, SQL or stack of the service reaches a client.
func errorText(err error) string {
	switch code := statusOf(err); {
	case code == http.StatusServiceUnavailable:
		var se *plugin.ServerError
		if errors.As(err, &se) { // the server's name, not its address or the driver's words
			return fmt.Sprintf("photos: server %s unavailable; retry after a second", se.Server)
		}
		return unavailableError
	case code >= 500:
		return internalError
	}
	return err.Error()
}

// statusOf maps store and shardkit errors to HTTP statuses. A fenced shard,
// a shard moved under a transaction the store ran again as often as it
// runs one, or an unavailable server is 503 with Retry-After: the client
// may retry.
func statusOf(err error) int {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, store.ErrConflict):
		return http.StatusConflict
	case errors.Is(err, store.ErrInvalid), errors.Is(err, plugin.ErrMissingShardKey), errors.Is(err, idgen.ErrInvalidID):
		return http.StatusBadRequest
	case plugin.Retryable(err): // fenced or moved past the store's own retries, or a server down
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// MaxBody bounds a request body; a larger one is answered 413.
const MaxBody = 1 << 16

// decode reads the request body as one JSON object into v. A body that is
// not exactly one JSON value of v's shape is answered 400, one over
// MaxBody 413.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("more than one JSON value")
			if terr != nil && !errors.Is(terr, io.EOF) {
				err = terr
			}
		}
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": fmt.Sprintf("photos: the body is over %d bytes", MaxBody)})
			return false
		}
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "photos: bad JSON body: " + err.Error()})
		return false
	}
	return true
}

func pathID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "photos: the id in the path must be a positive integer"})
		return 0, false
	}
	return id, true
}

func listArgs(w http.ResponseWriter, r *http.Request) (id, before int64, limit int, ok bool) {
	if id, ok = pathID(w, r); !ok {
		return
	}
	q := r.URL.Query()
	var err error
	if s := q.Get("before"); s != "" {
		if before, err = strconv.ParseInt(s, 10, 64); err != nil || before <= 0 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "photos: before must be a positive ID"})
			return 0, 0, 0, false
		}
	}
	if s := q.Get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil || limit <= 0 || limit > store.MaxLimit {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "photos: limit must be 1 to 100"})
			return 0, 0, 0, false
		}
	}
	return id, before, limit, true
}
