package api

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/wire"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/examples/photos/metrics"
	"github.com/shardkit/shardkit/router"
)

// Addr is the address the HTTP server listens on, like ":8080".
type Addr string

// ProviderSet provides the JSON API, the admin page, the whole handler and
// the HTTP server.
var ProviderSet = wire.NewSet(NewAPI, NewAdmin, NewHandler, NewServer)

// NewHandler routes the JSON API, the admin page, /healthz and /metrics,
// with request metrics around all of them.
func NewHandler(a *API, adm *Admin, m *metrics.Metrics, rt *router.Router, cat *catalog.Catalog, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	a.Register(mux)
	adm.Register(mux)
	mux.Handle("GET /metrics", m.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := cat.Ping(ctx); err != nil {
			// The error names the catalog's host and user: for the log only.
			log.WarnContext(ctx, "healthz: catalog unreachable", "err", err)
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "catalog unreachable"})
			return
		}
		snap := rt.Snapshot()
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "map_version": snap.Version,
			"shards": snap.Shards, "servers": len(snap.Servers())})
	})
	return m.Middleware(mux)
}

// NewServer returns the HTTP server (not yet listening). Every timeout is
// set: a request's headers and body are read within seconds (bodies are
// at most MaxBody), a reply is written within the longest request (a row
// count, rowsTimeout), and an idle connection is closed.
func NewServer(addr Addr, h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Addr:              string(addr),
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      rowsTimeout + 30*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    32 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}
