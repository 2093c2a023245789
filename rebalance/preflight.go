package rebalance

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/inventory"
	"github.com/shardkit/shardkit/internal/shardschema"
	"github.com/shardkit/shardkit/migrations"
	"github.com/shardkit/shardkit/router"
)

// Causes of a refusal by preflight, each of Kind ErrPreflight. Each failed
// check is a *checkError wrapping one of them (or ErrNotLogical,
// ErrMoveInProgress, ErrPreparedTransactions); a refused move returns a
// *MoveError of Kind ErrPreflight holding them all (errors.Is finds each).
var (
	// errNoReplicaIdentity reports a table that logical replication cannot
	// update or delete rows of: publishing it would make the source refuse
	// its UPDATEs and DELETEs.
	errNoReplicaIdentity = ofKind(ErrPreflight, errors.New("table has no usable replica identity: add a primary key, or ALTER TABLE … REPLICA IDENTITY FULL (or USING INDEX a unique index), or move offline (MoveOptions.Offline)"))
	// errReplicationCapacity reports a server without enough free
	// replication slots, WAL senders, logical replication workers or
	// worker processes for the move.
	errReplicationCapacity = ofKind(ErrPreflight, errors.New("not enough free replication slots, WAL senders or worker processes for the move: raise the setting named (it needs a restart) or let other moves and subscriptions finish first"))
	// errShardSQLMismatch reports a source whose applied per-shard SQL
	// versions differ from those the target would be created with.
	errShardSQLMismatch = ofKind(ErrPreflight, errors.New("the source's per-shard SQL versions differ from those the target would be created with: apply the pending versions (migrations.Migrate), or give Config.ShardSQL the files the source was made with"))
	// errTargetSchemaExists reports a target that already holds the
	// shard's schema while no move of the shard is unfinished.
	errTargetSchemaExists = ofKind(ErrPreflight, errors.New("the shard's schema already exists on the target though no move of the shard is unfinished: check it holds nothing needed, then drop it on the target (DROP SCHEMA … CASCADE, and its rows in shardkit.shard_migrations)"))
	// errCannotCarry reports an object of the shard's schema, made outside
	// its per-shard SQL, that a move cannot carry to the target.
	errCannotCarry = ofKind(ErrPreflight, errors.New("the shard's schema holds an object a move cannot carry: drop or change it before the move (and make it again on the target after)"))
	// errSchemaDrift reports an object of the per-shard SQL that the
	// source lacks or has in another form.
	errSchemaDrift = ofKind(ErrPreflight, errors.New("the source's schema differs from what its per-shard SQL creates: bring the object in line on the source (or add the change to the per-shard SQL) before the move"))
	// errMigrationRunning reports a move refused because a migration (or
	// a provisioning run) holds the catalog: the target would be created
	// from per-shard SQL the run is changing, and the run would change
	// one copy only. It wraps catalog.ErrProvisionRunning, which the
	// journal returns when the run starts between the preflight and the
	// move.
	errMigrationRunning = ofKind(ErrPreflight, catalog.ErrProvisionRunning)
	// errSequenceNearMax reports a sequence of the shard too close to its
	// MAXVALUE for the cutover to carry it (last value plus up to twice
	// Config.SequenceMargin, twice: a move and its rollback).
	errSequenceNearMax = ofKind(ErrPreflight, errors.New("a sequence of the shard is too close to its MAXVALUE for the cutover to carry it past its last value: raise its MAXVALUE (ALTER SEQUENCE … AS bigint MAXVALUE …) or lower Config.SequenceMargin before the move"))
	// errNoSyncStandby reports a server that names synchronous standbys
	// while none is connected: every commit there waits for one, the
	// move's steps and its subscription's (synchronous_commit = on)
	// included, so the move would stop at its first commit there until
	// its step timeout.
	errNoSyncStandby = ofKind(ErrPreflight, errors.New("the server waits for a synchronous standby (synchronous_standby_names) and none is connected: every commit there waits, the move's too; start the standby (or change synchronous_standby_names), then move"))
)

// checkError is one failed preflight check: what, where, and why.
type checkError struct {
	Check  string // the check's name, as in Check.Name
	Server string // the server it failed on, "" when it is about the shard
	Object string // the object it is about (a table, a setting), "" if none
	Detail string // what was found
	Err    error  // the cause (errors.Is)
}

func (e *checkError) Error() string {
	var b strings.Builder
	if e.Server != "" {
		b.WriteString("server " + e.Server + ": ")
	}
	if e.Object != "" {
		b.WriteString(e.Object + ": ")
	}
	if e.Detail != "" {
		b.WriteString(e.Detail + ": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *checkError) Unwrap() error { return e.Err }

// Check is one preflight check and its outcome.
type Check struct {
	// Name is the check's: "no unfinished move", "no migration running",
	// "wal_level", "replica identity", "replication capacity", "per-shard
	// SQL versions", "target schema absent", "schema objects", "sequence
	// room", "prepared transactions", "synchronous standby connected"
	// (docs/moves.md says what each checks).
	Name   string
	Server string // "" when it is about the shard
	Detail string // what was found
	Err    error  // why it failed (errors.Is finds the Kind); nil when it passed
}

// TableEstimate is a table of the shard's schema on the source, with the
// planner's row estimate and its size with indexes and TOAST.
type TableEstimate struct {
	Name  string
	Rows  int64
	Bytes int64
	Extra bool // made outside the per-shard SQL; carried by the move
}

// Report is what a move would do and what its preflight found.
type Report struct {
	Shard          int
	Schema         string
	Source, Target string
	Offline        bool // an offline move (MoveOptions.Offline)
	Tables         []TableEstimate
	// Carried are the objects made outside the per-shard SQL that the
	// move creates on the target (tables also get their rows).
	Carried []SchemaObject
	Checks  []Check

	appRole string // the catalog's application role, whose privileges the move does not carry
}

// err returns a *MoveError of Kind ErrPreflight with every failed check,
// or nil.
func (r *Report) err() error {
	var failed failedChecks
	for _, c := range r.Checks {
		if c.Err != nil {
			failed = append(failed, c.Err)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return &MoveError{Kind: ErrPreflight, Shard: r.Shard, Source: r.Source, Target: r.Target, Err: failed}
}

func (r *Report) pass(name, server, detail string) {
	r.Checks = append(r.Checks, Check{Name: name, Server: server, Detail: detail})
}

func (r *Report) fail(name, server, object, detail string, sentinel error) {
	r.Checks = append(r.Checks, Check{Name: name, Server: server, Detail: detail,
		Err: &checkError{Check: name, Server: server, Object: object, Detail: detail, Err: sentinel}})
}

// Names of the checks.
const (
	checkNoOpenMove      = "no unfinished move"
	checkNoMigration     = "no migration running"
	checkWalLevel        = "wal_level"
	checkReplicaIdentity = "replica identity"
	checkCapacity        = "replication capacity"
	checkVersions        = "per-shard SQL versions"
	checkTargetSchema    = "target schema absent"
	checkObjects         = "schema objects"
	checkSequences       = "sequence room"
	checkSyncStandby     = "synchronous standby connected"
)

// Preflight checks, changing nothing, whether a move of shard to target
// would succeed, and says what it would do. It returns the report and,
// when a check failed, a *MoveError of Kind ErrPreflight (errors.Is
// finds ErrNotLogical, ErrMoveInProgress and catalog.ErrProvisionRunning
// among its failures). A shard or server that does not exist, a
// target that is not active or one that holds the shard already are
// errors of their own, as from Move, with an empty report.
//
// For an online move it checks wal_level = logical on both servers, a
// usable replica identity on every table of the schema, and free
// replication slots, WAL senders, logical replication workers and worker
// processes on both sides (max_replication_slots, max_wal_senders,
// max_logical_replication_workers, max_worker_processes against what is in
// use). For every move: no unfinished move of the shard, the per-shard SQL
// versions applied on the source equal to those the target is created
// with, no schema of the shard on the target, and every object of the
// schema either made by the per-shard SQL or carried: the carry is
// rehearsed on the target inside a transaction that is rolled back, and
// the result must match the source object for object.
func (mv *Mover) Preflight(ctx context.Context, shard int, target string, opts MoveOptions) (_ Report, err error) {
	defer asMoveErrorTo(&err, shard, target)
	snap, err := mv.cfg.Catalog.Operator().Load(ctx)
	if err != nil {
		return Report{}, err
	}
	p, err := checkTarget(snap, shard, target)
	if err != nil {
		return Report{}, err
	}
	r := Report{Shard: shard, Schema: router.SchemaName(shard), Source: p.Server, Target: target, Offline: opts.Offline}
	if err := mv.preflight(ctx, snap, &r); err != nil {
		return r, err
	}
	return r, r.err()
}

// checkTarget returns the shard's placement, or the error Move returns
// for a target it cannot move to at all.
func checkTarget(snap *router.Snapshot, shard int, target string) (router.Placement, error) {
	p, err := snap.Placement(shard)
	if err != nil {
		return p, fmt.Errorf("shardkit: %w", err)
	}
	if srv, ok := snap.Server(target); !ok {
		return p, fmt.Errorf("shardkit: target %q: %w", target, router.ErrUnknownServer)
	} else if srv.State != "" && srv.State != "active" {
		return p, fmt.Errorf("shardkit: target %q is %s: %w", target, srv.State, errTargetNotActive)
	}
	if p.Server == target {
		return p, fmt.Errorf("shardkit: shard %d on %s: %w", shard, target, ErrSameServer)
	}
	return p, nil
}

func (mv *Mover) preflight(ctx context.Context, snap *router.Snapshot, r *Report) error {
	if busy, err := mv.j.s.ProvisionRunning(ctx); err != nil {
		return err
	} else if busy {
		r.fail(checkNoMigration, "", "", "a migration or provisioning run holds the catalog: wait for it to end, then move", errMigrationRunning)
	} else {
		r.pass(checkNoMigration, "", "none")
	}
	if m, err := mv.j.open(ctx, r.Shard); err == nil {
		// The other checks would only repeat it (the schema on that
		// move's target, its slots).
		r.fail(checkNoOpenMove, "", "", fmt.Sprintf("move %d (%s → %s) is %s at step %s", m.ID, m.Source, m.Target, m.State, m.Step), ErrMoveInProgress)
		return nil
	} else if errors.Is(err, errNoMove) {
		r.pass(checkNoOpenMove, "", "none")
	} else {
		return err
	}
	if err := mv.loadShardSQL(ctx); err != nil {
		return err
	}
	src, srcDSN, err := mv.server(ctx, snap, r.Source)
	if err != nil {
		return err
	}
	tgt, tgtDSN, err := mv.server(ctx, snap, r.Target)
	if err != nil {
		return err
	}
	cfg, err := mv.cfg.Catalog.Config(ctx)
	if err != nil {
		return err
	}
	r.appRole = cfg.AppRole
	for _, s := range []struct {
		name string
		p    *pgxpool.Pool
	}{{r.Source, src}, {r.Target, tgt}} {
		if err := r.checkSyncStandby(ctx, s.name, s.p); err != nil {
			return fmt.Errorf("shardkit: server %s: %w", s.name, err)
		}
	}
	srcInv, err := inventory.Read(ctx, src, r.Schema, barrierName, r.appRole)
	if err != nil {
		return fmt.Errorf("shardkit: server %s: %w", r.Source, err)
	}
	if err := r.readTables(ctx, src); err != nil {
		return fmt.Errorf("shardkit: server %s: %w", r.Source, err)
	}
	if !r.Offline {
		srcLoad, err := readLoad(ctx, src)
		if err != nil {
			return fmt.Errorf("shardkit: server %s: %w", r.Source, err)
		}
		tgtLoad, err := readLoad(ctx, tgt)
		if err != nil {
			return fmt.Errorf("shardkit: server %s: %w", r.Target, err)
		}
		for _, s := range []struct {
			name string
			l    serverLoad
		}{{r.Source, srcLoad}, {r.Target, tgtLoad}} {
			if s.l.walLevel != "logical" {
				r.fail(checkWalLevel, s.name, "wal_level", "is "+s.l.walLevel, ErrNotLogical)
			} else {
				r.pass(checkWalLevel, s.name, "logical")
			}
		}
		if err := r.checkReplicaIdentity(ctx, src); err != nil {
			return fmt.Errorf("shardkit: server %s: %w", r.Source, err)
		}
		r.Checks = append(r.Checks, capacityChecks(r.Source, r.Target, srcLoad, tgtLoad, sameCluster(srcDSN, tgtDSN))...)
	}
	if err := r.checkVersions(ctx, src, mv.cfg.ShardSQL); err != nil {
		return fmt.Errorf("shardkit: server %s: %w", r.Source, err)
	}
	if err := r.checkSequences(ctx, src, mv.cfg.SequenceMargin); err != nil {
		return fmt.Errorf("shardkit: server %s: %w", r.Source, err)
	}
	if err := r.checkPrepared(ctx, src, tgt); err != nil {
		return fmt.Errorf("shardkit: servers %s and %s: %w", r.Source, r.Target, err)
	}
	exists, err := schemaExists(ctx, tgt, r.Schema)
	if err != nil {
		return fmt.Errorf("shardkit: server %s: %w", r.Target, err)
	}
	if exists {
		r.fail(checkTargetSchema, r.Target, "schema "+r.Schema, "exists", errTargetSchemaExists)
		// The carry cannot be rehearsed there; say what it would carry.
		r.objectsWithoutRehearsal(srcInv)
		return nil
	}
	r.pass(checkTargetSchema, r.Target, "absent")
	return mv.rehearse(ctx, snap, tgt, srcInv, r)
}

// sqlSyncStandbys reads whether a commit on the server waits for a
// synchronous standby (synchronous_standby_names set, and the session's
// synchronous_commit above local), and how many of its walsenders may be
// one: streaming as sync or quorum, or unreadable (a role without
// pg_read_all_stats sees each walsender's pid only, and such a walsender
// is given the benefit of the doubt). It counts one standby where
// synchronous_standby_names may ask for more (FIRST 2, ANY 2): the check
// finds the standby that is down, not every short quorum.
const sqlSyncStandbys = `SELECT current_setting('synchronous_standby_names'),
	current_setting('synchronous_standby_names') <> '' AND current_setting('synchronous_commit') NOT IN ('off', 'local'),
	(SELECT count(*) FROM pg_stat_replication WHERE (sync_state IN ('sync', 'quorum') AND state = 'streaming') OR state IS NULL)`

// checkSyncStandby fails a server whose commits would wait for a
// synchronous standby that is not connected (errNoSyncStandby).
func (r *Report) checkSyncStandby(ctx context.Context, server string, p *pgxpool.Pool) error {
	var names string
	var waits bool
	var standbys int64
	if err := p.QueryRow(ctx, sqlSyncStandbys).Scan(&names, &waits, &standbys); err != nil {
		return fmt.Errorf("read the synchronous standbys: %w", err)
	}
	switch {
	case !waits:
		r.pass(checkSyncStandby, server, "commits wait for none")
	case standbys == 0:
		r.fail(checkSyncStandby, server, "synchronous_standby_names", fmt.Sprintf("is %q and no synchronous standby is streaming", names), errNoSyncStandby)
	default:
		r.pass(checkSyncStandby, server, fmt.Sprintf("%d streaming", standbys))
	}
	return nil
}

func (r *Report) failed(name string) bool {
	for _, c := range r.Checks {
		if c.Name == name && c.Err != nil {
			return true
		}
	}
	return false
}

const sqlTableEstimates = `SELECT c.relname::text, greatest(c.reltuples, coalesce(s.n_live_tup, 0), 0)::bigint,
       pg_total_relation_size(c.oid)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')
ORDER BY c.relname`

func (r *Report) readTables(ctx context.Context, src *pgxpool.Pool) error {
	rows, err := src.Query(ctx, sqlTableEstimates, r.Schema)
	if err != nil {
		return fmt.Errorf("estimate the tables of %s: %w", r.Schema, err)
	}
	var t TableEstimate
	_, err = pgx.ForEachRow(rows, []any{&t.Name, &t.Rows, &t.Bytes}, func() error {
		r.Tables = append(r.Tables, t)
		return nil
	})
	if err != nil {
		return fmt.Errorf("estimate the tables of %s: %w", r.Schema, err)
	}
	return nil
}

// sqlReplicaIdentity lists the schema's tables with their replica identity
// and whether it is usable: DEFAULT with a primary key, FULL, or USING
// INDEX with the index present.
const sqlReplicaIdentity = `SELECT c.relname::text, c.relreplident::text,
       CASE c.relreplident
           WHEN 'f' THEN true
           WHEN 'd' THEN EXISTS (SELECT 1 FROM pg_index x WHERE x.indrelid = c.oid AND x.indisprimary)
           WHEN 'i' THEN EXISTS (SELECT 1 FROM pg_index x WHERE x.indrelid = c.oid AND x.indisreplident)
           ELSE false END
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')
ORDER BY c.relname`

func (r *Report) checkReplicaIdentity(ctx context.Context, src *pgxpool.Pool) error {
	rows, err := src.Query(ctx, sqlReplicaIdentity, r.Schema)
	if err != nil {
		return fmt.Errorf("read the replica identities of %s: %w", r.Schema, err)
	}
	var name, ri string
	var ok bool
	n, bad := 0, 0
	_, err = pgx.ForEachRow(rows, []any{&name, &ri, &ok}, func() error {
		n++
		if !ok {
			bad++
			what := map[string]string{"d": "no primary key and REPLICA IDENTITY DEFAULT", "n": "REPLICA IDENTITY NOTHING",
				"i": "REPLICA IDENTITY USING INDEX of an index that is gone"}[ri]
			r.fail(checkReplicaIdentity, r.Source, "table "+ident(r.Schema, name), what, errNoReplicaIdentity)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read the replica identities of %s: %w", r.Schema, err)
	}
	if bad == 0 {
		r.pass(checkReplicaIdentity, r.Source, fmt.Sprintf("all %d tables", n))
	}
	return nil
}

// sqlSequenceRoom lists the schema's ascending sequences with the room
// left above their last value (or, unused, their start).
const sqlSequenceRoom = `SELECT sequencename::text, max_value - coalesce(last_value, start_value)
FROM pg_sequences WHERE schemaname = $1 AND increment_by > 0 ORDER BY sequencename`

// checkSequences fails every sequence that a cutover could not carry: it
// sets the target's to the source's last value plus up to twice margin
// (the carry before the fence), and a rollback does so once more, so each
// needs four times margin of room. (A
// descending sequence is refused as an object the move cannot carry.)
func (r *Report) checkSequences(ctx context.Context, src *pgxpool.Pool, margin int64) error {
	rows, err := src.Query(ctx, sqlSequenceRoom, r.Schema)
	if err != nil {
		return fmt.Errorf("read the sequences of %s: %w", r.Schema, err)
	}
	var name string
	var room int64
	n, bad := 0, 0
	_, err = pgx.ForEachRow(rows, []any{&name, &room}, func() error {
		n++
		if room < 4*margin {
			bad++
			r.fail(checkSequences, r.Source, "sequence "+ident(r.Schema, name),
				fmt.Sprintf("%d below its MAXVALUE, needs %d (four times Config.SequenceMargin)", room, 4*margin), errSequenceNearMax)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read the sequences of %s: %w", r.Schema, err)
	}
	if bad == 0 {
		r.pass(checkSequences, r.Source, fmt.Sprintf("all %d sequences", n))
	}
	return nil
}

// sqlApplied reads the per-shard SQL versions applied to a schema, from
// the server's own record (shardkit.shard_migrations on the shard server).
const sqlAppliedVersions = `SELECT version, part FROM shardkit.shard_migrations WHERE schema_name = $1`

func (r *Report) checkVersions(ctx context.Context, src *pgxpool.Pool, shardSQL fs.FS) error {
	versions, err := migrations.ReadVersions(shardSQL)
	if err != nil {
		return err
	}
	want := map[string]bool{"0 tables": true}
	for _, v := range versions {
		want[fmt.Sprintf("%d %s", v.Number, shardschema.PartTables)] = true
		if v.Indexes != "" {
			want[fmt.Sprintf("%d %s", v.Number, shardschema.PartIndexes)] = true
		}
	}
	rows, err := src.Query(ctx, sqlAppliedVersions, r.Schema)
	if err != nil {
		return fmt.Errorf("read the per-shard SQL versions of %s: %w", r.Schema, err)
	}
	have := map[string]bool{}
	var version int
	var part string
	if _, err := pgx.ForEachRow(rows, []any{&version, &part}, func() error {
		have[fmt.Sprintf("%d %s", version, part)] = true
		return nil
	}); err != nil {
		return fmt.Errorf("read the per-shard SQL versions of %s: %w", r.Schema, err)
	}
	var lacks, extra []string
	for k := range want {
		if !have[k] {
			lacks = append(lacks, k)
		}
	}
	for k := range have {
		if !want[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(lacks)
	sort.Strings(extra)
	if len(lacks) == 0 && len(extra) == 0 {
		r.pass(checkVersions, r.Source, fmt.Sprintf("versions 0-%d applied, as on the target", maxVersion(versions)))
		return nil
	}
	var parts []string
	if len(lacks) > 0 {
		parts = append(parts, "the source lacks "+strings.Join(lacks, ", "))
	}
	if len(extra) > 0 {
		parts = append(parts, "the target would not get "+strings.Join(extra, ", "))
	}
	r.fail(checkVersions, r.Source, "schema "+r.Schema, strings.Join(parts, "; "), errShardSQLMismatch)
	return nil
}

func maxVersion(vs []migrations.Version) int {
	n := 0
	for _, v := range vs {
		n = max(n, v.Number)
	}
	return n
}
