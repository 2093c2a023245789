package readexec

import (
	"container/list"
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A server's prepared reads go to it as one pipeline. Run one after
// another, the 10 statements a server has in a read of 2000 shards each
// wait a round trip and the server waits for the client between them;
// sent together on one connection, the server runs them back to back
// while the client reads the answers. Each statement is followed by its
// own Sync, so each runs in its own implicit transaction, as before: the
// server's lock table holds one statement's locks at a time (a pgx Batch
// has one Sync, one transaction holding every statement's locks until
// the last ends). An answer is handed on as its Sync arrives.
//
// pgx's statement cache cannot be reached from a pipeline, so the stage
// keeps its own on each connection (readCache), the connection's only
// one for reads across shards, bounded as pgx's was (Config.PerConn): a
// statement is prepared (Parse, Describe) on first use, in one pipeline
// of its own before the reads, and closed (Close) when it leaves the
// cache, in that same pipeline. PgBouncer
// 1.21 or later carries exactly these messages in transaction mode.

// pipeWindow is the most statements one pipeline of a server carries:
// half the cache, so that a window's statements are never evicted to
// make room for each other.
func pipeWindow(perConn int) int { return max(perConn/2, 1) }

// readCacheKey is the readCache's key in its connection's CustomData.
const readCacheKey = "shardkit.reads"

// readCache is a connection's prepared reads, least recently used
// evicted first. Only the goroutine holding the connection uses it.
type readCache struct {
	size   int                      // the most statements it keeps (Config.PerConn)
	byText map[string]*list.Element // of *cachedRead
	lru    list.List                // front: most recently used
	stale  []string                 // names to close before the next prepare
}

// cachedRead is one statement prepared on the connection.
type cachedRead struct {
	text    string
	sd      *pgconn.StatementDescription
	formats []int16 // the result formats (sqlResultFormats)
}

// HasReadCache reports whether connection c has run reads across shards
// prepared: their cache is on it, and holds up to its size of the
// backend's memory from then on.
func HasReadCache(c *pgconn.PgConn) bool {
	_, ok := c.CustomData()[readCacheKey]
	return ok
}

// readCacheOf returns c's cache, made on first use, of size statements.
func readCacheOf(c *pgconn.PgConn, size int) *readCache {
	cd := c.CustomData()
	rc, _ := cd[readCacheKey].(*readCache)
	if rc == nil {
		rc = &readCache{size: size, byText: map[string]*list.Element{}}
		cd[readCacheKey] = rc
	}
	return rc
}

// get returns the statement prepared for text, marked used; nil if none.
func (rc *readCache) get(text string) *cachedRead {
	el, ok := rc.byText[text]
	if !ok {
		return nil
	}
	rc.lru.MoveToFront(el)
	return el.Value.(*cachedRead)
}

// put adds a prepared statement.
func (rc *readCache) put(cr *cachedRead) {
	rc.byText[cr.text] = rc.lru.PushFront(cr)
}

// drop forgets text's statement and queues its Close.
func (rc *readCache) drop(text string) {
	if el, ok := rc.byText[text]; ok {
		delete(rc.byText, text)
		rc.lru.Remove(el)
		rc.stale = append(rc.stale, el.Value.(*cachedRead).sd.Name)
	}
}

// makeRoom evicts the least recently used statements not in keep until
// n more fit within its size.
func (rc *readCache) makeRoom(n int, keep map[string]bool) {
	for el := rc.lru.Back(); el != nil && rc.lru.Len()+n > rc.size; {
		prev := el.Prev()
		if cr := el.Value.(*cachedRead); !keep[cr.text] {
			rc.drop(cr.text)
		}
		el = prev
	}
}

// readName is the server-side name of a prepared read: by digest, so
// that a name always means one text.
func readName(text string) string {
	sum := sha256.Sum256([]byte(text))
	return "shardkit_" + hex.EncodeToString(sum[:20])
}

// PipeStmt is one statement of a server's pipeline.
type PipeStmt struct {
	SQL    string
	Vars   []any
	Filter Filter // drop the rows that cannot enter the page (nil: keep all)
	Unit   int
}

// ErrBoundPassed ends a pipeline, or a statement, whose server gave no
// answer within the statement bound.
var ErrBoundPassed = errors.New("no answer within the statement bound")

// errNotPgx reports a driver connection that is not pgx's: its
// statements run one by one through database/sql.
var errNotPgx = errors.New("not a pgx connection")

// ReadPipelined runs stmts on one connection of db, as pipelines of up
// to pipeWindow statements, and calls answer with each statement's index
// and outcome in order, as it arrives; answer returns false to stop. It
// stops at the first failed statement. bound, if positive, is the most
// the server may take for any one answer: past it the pipeline is
// cancelled and the statement answered with ErrBoundPassed (wrapped). A
// connection that broke before anything was sent is replaced, as
// database/sql replaces it (two more tries).
func ReadPipelined(cfg *Config, ctx context.Context, db *sql.DB, stmts []PipeStmt, bound time.Duration, answer func(i int, pt Partials, err error) bool) {
	next := 0
	ans := func(i int, pt Partials, err error) bool {
		next = i + 1
		return answer(i, pt, err)
	}
	for try := 0; next < len(stmts); try++ {
		from := next
		err := pipelineOnce(cfg, ctx, db, stmts, from, bound, ans)
		switch {
		case err == nil:
			return
		case errors.Is(err, errNotPgx):
			for i := next; i < len(stmts); i++ {
				st := &stmts[i]
				pt, err := ReadAll(ctx, db, st.SQL, append([]any{cfg.AsPrepared}, st.Vars...))
				if !answer(i, pt, err) || err != nil {
					return
				}
			}
			return
		case (errors.Is(err, driver.ErrBadConn) || pgconn.SafeToRetry(err)) && next == from && try < 2:
			continue // nothing was answered: another connection runs them
		}
		answer(next, Partials{}, err)
		return
	}
}

// pipelineOnce runs stmts[from:] on one connection of db. It returns an
// error only for the first statement not answered; a statement's own
// error is answered.
func pipelineOnce(cfg *Config, ctx context.Context, db *sql.DB, stmts []PipeStmt, from int, bound time.Duration, answer func(i int, pt Partials, err error) bool) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		pc, plans, ok := cfg.Conn(dc)
		if !ok {
			return errNotPgx
		}
		if pc.IsClosed() {
			return driver.ErrBadConn // database/sql drops the connection
		}
		r := &pipeRun{pc: pc, rc: readCacheOf(pc.PgConn(), cfg.PerConn), plans: plans, stmts: stmts, answer: answer, parent: ctx, bound: bound}
		err := r.run(from)
		if err != nil && !pc.IsClosed() && !isPgError(err) {
			// Whatever the pipeline left unread, the connection is not
			// to be used again.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = pc.PgConn().Close(ctx)
			cancel()
		}
		return err
	})
}

// pipeRun is one connection's run of a server's statements.
type pipeRun struct {
	pc     *pgx.Conn
	rc     *readCache
	plans  Plans
	stmts  []PipeStmt
	answer func(i int, pt Partials, err error) bool
	parent context.Context
	bound  time.Duration
	eqb    pgx.ExtendedQueryBuilder

	ctx   context.Context // parent, cancelled when the bound passes
	timer *time.Timer
}

// run runs the statements from index i on. It returns an error for the
// statement not yet answered when the connection failed (not a
// statement's own error, which it answers).
func (r *pipeRun) run(i int) error {
	ctx, cancel := context.WithCancelCause(r.parent)
	defer cancel(nil)
	r.ctx = ctx
	if r.bound > 0 {
		r.timer = time.AfterFunc(r.bound, func() { cancel(ErrBoundPassed) })
		defer r.timer.Stop()
	}
	for i < len(r.stmts) {
		gen := r.plans.Gen()
		w := r.stmts[i:min(i+pipeWindow(r.rc.size), len(r.stmts))]
		texts := make([]string, len(w))
		for j := range w {
			texts[j] = r.plans.Text(w[j].SQL, gen)
		}
		crs, failed, perr := r.prepare(texts)
		if perr != nil && !isPgError(perr) {
			return r.connErr(perr)
		}
		n, stale, err := r.execute(i, w[:failed], crs)
		switch {
		case err != nil:
			return r.connErr(err)
		case n < 0:
			return nil // stopped: a statement failed or answer said so
		case stale >= 0:
			// The schema changed under statement i+stale's plan: a
			// new generation prepares afresh, and the statement runs
			// unnamed this once.
			r.plans.Changed(gen)
			r.rc.drop(texts[stale])
			k := i + stale
			st := &r.stmts[k]
			pt, err := queryOn(r.ctx, r.pc, st.SQL, pgx.QueryExecModeExec, st.Vars, st.Filter, st.Unit)
			if err != nil && !isPgError(err) {
				return r.connErr(err)
			}
			r.pause()
			if !r.answer(k, pt, err) || err != nil {
				return nil
			}
			r.restart()
			i = k + 1
			continue
		case failed < len(w):
			r.answer(i+failed, Partials{}, perr)
			return nil
		}
		i += len(w)
	}
	return nil
}

// pause stops the bound while the caller takes an answer: a serial
// read merges each answer on this goroutine, and the time it takes is
// the caller's, not the server's (a large answer merged for longer than
// StatementTimeout would otherwise cancel a healthy server's pipeline and
// take the server as down). A bound that passed already stays passed.
func (r *pipeRun) pause() {
	if r.timer != nil {
		r.timer.Stop()
	}
}

// restart gives the next statement the whole bound.
func (r *pipeRun) restart() {
	if r.timer != nil {
		r.timer.Reset(r.bound)
	}
}

// connErr is the error of a connection that failed under the run: the
// bound's, if it passed.
func (r *pipeRun) connErr(err error) error {
	if errors.Is(context.Cause(r.ctx), ErrBoundPassed) && r.parent.Err() == nil {
		return fmt.Errorf("%w: %w", ErrBoundPassed, err)
	}
	return err
}

// prepare returns the prepared statement of each text, preparing those
// the connection does not have in one pipeline (a Sync after each, so
// each parse holds its locks alone), after closing those the cache
// evicts. failed is the index of the first text that did not prepare
// (len(texts) if none) and err its error.
func (r *pipeRun) prepare(texts []string) (crs []*cachedRead, failed int, err error) {
	crs = make([]*cachedRead, len(texts))
	var missing []int
	keep := make(map[string]bool, len(texts))
	first := make(map[string]int, len(texts)) // a text met twice is prepared once
	for j, t := range texts {
		keep[t] = true
		if _, seen := first[t]; seen {
			continue
		}
		first[t] = j
		if crs[j] = r.rc.get(t); crs[j] == nil {
			missing = append(missing, j)
		}
	}
	defer func() {
		for j, t := range texts {
			crs[j] = crs[first[t]] // nil where it failed, which no statement reaches
		}
	}()
	failed = len(texts)
	if len(missing) == 0 && len(r.rc.stale) == 0 {
		return crs, failed, nil
	}
	r.rc.makeRoom(len(missing), keep)
	p := r.pc.PgConn().StartPipeline(r.ctx)
	closing := r.rc.stale
	r.rc.stale = nil
	for _, name := range closing {
		p.SendDeallocate(name)
	}
	if len(closing) > 0 {
		p.SendPipelineSync()
	}
	for _, j := range missing {
		p.SendPrepare(readName(texts[j]), texts[j], nil)
		p.SendPipelineSync()
	}
	if err := p.Flush(); err != nil {
		_ = p.Close()
		return crs, 0, err
	}
	if len(closing) > 0 {
		if err := expectResults(p, len(closing)); err != nil {
			_ = p.Close()
			return crs, 0, err
		}
	}
	for _, j := range missing {
		res, gerr := p.GetResults()
		if sd, ok := res.(*pgconn.StatementDescription); ok && gerr == nil {
			sd.Name, sd.SQL = readName(texts[j]), texts[j] // a pipeline's description leaves them out
			formats := make([]int16, len(sd.Fields))
			for f := range sd.Fields {
				formats[f] = sqlResultFormats[sd.Fields[f].DataTypeOID]
			}
			crs[j] = &cachedRead{text: texts[j], sd: sd, formats: formats}
			r.rc.put(crs[j])
		} else if gerr == nil {
			gerr = fmt.Errorf("shardkit: preparing a read: unexpected %T", res)
		}
		if gerr != nil && j < failed {
			failed, err = j, gerr
		}
		if !isPgError(gerr) && gerr != nil {
			_ = p.Close()
			return crs, 0, gerr
		}
		if _, serr := p.GetResults(); serr != nil { // its Sync
			_ = p.Close()
			return crs, 0, serr
		}
	}
	if cerr := p.Close(); cerr != nil && !isPgError(cerr) {
		return crs, 0, cerr
	}
	return crs, failed, err
}

// expectResults reads n results and the Sync after them.
func expectResults(p *pgconn.Pipeline, n int) error {
	for range n + 1 {
		if _, err := p.GetResults(); err != nil {
			return err
		}
	}
	return nil
}

// execute sends w (statements i, i+1, … each with its prepared
// statement crs[j]) as one pipeline and answers each as it arrives. n is
// the number answered, -1 if the run is to stop; stale is the index in
// w of a statement whose plan the schema changed (answered by the
// caller), -1 if none; err a failure of the connection.
func (r *pipeRun) execute(i int, w []PipeStmt, crs []*cachedRead) (n, stale int, err error) {
	if len(w) == 0 {
		return 0, -1, nil
	}
	p := r.pc.PgConn().StartPipeline(r.ctx)
	m := r.pc.TypeMap()
	for j := range w {
		args := make([]any, len(w[j].Vars))
		for a, v := range w[j].Vars {
			if na, ok := v.(sql.NamedArg); ok { // database/sql passes a named argument's value
				v = na.Value
			}
			args[a] = v
		}
		sd := crs[j].sd
		if len(sd.ParamOIDs) != len(args) {
			err = fmt.Errorf("expected %d arguments, got %d", len(sd.ParamOIDs), len(args))
		} else {
			err = r.eqb.Build(m, sd, args)
		}
		if err != nil {
			// Sent so far: run. This one fails without being sent.
			w = w[:j]
			break
		}
		p.SendQueryStatement(sd, r.eqb.ParamValues, r.eqb.ParamFormats, crs[j].formats)
		p.SendPipelineSync()
	}
	buildErr := err
	if ferr := p.Flush(); ferr != nil {
		_ = p.Close()
		return 0, -1, ferr
	}
	stale = -1
	for j := range w {
		res, gerr := p.GetResults()
		var pt Partials
		if rr, ok := res.(*pgconn.ResultReader); ok && gerr == nil {
			pt, gerr = readResult(rr, m, w[j].Filter, w[j].Unit)
		} else if gerr == nil {
			gerr = fmt.Errorf("shardkit: pipelined read: unexpected %T", res)
		}
		if gerr != nil && !isPgError(gerr) {
			_ = p.Close()
			return j, -1, gerr
		}
		if _, serr := p.GetResults(); serr != nil { // its Sync
			_ = p.Close()
			return j, -1, serr
		}
		if gerr != nil && PlanChanged(gerr) {
			stale = j
			break
		}
		r.pause()
		if !r.answer(i+j, pt, gerr) || gerr != nil {
			_ = p.Close()
			return -1, -1, nil
		}
		r.restart()
	}
	if cerr := p.Close(); cerr != nil && !isPgError(cerr) {
		if stale >= 0 {
			return stale, -1, cerr
		}
		return len(w), -1, cerr
	}
	if stale >= 0 {
		return stale, stale, nil
	}
	if buildErr != nil {
		r.answer(i+len(w), Partials{}, buildErr)
		return -1, -1, nil
	}
	return len(w), -1, nil
}

// isPgError reports whether err is the server's answer to a statement
// (the connection stays usable).
func isPgError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe)
}
