// Package readexec is the execute stage of shardkit's reads across
// shards: it runs statements whose text and arguments were rendered
// before it starts, one goroutine per server, and reads their rows into
// values it owns. It does not import GORM, so that nothing it runs can
// reach a *gorm.DB, a *gorm.Statement or a clause, which the caller's
// goroutine owns (GORM's builders mutate what they build from).
//
// The plugin renders each statement into a Stmt, hands the stage a Config
// (the statement bound, the pgx connection and plan generation under a
// pool's connection, how its typed errors wrap a statement's), and takes
// each answer, on its own goroutine, as it arrives:
//
//	x := readexec.New(&cfg, ctx, stmts, nil)
//	x.Run(false, func(k int) bool {
//		a := x.Answer(k) // statement k's rows, or its error
//		return a.Err == nil
//	})
//
// A server's named statements go to it as one pipeline on one
// connection, each prepared once per connection (pipe.go); a named read
// converts each value as pgx's database/sql driver does (named.go), so
// that what the caller scans is what database/sql would have returned.
// Errors are plain (the driver's, ErrBoundPassed); Config.Err and
// Config.SetupErr are where the plugin types them.
package readexec
