package api

import (
	"context"
	_ "embed"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/examples/photos/store"
	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/rebalance"
	"github.com/shardkit/shardkit/router"
)

//go:embed admin.html
var adminHTML []byte

// Admin serves the admin page (/admin) and the JSON it draws from
// (/admin/api/...): the shard map, rows per server, moves, and a user's
// photos with their IDs decoded.
type Admin struct {
	rt     *router.Router
	cat    *catalog.Catalog
	stats  *store.Stats
	st     *store.Store
	log    *slog.Logger
	token  AdminToken
	counts *rowsCache
}

// NewAdmin returns the admin handlers, served to loopback clients and to
// those presenting token.
func NewAdmin(rt *router.Router, cat *catalog.Catalog, stats *store.Stats, st *store.Store, log *slog.Logger, token AdminToken) *Admin {
	return &Admin{rt: rt, cat: cat, stats: stats, st: st, log: log, token: token, counts: newRowsCache()}
}

// Register adds the admin routes to mux.
func (a *Admin) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /admin", a.token.guard(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(adminHTML)
	}))
	mux.HandleFunc("GET /admin/api/map", a.token.guard(a.shardMap))
	mux.HandleFunc("GET /admin/api/rows", a.token.guard(a.rows))
	mux.HandleFunc("GET /admin/api/moves", a.token.guard(a.moves))
	mux.HandleFunc("GET /admin/api/users/{id}/photos", a.token.guard(a.userPhotos))
}

// MapView is the shard map as the admin page draws it: servers, and per
// shard (by number) the index of its server and its state.
type MapView struct {
	Version int64    `json:"version"`
	Shards  int      `json:"shards"`
	Servers []string `json:"servers"`
	States  []string `json:"server_states"`
	Server  []int    `json:"server"` // per shard: index into Servers
	State   []string `json:"state"`  // per shard: active | moving | fenced
}

// View returns the map view of a snapshot.
func View(snap *router.Snapshot) MapView {
	v := MapView{Version: snap.Version, Shards: snap.Shards}
	idx := map[string]int{}
	for i, s := range snap.Servers() {
		idx[s.Name] = i
		v.Servers = append(v.Servers, s.Name)
		v.States = append(v.States, s.State)
	}
	for _, p := range snap.Placements() {
		v.Server = append(v.Server, idx[p.Server])
		v.State = append(v.State, string(p.State))
	}
	return v
}

func (a *Admin) shardMap(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, View(a.rt.Snapshot()))
}

// rowsTimeout bounds an exact row count: one count per table of every
// shard schema (8000 with 2000 shards), which a busy server may take tens
// of seconds over.
const rowsTimeout = time.Minute

// rows answers the row count, counted at most once a rowsEvery and one
// count at a time, however many clients ask.
func (a *Admin) rows(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), rowsTimeout)
	defer cancel()
	snap := a.rt.Snapshot()
	if rows, ok := a.counts.fresh(snap.Version); ok {
		writeJSON(w, http.StatusOK, rows)
		return
	}
	select {
	case a.counts.running <- struct{}{}:
	case <-ctx.Done():
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "photos: rows are being counted; try again"})
		return
	}
	defer func() { <-a.counts.running }()
	if rows, ok := a.counts.fresh(snap.Version); ok { // counted while this request waited
		writeJSON(w, http.StatusOK, rows)
		return
	}
	rows, err := a.stats.Rows(ctx, snap)
	if err == nil {
		a.counts.keep(snap.Version, rows)
	}
	if err != nil {
		if r.Context().Err() != nil {
			return // the client went away
		}
		a.log.ErrorContext(ctx, "count rows", "err", err)
		code, msg := http.StatusInternalServerError, internalError
		if errors.Is(err, context.DeadlineExceeded) {
			code, msg = http.StatusServiceUnavailable, "photos: counting rows took too long; try again" // busy servers
		}
		writeJSON(w, code, map[string]string{"error": msg})
		return
	}
	writeJSON(w, http.StatusOK, rows)
}

// MoveView is one move for the admin page.
type MoveView struct {
	ID       int64   `json:"id,string"`
	Shard    int     `json:"shard"`
	Source   string  `json:"source"`
	Target   string  `json:"target"`
	State    string  `json:"state"`
	Step     string  `json:"step"`
	Doing    string  `json:"doing"`
	Error    string  `json:"error"`
	FencedMs float64 `json:"fenced_ms"`
	// Cutover is the fenced window step by step (absent before a cutover).
	Cutover *rebalance.CutoverTimes `json:"cutover,omitempty"`
	Started string                  `json:"started"`
}

func (a *Admin) moves(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	ms, err := rebalance.RecentMoves(ctx, a.cat, 50)
	if isInsufficientPrivilege(err) {
		// The move journal is the operator's: an application role reads
		// the map, not the journal.
		writeJSON(w, http.StatusForbidden, map[string]string{"error": movesOperatorOnly})
		return
	}
	if err != nil {
		a.log.ErrorContext(ctx, "recent moves", "err", err)
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": internalError})
		return
	}
	out := make([]MoveView, 0, len(ms))
	for _, m := range ms {
		var ct *rebalance.CutoverTimes
		if m.Cutover != (rebalance.CutoverTimes{}) {
			ct = &m.Cutover
		}
		out = append(out, MoveView{
			Cutover: ct, ID: m.ID, Shard: m.Shard, Source: m.Source, Target: m.Target, State: string(m.State),
			Step: string(m.Step), Doing: string(m.Doing), Error: m.Error,
			FencedMs: float64(m.FencedFor) / float64(time.Millisecond), Started: m.Started.UTC().Format(time.RFC3339),
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// movesOperatorOnly answers /admin/api/moves when the service's role may
// not read the move journal, as an application role may not.
const movesOperatorOnly = "photos: the move journal is the operator's; the service's role cannot read it: run `shardctl move status` (the shard map above shows moving and fenced shards)"

// isInsufficientPrivilege reports Postgres's 42501.
func isInsufficientPrivilege(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42501"
}

// DecodedPhoto is a photo with its ID split into its parts, and where its
// shard lives now.
type DecodedPhoto struct {
	store.Photo
	Parts  idgen.Parts `json:"parts"`
	Server string      `json:"server"`
	Schema string      `json:"schema"`
}

func (a *Admin) userPhotos(w http.ResponseWriter, r *http.Request) {
	id, before, limit, ok := listArgs(w, r)
	if !ok {
		return
	}
	ps, err := a.st.ListPhotos(r.Context(), id, before, limit)
	if err != nil {
		writeJSON(w, statusOf(err), map[string]string{"error": a.clientError(r, err)})
		return
	}
	snap := a.rt.Snapshot()
	out := make([]DecodedPhoto, 0, len(ps))
	for _, p := range ps {
		parts, err := snap.Layout.Decode(p.ID)
		if err != nil {
			a.log.ErrorContext(r.Context(), "decode an ID", "id", p.ID, "err", err)
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": internalError})
			return
		}
		d := DecodedPhoto{Photo: p, Parts: parts}
		if pl, err := snap.Placement(parts.Shard); err == nil {
			d.Server, d.Schema = pl.Server, pl.Schema
		}
		out = append(out, d)
	}
	writeJSON(w, http.StatusOK, map[string]any{"user_id": strconv.FormatInt(id, 10), "items": out})
}

func (a *Admin) clientError(r *http.Request, err error) string {
	if statusOf(err) >= 500 {
		a.log.ErrorContext(r.Context(), "admin request failed", "path", r.URL.Path, "err", err)
	}
	return errorText(err)
}
