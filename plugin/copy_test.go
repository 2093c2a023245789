package plugin

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	"gorm.io/gorm/schema"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/testkit"
	"github.com/shardkit/shardkit/router"
)

// storedPhoto is a photos row as read by direct SQL.
type storedPhoto struct {
	ID, UserID int64
	Caption    string
	Likes      int
	CreatedAt  time.Time
}

const storedCols = "id, user_id, caption, likes, created_at"

// shardPhotos reads, by direct SQL on the shard's home, the photos of one
// shard, checking that every ID's shard bits name that shard.
func (e *env) shardPhotos(t *testing.T, shard int) []storedPhoto {
	t.Helper()
	conn := pgtest.Connect(t, e.dsn[e.serverOf(t, shard)])
	rows, err := conn.Query(context.Background(), "SELECT "+storedCols+" FROM "+pgx.Identifier{router.SchemaName(shard), "photos"}.Sanitize()+" ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[storedPhoto])
	if err != nil {
		t.Fatal(err)
	}
	layout := e.r.Snapshot().Layout
	for _, p := range got {
		if s, err := layout.ShardOf(p.ID); err != nil || s != shard {
			t.Fatalf("ID %d in shard %d decodes to shard %d (%v)", p.ID, shard, s, err)
		}
	}
	return got
}

// holdsAll checks, by direct SQL on each shard's home, that every row is
// in its key's shard with its ID (whose bits name that shard).
func (e *env) holdsAll(t *testing.T, rows []Photo) {
	t.Helper()
	want := map[int][]int64{}
	for _, p := range rows {
		want[e.shardOf(p.UserID)] = append(want[e.shardOf(p.UserID)], p.ID)
	}
	for shard, ids := range want {
		have := map[int64]bool{}
		for _, p := range e.shardPhotos(t, shard) {
			have[p.ID] = true
		}
		for _, id := range ids {
			if !have[id] {
				t.Fatalf("ID %d is not in shard %d on %s", id, shard, e.serverOf(t, shard))
			}
		}
	}
}

// TestCopyFrom loads rows across shards with COPY, one shard's part
// failing on a unique violation: the other parts are committed, the
// failed shard holds none of its part, the error says which and why, and
// the rows stored are those plain GORM Create stores.
func TestCopyFrom(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	fixed := time.Date(2026, 3, 4, 5, 6, 7, 8000, time.UTC)
	db := e.db.Session(&gorm.Session{NowFunc: func() time.Time { return fixed }})

	// A row already in shard 3, whose ID the load repeats: shard 3's part
	// violates the primary key.
	const badShard = 3
	old := Photo{UserID: badShard, Caption: "old"}
	if err := db.Create(&old).Error; err != nil {
		t.Fatal(err)
	}
	var rows []Photo
	for i := range 600 {
		p := Photo{UserID: int64(1 + i%40), Caption: fmt.Sprintf("c%d", i), Likes: i % 5}
		if i%3 == 0 {
			p.CreatedAt = fixed.Add(time.Duration(i) * time.Second)
		}
		if i%7 == 0 {
			p.UserID, p.Caption = 0, fmt.Sprintf("user:%d", 100+i) // key set by BeforeCreate
		}
		rows = append(rows, p)
	}
	rows = append(rows, Photo{ID: old.ID, UserID: badShard + int64(e.shards), Caption: "dup"})

	var mu sync.Mutex
	var progress []CopyProgress
	rep, err := CopyFrom(ctx, db, rows, OnCopyProgress(func(p CopyProgress) {
		mu.Lock()
		progress = append(progress, p)
		mu.Unlock()
	}))
	var ce *CopyError
	if !errors.As(err, &ce) || ce.Report != rep {
		t.Fatalf("err = %v, want a *CopyError with the report", err)
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "23505" {
		t.Fatalf("err = %v, want the unique violation through errors.As", err)
	}
	failed := rep.Failed()
	if len(failed) != 1 || failed[0].Shard != badShard || failed[0].State != CopyFailed || failed[0].Server != e.serverOf(t, badShard) {
		t.Fatalf("failed parts %+v, want shard %d only", failed, badShard)
	}
	var se *ShardError
	if !errors.As(failed[0].Err, &se) || se.Shard != badShard {
		t.Fatalf("part error %v does not name shard %d", failed[0].Err, badShard)
	}
	if len(rep.Parts) != e.shards {
		t.Fatalf("%d parts, want one per shard (%d)", len(rep.Parts), e.shards)
	}
	var committed int64
	for _, p := range rep.Parts {
		if p.State == CopyCommitted {
			committed += int64(p.Rows)
		}
	}
	if committed != rep.Rows || rep.Rows != int64(len(rows)-failed[0].Rows) {
		t.Fatalf("report rows %d, committed parts %d, want %d", rep.Rows, committed, len(rows)-failed[0].Rows)
	}
	if len(progress) != len(rep.Parts) {
		t.Fatalf("%d progress calls for %d parts", len(progress), len(rep.Parts))
	}
	if last := progress[len(progress)-1]; last.Rows != rep.Rows || last.TotalRows != int64(len(rows)) || last.Failed != 1 || last.Parts != last.TotalParts {
		t.Fatalf("last progress %+v", last)
	}

	// What plain GORM Create stores for the same rows (same IDs, filled in
	// place by CopyFrom), on one unsharded table.
	plainDSN := pgtest.NewDatabase(t, 0)
	pgtest.Exec(t, plainDSN, plainPhotosDDL)
	plain, err := gorm.Open(postgres.Open(plainDSN), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent), NowFunc: func() time.Time { return fixed }})
	if err != nil {
		t.Fatal(err)
	}
	var want []Photo
	inFailed := map[int]bool{}
	for _, i := range failed[0].Index {
		inFailed[i] = true
	}
	for i, p := range rows {
		if p.ID == 0 || p.UserID == 0 || p.CreatedAt.IsZero() {
			t.Fatalf("row %d not filled in place: %+v", i, p)
		}
		if !inFailed[i] {
			want = append(want, p)
		}
	}
	if err := plain.Create(&want).Error; err != nil {
		t.Fatal(err)
	}
	wrows, err := pgtest.Connect(t, plainDSN).Query(ctx, "SELECT "+storedCols+" FROM photos ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	wantStored, err := pgx.CollectRows(wrows, pgx.RowToStructByPos[storedPhoto])
	if err != nil {
		t.Fatal(err)
	}
	var got []storedPhoto
	for s := range e.shards {
		ps := e.shardPhotos(t, s)
		if s == badShard {
			if len(ps) != 1 || ps[0].ID != old.ID || ps[0].Caption != "old" {
				t.Fatalf("shard %d holds %+v, want only the row that was there", s, ps)
			}
			continue
		}
		got = append(got, ps...)
	}
	slices.SortFunc(got, func(a, b storedPhoto) int { return cmpInt(a.ID, b.ID) })
	if !reflect.DeepEqual(got, wantStored) {
		t.Fatalf("COPY stored %d rows, GORM Create %d; first difference: %s", len(got), len(wantStored), firstDiff(got, wantStored))
	}
	ids := map[int64]bool{}
	for _, p := range got {
		if ids[p.ID] {
			t.Fatalf("ID %d twice", p.ID)
		}
		ids[p.ID] = true
	}

	// Loading the failed part again, without the duplicate, finishes.
	var again []Photo
	for _, i := range failed[0].Index {
		if rows[i].Caption != "dup" {
			again = append(again, rows[i])
		}
	}
	rep, err = CopyFrom(ctx, db, &again)
	if err != nil || rep.Rows != int64(len(again)) || len(e.shardPhotos(t, badShard)) != len(again)+1 {
		t.Fatalf("reload of the failed part: %v, report %+v", err, rep)
	}
	e.defaultUntouched(t)
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func firstDiff(a, b []storedPhoto) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("%+v vs %+v", a[i], b[i])
		}
	}
	return "one is a prefix of the other"
}

// TestCopyFromMovedAndFenced: a part for a shard whose old home refuses
// writes (moved, the router's map not yet reloaded) is rolled back there
// and written on the new home; a part for a fenced shard waits for the
// fence while the other parts go on, then goes to the shard's home.
func TestCopyFromMovedAndFenced(t *testing.T) {
	e := newEnv(t, envOpts{shards: 4, cfg: func(c *Config) { c.FenceWait = time.Minute }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	load := func() []Photo {
		var rows []Photo
		for u := range int64(40) {
			rows = append(rows, Photo{UserID: u + 1, Caption: "f"})
		}
		return rows
	}
	check := func(t *testing.T, rep *CopyReport, rows []Photo) {
		t.Helper()
		for _, p := range rep.Parts {
			if p.State != CopyCommitted || p.Rows != 10 || p.Server != e.serverOf(t, p.Shard) {
				t.Fatalf("part %+v", p)
			}
		}
		e.holdsAll(t, rows)
	}

	t.Run("moved", func(t *testing.T) {
		const moved = 1
		from, to := e.moveByHand(t, moved, photoTables...)
		if e.serverOf(t, moved) != from {
			t.Fatal("router already knows the new map; the refusal would not be exercised")
		}
		rows := load()
		rep, err := CopyFrom(ctx, e.db, rows)
		if err != nil {
			t.Fatal(err)
		}
		if p := rep.Parts[moved]; p.Server != to {
			t.Fatalf("moved shard's part went to %s, want %s", p.Server, to)
		}
		check(t, rep, rows)
		for _, p := range rows {
			if e.shardOf(p.UserID) == moved {
				e.assertAt(t, "photos", p.ID, moved) // and not on the old home
			}
		}
	})

	t.Run("fenced", func(t *testing.T) {
		go func() { _ = e.r.Watch(ctx) }()
		const fenced = 2
		home := e.serverOf(t, fenced)
		before := make([]int, e.shards)
		for s := range before {
			before[s] = len(e.shardPhotos(t, s))
		}
		e.setShard(t, fenced, home, router.StateFenced)
		testkit.Eventually(t, testkit.Wait, func() bool { pl, _ := e.r.Snapshot().Placement(fenced); return pl.State == router.StateFenced })
		rows := load()
		done := make(chan struct{})
		var rep *CopyReport
		var err error
		go func() {
			defer close(done)
			rep, err = CopyFrom(ctx, e.db, rows)
		}()
		// Every other part is written while the fenced one waits.
		testkit.Eventually(t, testkit.Wait, func() bool {
			for s := range e.shards {
				if s != fenced && len(e.shardPhotos(t, s)) != before[s]+10 {
					return false
				}
			}
			return true
		})
		select {
		case <-done:
			t.Fatalf("CopyFrom returned while shard %d was fenced: %v", fenced, err)
		default:
		}
		if n := len(e.shardPhotos(t, fenced)); n != before[fenced] {
			t.Fatalf("fenced shard took %d rows", n-before[fenced])
		}
		e.setShard(t, fenced, home, router.StateActive)
		<-done
		if err != nil {
			t.Fatal(err)
		}
		check(t, rep, rows)
	})
}

// TestCopyFromNoIDSource: without an ID source every row takes its ID from
// its shard's next_id(), drawn in the part's transaction and filled in;
// what CopyFrom cannot do is a typed error before anything is written.
func TestCopyFromNoIDSource(t *testing.T) {
	e := newEnv(t, envOpts{shards: 4, one: true, noIDs: true})
	ctx := context.Background()
	layout := e.r.Snapshot().Layout
	type Unregistered struct{ ID int64 }
	cases := []struct {
		name string
		run  func() error
		want error
	}{
		{"unregistered model", func() error { _, err := CopyFrom(ctx, e.db, []Unregistered{{}}); return err }, ErrInvalidModel},
		{"not a slice", func() error { _, err := CopyFrom(ctx, e.db, &Photo{UserID: 1}); return err }, ErrUnroutableSQL},
		{"no shard key", func() error { _, err := CopyFrom(ctx, e.db, []Photo{{Caption: "x"}}); return err }, ErrMissingShardKey},
		{"ID of another shard", func() error {
			id, _ := layout.Compose(time.Now().UnixMilli(), 1, 0)
			_, err := CopyFrom(ctx, e.db, []Photo{{UserID: 1}, {ID: id, UserID: 2}})
			return err
		}, ErrIDShardMismatch},
		{"inside a transaction", func() error {
			return e.db.Clauses(Shard(1)).Transaction(func(tx *gorm.DB) error {
				_, err := CopyFrom(ctx, tx, []Photo{{UserID: 1}})
				return err
			})
		}, ErrUnroutableSQL},
		{"with Omit", func() error { _, err := CopyFrom(ctx, e.db.Omit("caption"), []Photo{{UserID: 1}}); return err }, ErrUnroutableSQL},
		{"no plugin", func() error {
			plain, _ := gorm.Open(postgres.New(postgres.Config{Conn: e.defPool}), &gorm.Config{})
			_, err := CopyFrom(ctx, plain, []Photo{{UserID: 1}})
			return err
		}, ErrInvalidConfig},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.run(); !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
		})
	}
	for s := range e.shards {
		if n := len(e.shardPhotos(t, s)); n != 0 {
			t.Fatalf("shard %d holds %d rows after refusals", s, n)
		}
	}

	rows := make([]*Photo, 20)
	for i := range rows {
		rows[i] = &Photo{UserID: int64(i + 1), Caption: "n"}
	}
	if _, err := CopyFrom(ctx, e.db, rows); err != nil {
		t.Fatal(err)
	}
	plain := make([]Photo, len(rows))
	for i, p := range rows {
		if p.ID == 0 {
			t.Fatalf("row %d has no ID", i)
		}
		plain[i] = *p
	}
	e.holdsAll(t, plain)
}

// TestCopyColumns: the columns COPY writes are those GORM's Create
// writes; a field with a database default is written only when set.
func TestCopyColumns(t *testing.T) {
	type Post struct {
		ID      int64
		UserID  int64  `shard:"key"`
		Title   string `gorm:"default:untitled"`
		Views   int    `gorm:"default:(-)"`
		Body    string
		Hidden  string `gorm:"<-:false"`
		Ignored string `gorm:"-"`
	}
	s, err := schema.Parse(&Post{}, &sync.Map{}, schema.NamingStrategy{})
	if err != nil {
		t.Fatal(err)
	}
	m := &model{schema: s, pk: s.PrioritizedPrimaryField}
	c, err := copyColumnsOf(m)
	if err != nil {
		t.Fatal(err)
	}
	names := func(fs []*schema.Field) (out []string) {
		for _, f := range fs {
			out = append(out, f.DBName)
		}
		return out
	}
	if got, want := names(c.fields), []string{"id", "user_id", "title", "body"}; !slices.Equal(got, want) {
		t.Fatalf("fields %v, want %v", got, want)
	}
	if got, want := names(c.optional), []string{"views"}; !slices.Equal(got, want) {
		t.Fatalf("optional %v, want %v", got, want)
	}
	ctx := context.Background()
	if c.mask(ctx, reflect.ValueOf(Post{Views: 3})) != 1 || c.mask(ctx, reflect.ValueOf(Post{})) != 0 {
		t.Fatal("mask does not follow the optional field")
	}
	if got := names(c.of(1)); !slices.Equal(got, []string{"id", "user_id", "title", "body", "views"}) {
		t.Fatalf("columns of mask 1: %v", got)
	}
}
