package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/internal/harness/pgbouncer"
	"github.com/shardkit/shardkit/internal/harness/pglocal"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/router"
)

// germanServer is pglocal's options for a cluster that answers in German:
// gettext takes LANGUAGE over lc_messages when lc_messages is not "C",
// and C.UTF-8 is a locale every glibc has, so no locale is generated.
var germanServer = pglocal.Options{
	Env:      []string{"LANGUAGE=de"},
	Settings: map[string]string{"lc_messages": "'C.UTF-8'"},
}

// mustSpeakGerman fails the test unless the server at dsn words its
// errors in German, which the tests of a non-English server rely on.
func mustSpeakGerman(t *testing.T, dsn string) {
	t.Helper()
	conn := pgtest.Connect(t, dsn)
	_, err := conn.Exec(context.Background(), "SELECT 1/0")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "22012" || strings.Contains(pe.Message, "division by zero") {
		t.Fatalf("SELECT 1/0 on the German server: %v; want SQLSTATE 22012 worded in German (are the Debian postgres message catalogs, /usr/share/locale/de/LC_MESSAGES/postgres-*.mo, installed?)", err)
	}
}

// TestStalePlanNonEnglishServer: a read across shards prepared on a
// server whose lc_messages is not English recovers from a column's type
// changed under its cached plan, as it does on an English one: the
// refusal is recognised by its SQLSTATE and the routine that raises it,
// not by its English wording.
func TestStalePlanNonEnglishServer(t *testing.T) {
	_, dsnOf := ownClusterForBWith(t, germanServer)
	e := newEnv(t, envOpts{dsnOf: dsnOf, cfg: func(c *Config) { c.MaxOpenConns = 1 }})
	mustSpeakGerman(t, e.dsn["b"])
	var rows []Photo
	for u := int64(1); u <= int64(e.shards); u++ {
		rows = append(rows, Photo{UserID: u, Caption: "c", Likes: int(u)})
	}
	if err := e.db.Create(&rows).Error; err != nil {
		t.Fatal(err)
	}
	onB := 0
	likesByID := map[int64]int{}
	for _, r := range rows {
		likesByID[r.ID] = r.Likes
		if e.serverOf(t, e.shardOf(r.UserID)) == "b" {
			onB++
		}
	}
	if onB == 0 {
		t.Fatal("no row on server b")
	}
	read := func() ([]map[string]any, error) {
		var out []map[string]any
		err := e.db.Model(&Photo{}).Clauses(AllShards()).Order("id").Find(&out).Error
		return out, err
	}
	if _, err := read(); err != nil {
		t.Fatal(err)
	}
	for _, s := range e.servers {
		e.rawExec(t, s, `DO $$
DECLARE s text;
BEGIN
  FOR s IN SELECT nspname FROM pg_namespace WHERE nspname LIKE 'shard\_%' LOOP
    EXECUTE format('ALTER TABLE %I.photos ALTER COLUMN likes TYPE bigint', s);
  END LOOP;
END $$`)
	}
	for round := range 2 {
		out, err := read()
		if err != nil {
			t.Fatalf("round %d: read after likes became bigint: %v", round, err)
		}
		if len(out) != len(rows) {
			t.Fatalf("round %d: %d rows, want %d", round, len(out), len(rows))
		}
		for i, r := range out {
			if fmt.Sprint(r["likes"]) != fmt.Sprint(likesByID[r["id"].(int64)]) {
				t.Fatalf("round %d: row %d: %v, want likes %d", round, i, r, likesByID[r["id"].(int64)])
			}
		}
	}
	// A one-shard read of server b, prepared by the driver's cache too.
	for round := range 2 {
		var ps []Photo
		u := rows[0].UserID
		for _, r := range rows {
			if e.serverOf(t, e.shardOf(r.UserID)) == "b" {
				u = r.UserID
			}
		}
		if err := e.db.Where("user_id = ?", u).Find(&ps).Error; err != nil || len(ps) != 1 {
			t.Fatalf("round %d: one-shard read on b: %d rows, %v", round, len(ps), err)
		}
	}
}

func TestPlanChanged(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"english", &pgconn.PgError{Code: "0A000", Message: "cached plan must not change result type", Routine: "RevalidateCachedQuery"}, true},
		{"german", &pgconn.PgError{Code: "0A000", Message: "gecachter Plan darf den Ergebnistyp nicht ändern", Routine: "RevalidateCachedQuery"}, true},
		{"wrapped", fmt.Errorf("read: %w", &pgconn.PgError{Code: "0A000", Message: "le plan mis en cache ne doit pas modifier le type en résultat", Routine: "RevalidateCachedQuery"}), true},
		{"no routine", &pgconn.PgError{Code: "0A000", Message: "cached plan must not change result type"}, true},
		{"other feature", &pgconn.PgError{Code: "0A000", Message: "nicht unterstützt", Routine: "transformSelectStmt"}, false},
		{"other code", &pgconn.PgError{Code: "42P01", Routine: "RevalidateCachedQuery"}, false},
		{"not a server error", errors.New("cached plan must not change result type"), false},
	} {
		if got := planChanged(c.err); got != c.want {
			t.Errorf("%s: planChanged = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestPipelineBoundExcludesCallerTime: the bound of a pipelined read is
// the server's time to answer, not the caller's time to merge an answer.
// The caller here takes each answer for longer than the bound (as a
// serial read's merge of a large answer may): every statement still
// answers with its rows, none with errBoundPassed, which would take a
// healthy server as down.
func TestPipelineBoundExcludesCallerTime(t *testing.T) {
	_, db := pipeDB(t, nil)
	const bound = time.Second
	var stmts []pipeStmt
	for i := range 3 {
		stmts = append(stmts, pipeStmt{sql: fmt.Sprintf(`SELECT a FROM t WHERE a > %d`, i)})
	}
	var got []pipeAnswer
	readPipelined(context.Background(), db, stmts, bound, func(i int, pt partials, err error) bool {
		got = append(got, pipeAnswer{i, pt, err})
		time.Sleep(bound + bound/2) // the caller's merge, longer than the bound
		return true
	})
	if len(got) != len(stmts) {
		t.Fatalf("%d answers, want %d: %+v", len(got), len(stmts), got)
	}
	for i, a := range got {
		if a.err != nil || len(a.pt.rows) != 10-i {
			t.Fatalf("answer %d: %d rows, %v; want %d rows", i, len(a.pt.rows), a.err, 10-i)
		}
	}
}

// plainPhotos is a database of one photos table and one likes table, as
// plain GORM sees them, holding the rows given: the oracle of a
// sharded read.
func plainPhotos(t *testing.T, photos []Photo, likes []Like) *gorm.DB {
	t.Helper()
	dsn := pgtest.NewDatabase(t, 0)
	pgtest.Exec(t, dsn, `CREATE TABLE photos (id bigint PRIMARY KEY, user_id bigint NOT NULL, caption text NOT NULL DEFAULT '',
		likes integer NOT NULL DEFAULT 0, version integer NOT NULL DEFAULT 0, created_at timestamptz NOT NULL DEFAULT now());
		CREATE TABLE likes (id bigint PRIMARY KEY, user_id bigint NOT NULL, photo_id bigint NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`)
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	})
	if err := db.Omit(clause.Associations).Create(&photos).Error; err != nil {
		t.Fatal(err)
	}
	if err := db.Omit(clause.Associations).Create(&likes).Error; err != nil {
		t.Fatal(err)
	}
	return db
}

// TestRowsWithJoinsOneShard: Row, Rows and Scan of one shard that join
// another table read the shard's table, as Find does, and answer what
// plain GORM answers on one table: the joined table resolves in the
// shard's schema, not in public.
func TestRowsWithJoinsOneShard(t *testing.T) {
	t.Run("direct", func(t *testing.T) { rowsWithJoinsOneShard(t, envOpts{}) })
	t.Run("PrepareStmt", func(t *testing.T) {
		rowsWithJoinsOneShard(t, envOpts{gorm: func(c *gorm.Config) { c.PrepareStmt = true }})
	})
	t.Run("pgbouncer", func(t *testing.T) {
		rowsWithJoinsOneShard(t, envOpts{appDSN: viaPooler(t, pgbouncer.Options{})})
	})
}

func rowsWithJoinsOneShard(t *testing.T, o envOpts) {
	e := newEnv(t, o)
	by := seed(t, e, []int64{9, 4}, 2)
	var likes []Like
	for _, u := range []int64{9, 4} {
		for _, p := range by[u] {
			for k := range 3 {
				likes = append(likes, Like{UserID: 50 + int64(k), PhotoID: p.ID})
			}
		}
	}
	if err := e.db.Create(&likes).Error; err != nil {
		t.Fatal(err)
	}
	plain := plainPhotos(t, append(append([]Photo{}, by[9]...), by[4]...), likes)
	pid := by[9][1].ID
	type likeCaption struct {
		ID      int64
		Caption string
	}
	reads := map[string]func(db *gorm.DB) (any, error){
		"Scan": func(db *gorm.DB) (any, error) {
			var out []likeCaption
			err := db.Model(&Like{}).Select("likes.id, photos.caption").Joins("JOIN photos ON photos.id = likes.photo_id").
				Where("photo_id = ?", pid).Order("likes.id").Scan(&out).Error
			return out, err
		},
		"Scan Joins relation": func(db *gorm.DB) (any, error) {
			var out []map[string]any
			err := db.Model(&Like{}).Select("likes.id", "likes.photo_id").Joins("Photo").
				Where("photo_id = ?", pid).Order("likes.id").Scan(&out).Error
			return out, err
		},
		"Rows": func(db *gorm.DB) (any, error) {
			rows, err := db.Model(&Like{}).Select("likes.id, photos.caption").Joins("JOIN photos ON photos.id = likes.photo_id").
				Where("photo_id = ?", pid).Order("likes.id").Rows()
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			var out []likeCaption
			for rows.Next() {
				var lc likeCaption
				if err := rows.Scan(&lc.ID, &lc.Caption); err != nil {
					return nil, err
				}
				out = append(out, lc)
			}
			return out, rows.Err()
		},
		"Row": func(db *gorm.DB) (any, error) {
			var n int64
			var caption string
			err := db.Model(&Like{}).Select("count(*), min(photos.caption)").Joins("JOIN photos ON photos.id = likes.photo_id").
				Where("photo_id = ?", pid).Row().Scan(&n, &caption)
			return fmt.Sprint(n, caption), err
		},
	}
	for name, read := range reads {
		want, err := read(plain)
		if err != nil {
			t.Fatalf("%s on plain GORM: %v", name, err)
		}
		got, err := read(e.db)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: got %v, plain GORM %v", name, got, want)
		}
	}
	e.defaultUntouched(t)
}

// Nick is a model keyed by a string, on a table whose key column each
// test gives its own type.
type Nick struct {
	ID   int64
	Name string `shard:"key"`
}

// TestCaseInsensitiveShardKeyRefused: the shard of a string key is a
// function of its bytes (router.HashString), so a key column that
// compares case-insensitively (citext, a nondeterministic collation)
// would put 'Alice' and 'alice', one key to Postgres, on two shards, and
// a read by either find only the rows of its own spelling. Such a model
// is refused when the plugin starts, with what to do; the same table with
// a text key starts.
func TestCaseInsensitiveShardKeyRefused(t *testing.T) {
	for _, c := range []struct {
		name, column string
		refused      bool
	}{
		{"citext", "public.citext", true},
		{"nondeterministic collation", `text COLLATE public.ci`, true},
		{"domain over citext", "public.nick_name", true},
		{"text", "text", false},
		{"text in ICU, deterministic", `text COLLATE "und-x-icu"`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, envOpts{shards: 4, before: func(e *env) {
				for _, srv := range e.servers {
					e.rawExec(t, srv, `CREATE EXTENSION IF NOT EXISTS citext SCHEMA public;
CREATE COLLATION IF NOT EXISTS public.ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
DO $$ BEGIN CREATE DOMAIN public.nick_name AS public.citext; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
DO $$
DECLARE s text;
BEGIN
  FOR s IN SELECT nspname FROM pg_namespace WHERE nspname LIKE 'shard\_%' LOOP
    EXECUTE format('CREATE TABLE %I.nicks (id bigint PRIMARY KEY, name `+c.column+` NOT NULL)', s);
  END LOOP;
END $$`)
				}
			}})
			db, err := gorm.Open(postgres.Open(e.def), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if sqlDB, err := db.DB(); err == nil {
					_ = sqlDB.Close()
				}
			})
			pl := Register(Config{Router: e.r, IDs: e.gen}, &Nick{})
			t.Cleanup(func() { _ = pl.Close() })
			err = db.Use(pl)
			if !c.refused {
				if err != nil {
					t.Fatalf("Use: %v", err)
				}
				if err := db.Create(&[]Nick{{Name: "Alice"}, {Name: "alice"}}).Error; err != nil {
					t.Fatal(err)
				}
				var hs []Nick
				if err := db.Where("name = ?", "alice").Find(&hs).Error; err != nil || len(hs) != 1 {
					t.Fatalf("read of one spelling: %v, %v", hs, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidModel) || !strings.Contains(err.Error(), "nicks.name") || !strings.Contains(err.Error(), "normalise") {
				t.Fatalf("Use: err = %v; want ErrInvalidModel naming nicks.name and saying to normalise the key", err)
			}
		})
	}
}

// Owner and Tag are a many-to-many association whose rows and join
// table live in the owner's shard: each keyed by its own ID, placed by
// the owner's scope.
type Owner struct {
	ID   int64 `shard:"id"`
	Name string
	Tags []Tag `gorm:"many2many:owner_tags"`
}

type Tag struct {
	ID    int64 `shard:"id"`
	Label string
}

const ownerTagsSQL = `DO $$
DECLARE s text;
BEGIN
  FOR s IN SELECT nspname FROM pg_namespace WHERE nspname LIKE 'shard\_%' LOOP
    EXECUTE format('CREATE TABLE %I.owners (id bigint PRIMARY KEY, name text NOT NULL DEFAULT '''')', s);
    EXECUTE format('CREATE TABLE %I.tags (id bigint PRIMARY KEY, label text NOT NULL DEFAULT '''')', s);
    EXECUTE format('CREATE TABLE %I.owner_tags (owner_id bigint NOT NULL, tag_id bigint NOT NULL, PRIMARY KEY (owner_id, tag_id))', s);
  END LOOP;
END $$`

// TestAssociationJoinsInFrom: GORM's many2many Association reads the
// associated table joined to the join table through a clause.From, not
// through Joins. On one shard the join table resolves in the shard's
// schema, and the read answers what plain GORM answers on one table;
// across shards, where no colocation can be proved, it is refused with
// ErrUnroutableSQL, not run against an unqualified join table.
func TestAssociationJoinsInFrom(t *testing.T) {
	t.Run("direct", func(t *testing.T) { associationJoinsInFrom(t, envOpts{}) })
	t.Run("pgbouncer", func(t *testing.T) {
		associationJoinsInFrom(t, envOpts{appDSN: viaPooler(t, pgbouncer.Options{})})
	})
}

func associationJoinsInFrom(t *testing.T, o envOpts) {
	o.shards, o.models = 4, []any{&Owner{}, &Tag{}}
	o.before = func(e *env) {
		for _, srv := range e.servers {
			e.rawExec(t, srv, ownerTagsSQL)
		}
	}
	e := newEnv(t, o)
	plainDSN := pgtest.NewDatabase(t, 0)
	pgtest.Exec(t, plainDSN, `CREATE TABLE owners (id bigint PRIMARY KEY, name text NOT NULL DEFAULT '');
		CREATE TABLE tags (id bigint PRIMARY KEY, label text NOT NULL DEFAULT '');
		CREATE TABLE owner_tags (owner_id bigint NOT NULL, tag_id bigint NOT NULL, PRIMARY KEY (owner_id, tag_id))`)
	plain, err := gorm.Open(postgres.Open(plainDSN), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := plain.DB(); err == nil {
			_ = sqlDB.Close()
		}
	})
	var owners []Owner
	for i := range 3 {
		o := Owner{Name: fmt.Sprint("o", i)}
		if err := e.db.Clauses(Shard(int64(i))).Omit(clause.Associations).Create(&o).Error; err != nil {
			t.Fatal(err)
		}
		tags := []Tag{{Label: fmt.Sprint("t", i, "a")}, {Label: fmt.Sprint("t", i, "b")}}
		if err := e.db.Clauses(ShardOfID(o.ID)).Create(&tags).Error; err != nil {
			t.Fatal(err)
		}
		shard, err := e.r.Snapshot().Layout.ShardOf(o.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, tg := range tags {
			e.rawExec(t, e.serverOf(t, shard), fmt.Sprintf("INSERT INTO %s.owner_tags VALUES ($1, $2)", router.SchemaName(shard)), o.ID, tg.ID)
			pgtest.Exec(t, plainDSN, "INSERT INTO owner_tags VALUES ($1, $2)", o.ID, tg.ID)
		}
		if err := plain.Omit(clause.Associations).Create(&o).Error; err != nil {
			t.Fatal(err)
		}
		if err := plain.Create(&tags).Error; err != nil {
			t.Fatal(err)
		}
		o.Tags = tags
		owners = append(owners, o)
	}
	for _, o := range owners {
		var want, got []Tag
		if err := plain.Model(&o).Order("id").Association("Tags").Find(&want); err != nil {
			t.Fatal(err)
		}
		if len(want) != 2 {
			t.Fatalf("plain GORM: %v", want)
		}
		if err := e.db.Clauses(ShardOfID(o.ID)).Model(&o).Order("id").Association("Tags").Find(&got); err != nil {
			t.Fatalf("Association Find on the owner's shard: %v", err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("Association Find on the owner's shard: %v, plain GORM %v", got, want)
		}
		var n int64
		if n = e.db.Clauses(ShardOfID(o.ID)).Model(&o).Association("Tags").Count(); n != 2 {
			t.Fatalf("Association Count on the owner's shard: %d, want 2", n)
		}
	}
	var all []Tag
	err = e.db.Clauses(AllShards()).Model(&owners[0]).Association("Tags").Find(&all)
	if !errors.Is(err, ErrUnroutableSQL) {
		t.Fatalf("Association Find across shards: %v, err %v; want ErrUnroutableSQL", all, err)
	}
}
