package plugin

import (
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm/schema"

	"github.com/shardkit/shardkit/router"
)

// Lookup tables: a column tagged shard:"lookup" (a username, an email) is
// unique across all shards, and a statement that names it by equality is
// routed to its owner's shard. shardkit keeps, per lookup column, a table
// <table>_<column>_lookup (value PRIMARY KEY, owner_id bigint) in every
// shard schema; the row for a value lives in the shard LookupShard gives,
// so lookup tables spread over the servers and move with their shards
// like any other per-shard table. The write order and the read-time
// checks that keep them consistent without two-phase commit are in
// lookupwrite.go; routing by them is in lookupread.go.

// errNoIDSource stands for a Config without IDs in assignRow.
var errNoIDSource = errors.New("no ID source")

// lookupCol is one lookup column of a model and its lookup table.
type lookupCol struct {
	field  *schema.Field
	column string // the owner table's column
	table  string // <table>_<column>_lookup
	text   bool   // text values; else bigint
	// quoted[i] is the lookup table in shard i, quoted.
	quoted []string
}

// maxIdent is Postgres's longest identifier (NAMEDATALEN - 1).
const maxIdent = 63

// LookupTable returns the name of the lookup table of a model's table
// and column: <table>_<column>_lookup. Create it in the per-shard SQL:
//
//	CREATE TABLE users_username_lookup (
//	    value    text PRIMARY KEY,   -- bigint for an integer column
//	    owner_id bigint NOT NULL
//	);
func LookupTable(table, column string) string { return table + "_" + column + "_lookup" }

// LookupShard returns the logical shard that holds the lookup row of a
// value: router.HashString of the value's canonical text (a string's
// UTF-8 bytes, an integer's decimal digits) mod the number of shards.
// HashString is 64-bit FNV-1a with the top bit cleared, fixed forever:
// changing it would strand every lookup row in the wrong shard.
func LookupShard(value any, shards int) (int, error) {
	key, err := canonical(value)
	if err != nil {
		return 0, err
	}
	return router.ShardOfString(key, shards)
}

// canonical returns the text a lookup value is hashed by.
func canonical(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.String:
		return rv.String(), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(rv.Int(), 10), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.FormatUint(rv.Uint(), 10), nil
	}
	return "", fmt.Errorf("%w: lookup value %v (%T) is neither a string nor an integer", ErrLookupUnroutable, v, v)
}

// newLookupCol checks a field tagged shard:"lookup" and names its table.
func newLookupCol(m *model, f *schema.Field, shards int) (*lookupCol, error) {
	t := f.FieldType
	if t.Kind() == reflect.Ptr {
		t = t.Elem()
	}
	lc := &lookupCol{field: f, column: f.DBName, table: LookupTable(m.table, f.DBName)}
	switch t.Kind() {
	case reflect.String:
		lc.text = true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32:
	default:
		return nil, fmt.Errorf("shard:\"lookup\" on a %s: want a string or an integer", f.FieldType)
	}
	if f.PrimaryKey {
		return nil, errors.New("shard:\"lookup\" on the primary key: IDs route by their own bits")
	}
	if len(lc.table) > maxIdent {
		return nil, fmt.Errorf("lookup table name %q is longer than Postgres's %d characters", lc.table, maxIdent)
	}
	lc.quoted = make([]string, shards)
	for i := range lc.quoted {
		lc.quoted[i] = pgx.Identifier{router.SchemaName(i), lc.table}.Sanitize()
	}
	return lc, nil
}

// lookupOf returns the lookup column a model column name is, or nil.
func (m *model) lookupOf(name string) *lookupCol {
	for _, lc := range m.lookups {
		if lc.column == name {
			return lc
		}
	}
	return nil
}

// valueOf reads a row's value of the lookup column: nil for a nil
// pointer (SQL NULL, which no lookup row holds), else a string or an
// int64.
func (lc *lookupCol) valueOf(rv reflect.Value, get func(reflect.Value) reflect.Value) any {
	v := get(rv)
	if v.Kind() == reflect.Ptr {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	return lc.normalize(v.Interface())
}

// normalize converts a value of the column (from a row or a condition)
// to the lookup table's type, or returns nil when it is not of it.
func (lc *lookupCol) normalize(v any) any {
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Ptr {
		if rv.IsNil() {
			return nil
		}
		rv = rv.Elem()
	}
	switch rv.Kind() {
	case reflect.String:
		if lc.text {
			return rv.String()
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if !lc.text {
			return rv.Int()
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if !lc.text && rv.Uint() <= 1<<63-1 {
			return int64(rv.Uint())
		}
	}
	return nil
}

// lookupPools are the lookup tables' own pools, apart from the
// statement pools, two per server: one for holds, one for claims,
// reclaims and clean-up. A hold keeps its connection across the owner
// row's write, and claims wait on holds (for the row's lock): sharing a
// pool, enough concurrent sign-ups could take every connection and wait
// for one forever. Holds wait only on statement pools and on holds of
// servers later in name order; claims wait on holds and statement pools.
type lookupPools struct {
	ps    *pools
	mu    sync.Mutex
	holds map[string]lookupPool
	other map[string]lookupPool
}

// lookupPool is a lookup pool and the DSN it was opened with.
type lookupPool struct {
	*sql.DB
	dsn string
}

func (lp *lookupPools) get(snap *router.Snapshot, name string, hold bool) (*sql.DB, error) {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	by := &lp.other
	if hold {
		by = &lp.holds
	}
	srv, inMap := snap.Server(name)
	if p, ok := (*by)[name]; ok && (!inMap || p.dsn == srv.DSN) {
		return p.DB, nil
	} else if ok {
		go p.DB.Close() // a new DSN in the map: statements on the old pool finish there
	}
	if !inMap {
		return nil, fmt.Errorf("%w: %q", router.ErrUnknownServer, name)
	}
	db, _, err := lp.ps.open(name, srv.DSN, srv.Primary)
	if err != nil {
		return nil, fmt.Errorf("shardkit: open server %s for lookups: %w", name, err)
	}
	if *by == nil {
		*by = map[string]lookupPool{}
	}
	(*by)[name] = lookupPool{DB: db, dsn: srv.DSN}
	return db, nil
}

func (lp *lookupPools) close() error {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	var errs []error
	for _, by := range []map[string]lookupPool{lp.holds, lp.other} {
		for _, db := range by {
			errs = append(errs, db.Close())
		}
	}
	lp.holds, lp.other = nil, nil
	return errors.Join(errs...)
}
