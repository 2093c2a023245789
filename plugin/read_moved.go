package plugin

import (
	"fmt"

	"gorm.io/gorm"

	"github.com/shardkit/shardkit/internal/memrows"
	"github.com/shardkit/shardkit/router"
)

// readAcrossFresh is readAcross, run once more on a fresh map when a
// server refused the read because the map it was routed with is older
// than a move of one of its shards. A move's cutover revokes the
// application role's privileges on the copy it leaves (42501), and its
// completion drops that copy (42P01): a read of several shards routed
// before either reaches the old home and is refused there, as a one-shard
// read is (refusedRead, rerouteRead).
//
// The refusal is the move's only when the reloaded map shows one of the
// read's shards on another server or fenced; any other refusal (a grant
// the application lacks, a table nobody made) stands as it is. Outside a
// transaction the read waits, at most FenceWait per shard, until each such
// shard has a home that is not fenced, and runs again, once, on the map
// it finds; inside one it fails with ErrShardMoved (retriable: the
// transaction cannot have read the shard's new home).
func (p *Plugin) readAcrossFresh(db *gorm.DB, d *decision, out **memrows.Rows) {
	p.readAcross(db, d, out)
	err := db.Error
	if err == nil || !isPrivilegeError(err) && !router.IsUndefinedTable(err) {
		return
	}
	stmt := db.Statement
	snap, rerr := p.router.Reload(stmt.Context)
	if rerr != nil {
		return
	}
	moved := -1 // the index in d of the first shard whose home the reload changed
	var shards []int
	for i, s := range d.shards {
		pl, perr := snap.Placement(s)
		if perr != nil {
			return
		}
		if was := d.placement(i); pl.Server != was.Server || pl.State == router.StateFenced || was.State == router.StateFenced {
			if moved < 0 {
				moved = i
			}
			shards = append(shards, s)
		}
	}
	if moved < 0 {
		return
	}
	movedErr := &ShardError{Shard: d.shards[moved], Server: d.placement(moved).Server, Table: d.m.table,
		Err: fmt.Errorf("%w: %w", ErrShardMoved, err)}
	if d.tx != nil {
		db.Error = movedErr
		return
	}
	for _, s := range shards {
		if snap, _, err = p.awaitMove(stmt.Context, s, ""); err != nil {
			db.Error = movedErr
			return
		}
	}
	fresh := *d
	fresh.snap = snap
	if len(d.shards) == d.snap.Shards && d.snap.Shards == snap.Shards {
		every := p.everyShard(snap)
		fresh.shards, fresh.places = every.shards, every.places
	} else {
		fresh.places = nil
		if err := p.place(stmt.Context, &fresh); err != nil {
			db.Error = movedErr
			return
		}
	}
	db.Error = nil
	stmt.SQL.Reset()
	stmt.Vars = nil
	p.readAcross(db, &fresh, out)
}
