// Package app assembles the photo service with google/wire: Initialize
// (generated into wire_gen.go from wire.go) builds the catalog connection,
// the router, the ID generator, GORM with the shardkit plugin, the store,
// the metrics and the HTTP server.
//
//	cfg, err := app.ParseConfig("photos", os.Args[1:], os.Getenv)
//	a, cleanup, err := app.Initialize(ctx, cfg, slog.Default())
//	defer cleanup()
//	err = a.Serve(ctx) // until ctx ends, then a graceful shutdown
package app

// wire writes its own go:generate line into wire_gen.go, one that runs wire
// from this module with -mod=mod (it would add wire's dependencies to
// go.mod); the line below regenerates with a pinned wire and drops it.
//go:generate sh -c "go run github.com/google/wire/cmd/wire@v0.7.0 gen . && grep -v '^//go:generate' wire_gen.go > wire_gen.go.tmp && mv wire_gen.go.tmp wire_gen.go"
