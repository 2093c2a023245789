package backup

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/catalogmove"
	"github.com/shardkit/shardkit/internal/shardschema"
	_ "github.com/shardkit/shardkit/migrations" // implements shardschema's operations
	"github.com/shardkit/shardkit/router"
)

// DefaultLockTimeout is RestoreOptions.LockTimeout's default.
const DefaultLockTimeout = time.Minute

// RestoreOptions tune Restore. The zero value restores nothing: it asks
// for either Replace or Into.
type RestoreOptions struct {
	// Into is the DSN of a scratch database to restore the shard's schema
	// into, for inspection; the catalog is not changed and the schema must
	// not exist there. shardkit's server objects (next_id) are installed if
	// missing. Empty means the shard's current home.
	Into string
	// Replace confirms a restore into the shard's home: the shard is
	// fenced in the map (routers hold its writes), and its schema, with
	// every row written since the dump, is replaced in one transaction.
	Replace bool
	// LockTimeout bounds the wait for the replaced schema's table locks
	// (transactions still using it). Zero means DefaultLockTimeout.
	LockTimeout time.Duration
	// PGBin is the directory of pg_restore and psql (see DumpOptions.PGBin).
	PGBin string
}

// Result says what a restore did.
type Result struct {
	Manifest *Manifest
	// Server is the shard's home that was restored, or "" for a scratch database.
	Server string
	// IDSeq is id_seq's value after the restore: next_id() issues above it.
	IDSeq int64
	// MapVersion is the shard map version that unfenced the shard (home only).
	MapVersion int64
}

// Restore reads a dump written by Dump and restores the shard, into its
// current home (opts.Replace) or into a scratch database (opts.Into). See
// the package documentation for what the transaction checks and carries.
func Restore(ctx context.Context, cat *catalog.Catalog, r io.Reader, opts RestoreOptions) (*Result, error) {
	m, archive, err := ReadHeader(r)
	if err != nil {
		return nil, fmt.Errorf("shardkit: restore: %w", err)
	}
	cfg, err := cat.Config(ctx)
	if err != nil {
		return nil, err
	}
	if cfg.Layout != m.Layout || cfg.Shards != m.Shards {
		return nil, fmt.Errorf("shardkit: restore shard %d: %w: the dump has %d shards in %+v, the catalog %d in %+v",
			m.Shard, ErrLayoutMismatch, m.Shards, m.Layout, cfg.Shards, cfg.Layout)
	}
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = DefaultLockTimeout
	}
	res := &Result{Manifest: m}
	if opts.Into != "" {
		if err := prepareScratch(ctx, opts.Into, m); err != nil {
			return nil, err
		}
		res.IDSeq, err = replay(ctx, opts.Into, archive, m, false, opts)
		if err != nil {
			return nil, err
		}
		return res, nil
	}
	if !opts.Replace {
		return nil, fmt.Errorf("shardkit: restore shard %d: %w: it replaces schema %s and drops every row written since the dump (%s); "+
			"confirm with RestoreOptions.Replace, or restore into a scratch database (RestoreOptions.Into)",
			m.Shard, ErrNotConfirmed, m.Schema, m.TakenAt.UTC().Format(time.RFC3339))
	}
	snap, err := cat.Operator().Load(ctx)
	if err != nil {
		return nil, err
	}
	p, err := snap.Placement(m.Shard)
	if err != nil {
		return nil, fmt.Errorf("shardkit: restore shard %d: %w", m.Shard, err)
	}
	srv, _ := snap.Server(p.Server)
	res.Server = p.Server
	if err := fence(ctx, cat, m.Shard, p.Server); err != nil {
		return nil, err
	}
	res.IDSeq, err = replay(ctx, srv.Admin(), archive, m, true, opts)
	// Unfence whatever happened: on failure the old schema is untouched.
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	v, uerr := cat.Moves().ChangeShardState(uctx, m.Shard, p.Server, router.StateFenced, router.StateActive)
	if err != nil {
		return nil, errors.Join(err, uerr)
	}
	if uerr != nil {
		return nil, fmt.Errorf("shardkit: shard %d was restored but is still fenced: %w; restore it again to set it active", m.Shard, uerr)
	}
	res.MapVersion = v
	return res, nil
}

// fence marks the shard fenced on server, if it is active there.
func fence(ctx context.Context, cat *catalog.Catalog, shard int, server string) error {
	_, err := cat.Moves().ChangeShardState(ctx, shard, server, router.StateActive, router.StateFenced)
	switch {
	case errors.Is(err, catalogmove.ErrNotPlaced):
		return fmt.Errorf("shardkit: restore: %w: shard %d is not active on %s; finish or roll back its move first (rebalance.Mover Complete or Rollback)",
			ErrShardBusy, shard, server)
	case err != nil:
		return fmt.Errorf("shardkit: restore: fence shard %d: %w", shard, err)
	}
	return nil
}

// prepareScratch installs shardkit's server objects on a scratch database
// and checks that the schema is not there yet.
func prepareScratch(ctx context.Context, dsn string, m *Manifest) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("shardkit: restore into scratch database: %w", err)
	}
	defer conn.Close(context.Background())
	if err := shardschema.EnsureServer(ctx, conn, m.Layout); err != nil {
		return fmt.Errorf("shardkit: restore into scratch database: %w", err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, sqlSchemaExists, m.Schema).Scan(&ok); err != nil {
		return fmt.Errorf("shardkit: restore into scratch database: %w", err)
	}
	if ok {
		return fmt.Errorf("shardkit: restore shard %d: %w: %s is there already; drop it or restore into another database",
			m.Shard, ErrSchemaExists, m.Schema)
	}
	return nil
}

// replay runs pg_restore's script of the archive through psql inside the
// restore transaction (sql/restore_begin.sql, sql/restore_end.sql) on dsn,
// and returns id_seq's value after it.
func replay(ctx context.Context, dsn string, archive io.Reader, m *Manifest, replace bool, opts RestoreOptions) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	args := []string{"--file=-", "--no-publications", "--no-subscriptions"}
	if !replace {
		// A scratch database may lack the home's roles.
		args = append(args, "--no-owner", "--no-privileges")
	}
	pgr, pgrErr, err := command(ctx, opts.PGBin, "pg_restore", dsn, args...)
	if err != nil {
		return 0, err
	}
	pgr.Stdin = archive
	script, err := pgr.StdoutPipe()
	if err != nil {
		return 0, err
	}
	vars, err := psqlVars(m, replace, opts.LockTimeout)
	if err != nil {
		return 0, err
	}
	psql, psqlErr, err := command(ctx, opts.PGBin, "psql", dsn, append([]string{"-X", "-q", "-o", "/dev/null"}, vars...)...)
	if err != nil {
		return 0, err
	}
	var out bytes.Buffer
	psql.Stdout = &out
	w := &waitOnEOF{r: script, wait: pgr.Wait}
	psql.WaitDelay = 5 * time.Second // if psql stops early, do not wait on pg_restore's pipe for long
	psql.Stdin = io.MultiReader(strings.NewReader(restoreBegin), w, strings.NewReader(restoreEnd))
	if err := pgr.Start(); err != nil {
		return 0, &ToolError{Tool: "pg_restore", Err: err}
	}
	psqlRunErr := psql.Run()
	cancel() // psql stopped early: do not leave pg_restore blocked on its pipe
	restoreRunErr := w.result()
	switch {
	case restoreRunErr != nil && !errors.Is(ctx.Err(), context.Canceled) || restoreRunErr != nil && psqlRunErr == nil:
		return 0, fmt.Errorf("shardkit: restore shard %d: %w; nothing was changed", m.Shard, &ToolError{Tool: "pg_restore", Stderr: pgrErr.String(), Err: restoreRunErr})
	case psqlRunErr != nil && strings.Contains(psqlErr.String(), checksumSQLState+":"):
		return 0, fmt.Errorf("shardkit: restore shard %d: %w; nothing was changed: %s", m.Shard, ErrChecksumMismatch, lastLine(psqlErr.String()))
	case psqlRunErr != nil:
		return 0, fmt.Errorf("shardkit: restore shard %d: %w; nothing was changed", m.Shard, &ToolError{Tool: "psql", Stderr: psqlErr.String(), Err: psqlRunErr})
	}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "shardkit-restored-id-seq "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("shardkit: restore shard %d: psql finished without reporting id_seq; check the shard's schema", m.Shard)
}

// psqlVars are the restore script's variables as psql arguments.
func psqlVars(m *Manifest, replace bool, lockTimeout time.Duration) ([]string, error) {
	versions, err := json.Marshal(orEmpty(m.Versions))
	if err != nil {
		return nil, err
	}
	tables, err := json.Marshal(orEmpty(m.Tables))
	if err != nil {
		return nil, err
	}
	seqs, err := json.Marshal(orEmpty(m.Sequences))
	if err != nil {
		return nil, err
	}
	kv := []string{
		"ON_ERROR_STOP=1",
		"VERBOSITY=verbose",
		"schema=" + m.Schema,
		"replace=" + strconv.FormatBool(replace),
		"lock_timeout=" + strconv.FormatInt(lockTimeout.Milliseconds(), 10) + "ms",
		"versions=" + string(versions),
		"tables=" + string(tables),
		"sequences=" + string(seqs),
		"shard_seq_bits=" + strconv.Itoa(int(m.Layout.ShardBits)+int(m.Layout.SeqBits)),
		"counter_bits=" + strconv.Itoa(int(m.Layout.CounterBits())),
	}
	var args []string
	for _, v := range kv {
		args = append(args, "-v", v)
	}
	return args, nil
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], "ERROR") {
			return strings.TrimSpace(lines[i])
		}
	}
	return lines[len(lines)-1]
}

// waitOnEOF reads pg_restore's output and, at its end, waits for
// pg_restore and reports its failure as a read error: psql then sees its
// input end before the script's COMMIT, and the transaction rolls back.
type waitOnEOF struct {
	r    io.Reader
	wait func() error
	once sync.Once
	err  error
}

func (w *waitOnEOF) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	if err == io.EOF {
		if werr := w.result(); werr != nil {
			return n, werr
		}
	}
	return n, err
}

// result waits for pg_restore (once) and returns its error.
func (w *waitOnEOF) result() error {
	w.once.Do(func() { w.err = w.wait() })
	return w.err
}
