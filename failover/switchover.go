package failover

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/router"
)

// Options configure Switchover. A zero duration takes its default.
type Options struct {
	// To names the standby to promote: HOST or HOST:PORT, one of the
	// hosts of the server's admin DSN.
	To string
	// Lease is the fence's lease recorded in the catalog (default 10s):
	// plugin writes the fence holds wait that long at most, past
	// plugin.Config.FenceWait.
	Lease time.Duration
	// DrainWait bounds the wait for write transactions that began on the
	// old primary before it went read-only (default 2s); past it the
	// switchover is undone with ErrWritesRunning.
	DrainWait time.Duration
	// ReplayWait bounds the wait for the standby to replay the old
	// primary's last write (default 5s); past it, ErrReplayBehind.
	ReplayWait time.Duration
	// SessionWait bounds the wait for routers to leave the old primary
	// once the new one is recorded (default 1s): until every session
	// there is idle since the record or gone. The sessions left then are
	// ended, so that the old primary serves no read once writes go to
	// the new one.
	SessionWait time.Duration
	// Progress, when set, is called after each step.
	Progress func(Step)
}

func (o *Options) defaults() {
	if o.Lease <= 0 {
		o.Lease = 10 * time.Second
	}
	if o.DrainWait <= 0 {
		o.DrainWait = 2 * time.Second
	}
	if o.ReplayWait <= 0 {
		o.ReplayWait = 5 * time.Second
	}
	if o.SessionWait <= 0 {
		o.SessionWait = time.Second
	}
}

// Step is one step of a switchover, done.
type Step struct {
	Name   string        // check, fence, read-only, drain, replay, promote, record, sessions, release
	Took   time.Duration // the step's own time
	Detail string
}

func (s Step) String() string {
	return fmt.Sprintf("%-9s %7.1f ms  %s", s.Name, float64(s.Took.Microseconds())/1000, s.Detail)
}

// Report is a switchover done.
type Report struct {
	Server     string
	Old, New   string         // host:port of the old primary and of the promoted standby
	Primary    router.Primary // the new primary, as recorded
	Shards     int            // shards fenced
	FinalLSN   string         // the old primary's last WAL position, replayed before the promotion
	Fenced     time.Duration  // from the fence to its release: the longest a write waited
	Steps      []Step
	Terminated int // sessions on the old primary ended after the record
}

// Statements of a switchover, on the hosts themselves.
const (
	sqlReadOnlyOn    = `ALTER SYSTEM SET default_transaction_read_only = on`
	sqlReadOnlyReset = `ALTER SYSTEM RESET default_transaction_read_only`
	sqlReload        = `SELECT pg_reload_conf()`
	// sqlReadOnlySeen is run on a new session: it sees the setting once
	// the postmaster reloaded, which it does before it signals the
	// running backends; each of them reads it before its next command.
	sqlReadOnlySeen = `SELECT current_setting('default_transaction_read_only') = 'on', statement_timestamp()`
	// sqlWritesBefore counts the transactions that began before the
	// read-only setting reached every backend: they may write yet.
	sqlWritesBefore = `SELECT count(*) FROM pg_stat_activity
	WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND xact_start < $1`
	// sqlFinalLSN is the end of the old primary's WAL: its insert
	// position, except that an insert position at a page's start is
	// reported just past the page's header (24 bytes; 40 on a segment's
	// first page), where no record ends: with writes held, nothing is
	// written there, the standby replays up to the page's start and never
	// past it, and the replay wait would wait for a byte that never comes
	// (seen after pg_basebackup's segment switch, with no write since).
	sqlFinalLSN = `SELECT CASE WHEN o % b = 24 OR o % s = 40 THEN (l - (o % b))::text ELSE l::text END
	FROM (SELECT l, pg_wal_lsn_diff(l, '0/0') AS o, current_setting('wal_block_size')::numeric AS b,
		(SELECT setting::numeric FROM pg_settings WHERE name = 'wal_segment_size') AS s
		FROM pg_current_wal_insert_lsn() AS l) w`
	sqlReplayed = `SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)`
	// sqlWalSenders and sqlStandbyAt describe a replay that is late.
	sqlWalSenders = `SELECT format('old primary flushed %s; walsenders: %s', pg_current_wal_flush_lsn(),
	coalesce((SELECT string_agg(format('%s %s (%s) sent %s, flushed there %s, replayed there %s, reply %s ago',
		application_name, state, sync_state, sent_lsn, flush_lsn, replay_lsn, now() - reply_time), ', ') FROM pg_stat_replication), 'none'))`
	sqlStandbyAt = `SELECT format('standby received %s, replayed %s', pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())`
	sqlStandbyOK = `SELECT pg_is_in_recovery(), (SELECT system_identifier FROM pg_control_system())::text,
	coalesce((SELECT status FROM pg_stat_wal_receiver), '')`
	sqlPromote = `SELECT pg_promote(true, $1)`
	// sqlSessionsOf counts the sessions still in use since the record at
	// $2: a router that has not seen it yet reads there. A session idle
	// since before the record is an old pool's that a router which saw
	// the record does not use again; a transaction that failed (a write
	// the read-only primary refused, which the plugin runs again on the
	// new primary) can only roll back.
	sqlSessionsOf = `SELECT count(*) FROM pg_stat_activity
	WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND datname = $1
	AND state IS DISTINCT FROM 'idle in transaction (aborted)' AND NOT (state = 'idle' AND state_change < $2)`
	sqlClock       = `SELECT statement_timestamp()`
	sqlEndSessions = `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
	WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND datname = $1`
	sqlReadOnlyNow = `SELECT current_setting('default_transaction_read_only') = 'on'`
)

// Switchover makes the standby opts.To server name's primary, with writes
// held, not failed: it fences the server's shards in the catalog (plugin
// writes wait), puts the old primary read-only and waits for the write
// transactions begun before, waits until the standby has replayed the old
// primary's last WAL position, promotes it (pg_promote), records it as the
// server's primary, ends the sessions left on the old primary and
// releases the fence. Plugin reads go on throughout: until the record
// from the old primary, which takes no write, then from the new one.
//
// cat must be an operator's catalog (catalog.Catalog.Operator), whose
// snapshots carry the admin DSN. A step that fails before the promotion
// undoes what was done (the old primary writable, the fence released) and
// returns a *StepError with Aborted set; one after it says what is left.
// The old primary stays up, read-only: stop it, and rebuild it as a
// standby of the new primary (pg_rewind) before it serves again.
func Switchover(ctx context.Context, cat *catalog.Catalog, name string, opts Options) (*Report, error) {
	opts.defaults()
	s := &switchover{cat: cat, name: name, opts: opts, rep: &Report{Server: name}}
	defer s.close()
	return s.run(ctx)
}

// Release ends the fence a switchover left on server name's shards when
// it stopped after the promotion (or its process died): writes go on, to
// the primary the catalog records. It returns how many shards it
// unfenced.
func Release(ctx context.Context, cat *catalog.Catalog, name string) (int, error) {
	return cat.UnfenceServer(ctx, name, router.Primary{})
}

// switchover is one run of Switchover: its steps are its methods.
type switchover struct {
	cat  *catalog.Catalog
	name string
	opts Options
	rep  *Report

	cfg              *pgx.ConnConfig // the server's admin DSN
	app              string          // the server's application DSN
	old, standby     *pgx.Conn
	oldRec           router.Primary
	recordedAt       time.Time // on the old primary's clock
	fencedAt         time.Time
	readOnly, fenced bool
	promoted         bool
}

func (s *switchover) close() {
	for _, c := range []*pgx.Conn{s.old, s.standby} {
		if c != nil {
			_ = c.Close(context.Background())
		}
	}
}

func (s *switchover) run(ctx context.Context) (*Report, error) {
	steps := []struct {
		name string
		do   func(context.Context) (string, error)
	}{
		{"check", s.check}, {"fence", s.fence}, {"read-only", s.setReadOnly}, {"drain", s.drain},
		{"replay", s.replay}, {"promote", s.promote}, {"record", s.record}, {"sessions", s.endSessions},
		{"release", s.release},
	}
	for _, st := range steps {
		start := time.Now()
		detail, err := st.do(ctx)
		if err != nil {
			return s.rep, s.fail(ctx, st.name, err)
		}
		step := Step{Name: st.name, Took: time.Since(start), Detail: detail}
		s.rep.Steps = append(s.rep.Steps, step)
		if s.opts.Progress != nil {
			s.opts.Progress(step)
		}
	}
	return s.rep, nil
}

// fail undoes what the switchover did when it is not promoted yet.
func (s *switchover) fail(ctx context.Context, step string, err error) error {
	e := &StepError{Server: s.name, Step: step, Err: err}
	if s.promoted {
		return e
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var undo []error
	if s.readOnly {
		if err := s.exec(uctx, s.old, sqlReadOnlyReset); err != nil {
			undo = append(undo, fmt.Errorf("reset default_transaction_read_only: %w", err))
		} else if err := s.exec(uctx, s.old, sqlReload); err != nil {
			undo = append(undo, fmt.Errorf("reload: %w", err))
		} else if err := s.writableAgain(uctx); err != nil {
			undo = append(undo, err)
		}
	}
	if s.fenced {
		if _, err := s.cat.UnfenceServer(uctx, s.name, router.Primary{}); err != nil {
			undo = append(undo, fmt.Errorf("release the fence: %w", err))
		}
	}
	e.Undo = errors.Join(undo...)
	e.Aborted = e.Undo == nil
	return e
}

// writableAgain waits, before the fence is released, until a new
// session of the old primary sees default_transaction_read_only off.
// pg_reload_conf returns before the postmaster rereads the setting; a
// new backend has its setting from the postmaster, which signals every
// backend once it reread it, and a backend rereads it before its next
// command. Released earlier, the writes the fence held met backends
// still read-only (25006), on a server whose shards were active again.
func (s *switchover) writableAgain(ctx context.Context) error {
	err := poll(ctx, 10*time.Second, func() (bool, error) {
		c, err := s.connect(ctx, s.rep.Old)
		if err != nil {
			return false, err
		}
		defer c.Close(ctx)
		var on bool
		var at time.Time
		err = c.QueryRow(ctx, sqlReadOnlySeen).Scan(&on, &at)
		return err == nil && !on, err
	})
	if err != nil {
		return fmt.Errorf("the old primary did not leave default_transaction_read_only: %w", err)
	}
	return nil
}

func (s *switchover) exec(ctx context.Context, c *pgx.Conn, sql string, args ...any) error {
	_, err := c.Exec(ctx, sql, args...)
	return err
}

// check finds the old primary and the standby among the hosts of the
// server's admin DSN and connects to each directly.
func (s *switchover) check(ctx context.Context) (string, error) {
	var admin string
	var rec router.Primary
	if err := s.cat.Update(ctx, func(ctx context.Context, tx *catalog.Tx) error {
		servers, err := tx.Servers(ctx)
		if err != nil {
			return err
		}
		for _, srv := range servers {
			if srv.Name == s.name {
				admin, s.app, rec = srv.Admin(), srv.DSN, srv.Primary
				return nil
			}
		}
		return fmt.Errorf("%w: %q", router.ErrUnknownServer, s.name)
	}); err != nil {
		return "", err
	}
	cfg, err := pgx.ParseConfig(admin)
	if err != nil {
		return "", fmt.Errorf("the server's admin DSN: %w", err)
	}
	s.cfg = cfg
	for _, dsn := range []string{admin, s.app} {
		if !readWrite(dsn) {
			return "", fmt.Errorf("%w: a DSN of server %s does not set target_session_attrs=read-write (or primary): register both hosts with it (shardctl server set-dsn)", ErrDSNNotSwitchable, s.name)
		}
	}
	hosts := hostsOf(cfg)
	to, err := pickHost(hosts, s.opts.To)
	if err != nil {
		return "", err
	}
	var oldHost string
	for _, h := range hosts {
		c, err := s.connect(ctx, h)
		if err != nil {
			continue // a host that is down is not the primary
		}
		got, err := router.ReadPrimary(ctx, c.PgConn())
		if err == nil && got.Timeline > 0 && rec.Accepts(got) {
			var ro bool
			if err := c.QueryRow(ctx, sqlReadOnlyNow).Scan(&ro); err == nil && !ro {
				s.old, oldHost, s.oldRec = c, h, got
				break
			}
		}
		_ = c.Close(ctx)
	}
	if s.old == nil {
		return "", fmt.Errorf("%w: none of %s answers read-write as the recorded primary (%s)", ErrNoPrimary, strings.Join(hosts, ", "), rec)
	}
	if oldHost == to {
		return "", fmt.Errorf("%w: %s is the server's primary; name its standby", ErrNotStandby, to)
	}
	if s.standby, err = s.connect(ctx, to); err != nil {
		return "", fmt.Errorf("%w: connect to %s: %w", ErrNotStandby, to, err)
	}
	var recovery bool
	var sys, recv string
	if err := s.standby.QueryRow(ctx, sqlStandbyOK).Scan(&recovery, &sys, &recv); err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrNotStandby, to, err)
	}
	if !recovery || sys != s.oldRec.SystemID || recv != "streaming" {
		return "", fmt.Errorf("%w: %s (in recovery: %v, system %s, the primary's %s, WAL receiver %q): give a streaming standby of %s",
			ErrNotStandby, to, recovery, sys, s.oldRec.SystemID, recv, oldHost)
	}
	s.rep.Old, s.rep.New = oldHost, to
	return fmt.Sprintf("primary %s (%s), standby %s streaming", oldHost, s.oldRec, to), nil
}

// readWrite reports whether a DSN asks for a writable host, so that its
// connections skip a read-only old primary.
func readWrite(dsn string) bool {
	d := strings.ToLower(dsn)
	return strings.Contains(d, "target_session_attrs=read-write") || strings.Contains(d, "target_session_attrs=primary")
}

// hostsOf lists the hosts of cfg as host:port, in order, once each (pgx
// lists a host twice for sslmode=prefer).
func hostsOf(cfg *pgx.ConnConfig) []string {
	var out []string
	seen := map[string]bool{}
	add := func(h string, p uint16) {
		hp := net.JoinHostPort(h, strconv.Itoa(int(p)))
		if !seen[hp] {
			seen[hp] = true
			out = append(out, hp)
		}
	}
	add(cfg.Host, cfg.Port)
	for _, f := range cfg.Fallbacks {
		add(f.Host, f.Port)
	}
	return out
}

// pickHost finds to (HOST or HOST:PORT) among hosts.
func pickHost(hosts []string, to string) (string, error) {
	if to == "" {
		return "", fmt.Errorf("%w: name the standby to promote (--to HOST[:PORT]), one of %s", ErrNotStandby, strings.Join(hosts, ", "))
	}
	var match []string
	for _, hp := range hosts {
		h, _, _ := net.SplitHostPort(hp)
		if hp == to || h == to {
			match = append(match, hp)
		}
	}
	if len(match) != 1 {
		return "", fmt.Errorf("%w: %q is %d of the hosts of the server's admin DSN (%s); give HOST:PORT of one",
			ErrNotStandby, to, len(match), strings.Join(hosts, ", "))
	}
	return match[0], nil
}

// connect opens a connection to one host of the admin DSN, with no
// target_session_attrs check.
func (s *switchover) connect(ctx context.Context, hostPort string) (*pgx.Conn, error) {
	c := s.cfg.Copy()
	h, p, _ := net.SplitHostPort(hostPort)
	port, _ := strconv.Atoi(p)
	c.Host, c.Port = h, uint16(port)
	for _, f := range s.cfg.Fallbacks {
		if f.Host == h && int(f.Port) == port {
			c.TLSConfig = f.TLSConfig
			break
		}
	}
	c.Fallbacks, c.ValidateConnect = nil, nil
	return pgx.ConnectConfig(ctx, c)
}
