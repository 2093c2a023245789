package plugin

import (
	"context"
	"database/sql/driver"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
)

// A one-shard statement on a connection of the plugin's own
// (unnamedConn) is bounded by its connection, not by a context: a
// context that can end costs every statement a timer, a watch by pgx,
// and a goroutine of database/sql that waits on it until the rows are
// closed, whose wake-ups cost a one-shard read more client CPU than the
// plugin's routing. The bound rides on the context as a value
// (stmtOpts), which ends nothing, and the connection puts it on its
// socket as a deadline for the statement's run, from its first byte
// sent to its rows closed. A server that gives no answer within it
// leaves the connection broken, as a context's end would; the server's
// own statement_timeout, shorter, stops the statement there.

// stmtOpts is what a one-shard statement's context carries to its
// connection.
type stmtOpts struct {
	prepare bool          // run it prepared (shardStmts)
	write   bool          // prepared among the connection's writes, not its reads
	bound   time.Duration // the bound on its run; 0: none here
}

// stmtOptsKey is stmtOpts' key in a context.
type stmtOptsKey struct{}

func optsOf(ctx context.Context) stmtOpts {
	o, _ := ctx.Value(stmtOptsKey{}).(stmtOpts)
	return o
}

// deadline puts a statement's bound on the connection's socket and
// returns the function that takes it off, and the instant it passes
// (zero without a bound).
func (c unnamedConn) deadline(bound time.Duration) (net.Conn, time.Time) {
	if bound <= 0 {
		return nil, time.Time{}
	}
	nc := c.Conn().PgConn().Conn()
	at := time.Now().Add(bound)
	if nc.SetDeadline(at) != nil {
		return nil, time.Time{}
	}
	return nc, at
}

// passed marks err as the statement bound's when the bound has passed.
func passed(err error, at time.Time) error {
	if err == nil || at.IsZero() || time.Now().Before(at) {
		return err
	}
	return fmt.Errorf("%w: %w", errBoundPassed, err)
}

// boundRows are the rows of a bounded statement: closing them takes the
// bound off the socket.
type boundRows struct {
	*stdlib.Rows
	nc net.Conn
	at time.Time
}

// Next is part of driver.Rows.
func (r *boundRows) Next(dest []driver.Value) error {
	err := r.Rows.Next(dest)
	if err == io.EOF {
		return err
	}
	return passed(err, r.at)
}

// Close is part of driver.Rows.
func (r *boundRows) Close() error {
	err := r.Rows.Close()
	_ = r.nc.SetDeadline(time.Time{})
	return passed(err, r.at)
}
