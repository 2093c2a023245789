package plugin

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/router"
)

// The typed differential: reads of a table that holds a column of each
// type Postgres gives (every one nullable, NULL in every column on some
// rows), through every destination GORM scans into (the model's pointer
// fields, plain fields, sql.Null*, a custom Scanner, string fields over
// non-text columns), with every limit GORM can express (Limit(-1),
// Limit(0), Offset alone, both), in each API shape a model uses (Find,
// First, Take, Last, Count, Pluck, Scan into maps and small structs, Row,
// Rows, Group/Having, Distinct, aggregates, Joins, Preload, Association),
// ordered by columns and expressions in either direction with NULLS
// FIRST/LAST. The oracle is the same as the photos' differential: plain
// GORM on one unsharded table holding the same rows; an outcome equals
// plain GORM's, or is a typed refusal.
//
//	go test ./plugin -run 'TestDifferentialTypes' -count=1
//	SHARDKIT_DIFF_N=20000 go test ./plugin -run 'TestDifferentialTypes' -count=1 -timeout 2h
//	SHARDKIT_DIFF_AXES=all go test ./plugin -run 'TestDifferentialTypes$' -count=1   # the known-broken axes too
//
// Classes of wrong answers known today are listed in knownBroken; their
// cases are skipped (and counted) unless SHARDKIT_DIFF_AXES names them.
// SHARDKIT_DIFF_PROBE=1 adds an axis per first order key, destination,
// spread and operation to the tallies, which tells a class apart when
// the failing cases' axes are read beside the covered ones.

// Thing is the typed differential's model: a column of each type, read
// into pointer fields.
type Thing struct {
	ID     int64
	UserID int64      `shard:"key"`
	B      *bool      `gorm:"column:b"`
	I2     *int16     `gorm:"column:i2"`
	I4     *int32     `gorm:"column:i4"`
	I8     *int64     `gorm:"column:i8"`
	Num    *float64   `gorm:"column:num"`
	F4     *float32   `gorm:"column:f4"`
	F8     *float64   `gorm:"column:f8"`
	TC     *string    `gorm:"column:tc"`
	TICU   *string    `gorm:"column:ticu"`
	TND    *string    `gorm:"column:tnd"`
	VC     *string    `gorm:"column:vc"`
	CI     *string    `gorm:"column:ci"`
	Tone   *string    `gorm:"column:tone"`
	U      *string    `gorm:"column:u"`
	D      *time.Time `gorm:"column:d"`
	TS     *time.Time `gorm:"column:ts"`
	TSTZ   *time.Time `gorm:"column:tstz"`
	IV     *string    `gorm:"column:iv"`
	IP     *string    `gorm:"column:ip"`
	J      *string    `gorm:"column:j"`
	Bin    []byte     `gorm:"column:bin"`
	IA     *string    `gorm:"column:ia"`
	TA     *string    `gorm:"column:ta"`
	Tags   []ThingTag `gorm:"foreignKey:ThingID"`
}

// ThingTag lives in its thing's shard: has-many of Thing (Preload,
// Association), belongs-to Thing (Joins).
type ThingTag struct {
	ID      int64
	UserID  int64
	ThingID int64   `shard:"id"`
	Tag     *string `gorm:"column:tag"`
	Thing   *Thing
}

// Mood holds a per-schema enum: the shard SQL creates type mood in each
// schema, so each shard's column has a type of its own.
type Mood struct {
	ID     int64
	UserID int64   `shard:"key"`
	Mood   *string `gorm:"column:mood"`
	N      *int32  `gorm:"column:n"`
}

// commonTypesDDL runs once per database: the extension, the shared enum
// and the nondeterministic collation live outside the shard schemas.
const commonTypesDDL = `CREATE EXTENSION IF NOT EXISTS citext;
CREATE SCHEMA IF NOT EXISTS common;
CREATE TYPE common.tone AS ENUM ('low', 'mid', 'high');
CREATE COLLATION common.nd (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
`

// thingsDDL is the typed tables of one schema (the shard's search_path,
// or the plain side's public).
const thingsDDL = `CREATE TABLE things (
    id bigint PRIMARY KEY, user_id bigint NOT NULL,
    b boolean, i2 smallint, i4 integer, i8 bigint, num numeric, f4 real, f8 double precision,
    tc text COLLATE "C", ticu text COLLATE "en-US-x-icu", tnd text COLLATE common.nd, vc varchar(20), ci public.citext,
    tone common.tone, u uuid, d date, ts timestamp, tstz timestamptz, iv interval, ip inet, j jsonb, bin bytea,
    ia integer[], ta text[]
);
CREATE TABLE thing_tags (id bigint PRIMARY KEY, user_id bigint NOT NULL, thing_id bigint NOT NULL, tag text);
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE moods (id bigint PRIMARY KEY, user_id bigint NOT NULL, mood mood, n integer);
`

// tcol is a column of things: its SQL literals for the seed, in turn
// ("NULL" among them), and how its values compare (loose: equal values
// may print apart, 'Alice' and 'alice' under a case-insensitive
// collation, so a group's or distinct value prints folded).
type tcol struct {
	name  string
	axis  string // the column-type axis
	vals  []string
	loose bool
	sum   bool // sum() applies
}

var thingCols = []tcol{
	{name: "b", axis: "bool", vals: []string{"true", "false", "NULL", "false", "true"}},
	{name: "i2", axis: "int2", vals: []string{"3", "-1", "32767", "0", "NULL", "3"}, sum: true},
	{name: "i4", axis: "int4", vals: []string{"10", "-5", "7", "NULL", "100", "10", "2"}, sum: true},
	{name: "i8", axis: "int8", vals: []string{"9000000000", "-1", "5", "NULL", "42", "5"}, sum: true},
	{name: "num", axis: "numeric", vals: []string{"9.5", "100.5", "-3.25", "NULL", "0", "12345678901234567890.123", "'NaN'", "2.50"}, sum: true},
	{name: "f4", axis: "float4", vals: []string{"1.5", "'NaN'", "'-Infinity'", "NULL", "0.25", "3"}, sum: true},
	{name: "f8", axis: "float8", vals: []string{"2.5", "'Infinity'", "'NaN'", "NULL", "-0", "1e300", "-7.125"}, sum: true},
	{name: "tc", axis: "text-C", vals: []string{"'b'", "'B'", "'a'", "'é'", "NULL", "'ab'", "''"}},
	{name: "ticu", axis: "text-icu", vals: []string{"'cat'", "'Cat'", "'éclair'", "'eclair'", "NULL", "'b'", "'B'", "'a-b'", "'ab'"}},
	{name: "tnd", axis: "text-nondeterministic", vals: []string{"'Alice'", "'alice'", "'Bob'", "NULL", "'ALICE'", "'bob'", "'carl'"}, loose: true},
	{name: "vc", axis: "varchar", vals: []string{"'x'", "'Y'", "'x '", "NULL", "'10'", "'9'"}},
	{name: "ci", axis: "citext", vals: []string{"'Alice'", "'alice'", "'bob'", "NULL", "'Bob'", "'Zed'"}, loose: true},
	{name: "tone", axis: "enum-shared", vals: []string{"'high'", "'low'", "'mid'", "NULL", "'low'"}},
	{name: "u", axis: "uuid", vals: []string{"'ffffffff-0000-0000-0000-000000000001'", "'00000000-0000-0000-0000-000000000002'", "NULL", "'a0000000-0000-0000-0000-000000000000'"}},
	{name: "d", axis: "date", vals: []string{"'2020-01-02'", "'1999-12-31'", "NULL", "'2020-01-02'", "'2031-07-04'"}},
	{name: "ts", axis: "timestamp", vals: []string{"'2020-01-02 03:04:05.123456'", "'1999-12-31 23:59:59'", "NULL", "'2020-01-02 03:04:05'", "'2020-01-02 03:04:05.5'"}},
	{name: "tstz", axis: "timestamptz", vals: []string{"'2020-01-02 03:04:05+00'", "'2020-01-02 03:04:05+05'", "NULL", "'1970-01-01 00:00:00+00'", "'2020-01-01 23:04:05-01'"}},
	{name: "iv", axis: "interval", vals: []string{"'1 day'", "'25:00:00'", "'1 mon'", "'29 days'", "NULL", "'-01:00:00'", "'00:00:01.5'"}},
	{name: "ip", axis: "inet", vals: []string{"'10.0.0.1'", "'9.0.0.1'", "'192.168.0.0/16'", "'::1'", "NULL", "'10.0.0.10'"}},
	{name: "j", axis: "jsonb", vals: []string{`'{"a": 1}'`, "'[1, 2]'", `'"s"'`, "'null'", "NULL", `'{"b": [true]}'`, "'2'"}},
	{name: "bin", axis: "bytea", vals: []string{`'\x00ff'`, `'\x'`, "NULL", `'\x61'`, `'\xff'`}},
	{name: "ia", axis: "array-int", vals: []string{"'{1,2}'", "'{}'", "NULL", "'{3}'", "'{1,NULL}'", "'{10}'"}},
	{name: "ta", axis: "array-text", vals: []string{"'{a,b}'", "'{B}'", "NULL", "'{}'", `'{"x y"}'`}},
}

// thingExprs are ORDER BY expressions: the type they yield is not the
// column's, or is text on a model whose merge must follow it.
var thingExprs = []struct{ sql, axis string }{
	{"lower(ticu)", "text-icu"}, {"num * 2", "numeric"}, {"coalesce(i4, 0)", "int4"}, {"length(tc)", "int4"},
	{"tc || ''", "text-C"}, {"ticu || 'x'", "text-icu"}, {"-i8", "int8"}, {"d + 1", "date"}, {"iv * 2", "interval"},
	{"upper(ci)", "citext"}, {"host(ip)", "inet"}, {"j->>'a'", "jsonb"}, {"i2::text", "text-default"}, {"cardinality(ia)", "array-int"},
}

func thingCol(name string) tcol {
	for _, c := range thingCols {
		if c.name == name {
			return c
		}
	}
	return tcol{name: name, axis: name}
}

// top is the GORM call a typed case ends with.
type top uint8

const (
	tFind top = iota
	tFirst
	tTake
	tLast
	tCount
	tPluck
	tScanMaps
	tScanSmall
	tRows
	tRow
	tGroup
	tDistinct
	tAgg
	tJoins
	tPreload
	tAssoc
	numTOps
)

var topNames = [...]string{"find", "first", "take", "last", "count", "pluck", "scan-maps", "scan-small", "rows", "row", "group", "distinct", "aggregate", "joins", "preload", "association"}

func (o top) String() string { return topNames[o] }

// tdest is the Go type a typed case scans a column into.
type tdest uint8

const (
	dsModel   tdest = iota // Thing: pointer fields
	dsPlain                // plain fields (NULL reads as zero)
	dsNull                 // sql.Null*
	dsScanner              // a custom Scanner/Valuer
	dsString               // string over every column
	numDests
)

var destNames = [...]string{"pointer", "plain", "sql.Null", "scanner", "string"}

// twhere is a typed case's condition.
type twhere struct {
	Kind  uint8 // 0 none, 1 user_id IN, 2 col IS NULL, 3 col IS NOT NULL, 4 user_id = ?
	Users []int64
	Col   string
}

// tcase is one typed statement.
type tcase struct {
	Moods     bool // on Mood (the per-schema enum) instead of Thing
	Op        top
	Dest      tdest
	All       bool
	Where     twhere
	Order     []string // ORDER BY items; a trailing "id"/"id desc" makes it total
	Limit     int
	HasLimit  bool
	Offset    int
	HasOffset bool
	Col       string // pluck, scan, row, group, distinct, aggregate: the column
	Having    bool
	Unordered bool // group, distinct: without the Order by the column
	Thing     int  // association: the seeded thing's index
	Batch     int  // the plugin's union batch (shards per statement), 0: its default
	ICU       bool // the databases' default collation is ICU (TestDifferentialTypesICU)
}

// tseed is what the typed generator picks from.
type tseed struct {
	users  []int64
	things []Thing // ID and UserID of the seeded things
}

type tgen struct {
	c chooser
	s *tseed
}

func (g *tgen) pick(n int) int { return g.c.intn(n) }

func (g *tgen) users() []int64 {
	n := 2 + g.pick(4)
	out := make([]int64, n)
	for i := range out {
		out[i] = g.s.users[g.pick(len(g.s.users))]
	}
	return out
}

func (g *tgen) col() string {
	if g.pick(6) == 0 {
		return "id"
	}
	return thingCols[g.pick(len(thingCols))].name
}

// orderItem is a column or expression, a direction, and NULLS FIRST/LAST.
func (g *tgen) orderItem(moods bool) string {
	var s string
	switch {
	case moods:
		s = []string{"mood", "n", "mood::text"}[g.pick(3)]
	case g.pick(4) == 0:
		s = thingExprs[g.pick(len(thingExprs))].sql
	default:
		s = thingCols[g.pick(len(thingCols))].name
	}
	s += []string{"", " desc", " asc"}[g.pick(3)]
	s += []string{"", "", " nulls first", " nulls last"}[g.pick(4)]
	return s
}

func (g *tgen) tcase() tcase {
	c := tcase{Op: top(g.pick(int(numTOps))), Dest: tdest(g.pick(int(numDests)))}
	c.All = g.pick(3) != 0
	switch g.pick(6) {
	case 0, 1:
		if !c.All {
			c.Where = twhere{Kind: 4, Users: []int64{g.s.users[g.pick(len(g.s.users))]}}
		}
	case 2, 3:
		c.Where = twhere{Kind: 1, Users: g.users()}
	case 4:
		c.Where = twhere{Kind: 2, Col: thingCols[g.pick(len(thingCols))].name}
	case 5:
		c.Where = twhere{Kind: 3, Col: thingCols[g.pick(len(thingCols))].name}
	}
	if !c.All && c.Where.Kind != 1 && c.Where.Kind != 4 {
		c.All = true
	}
	c.Col = g.col()
	if g.pick(5) == 0 && c.Op != tJoins && c.Op != tPreload && c.Op != tAssoc && c.Op != tAgg && c.Op != tRow {
		c.Moods = true
		c.Col = []string{"mood", "n"}[g.pick(2)]
		if c.Where.Kind >= 2 && c.Where.Kind <= 3 {
			c.Where.Col = "mood"
		}
	}
	switch c.Op {
	case tFind, tFirst, tLast, tPluck, tScanMaps, tScanSmall, tRows, tJoins, tPreload:
		if g.pick(5) != 0 {
			for range 1 + g.pick(2) {
				c.Order = append(c.Order, g.orderItem(c.Moods))
			}
			switch g.pick(5) {
			case 0:
			case 1:
				c.Order = append(c.Order, "id desc")
			default:
				c.Order = append(c.Order, "id")
			}
		}
	}
	switch c.Op {
	case tFind, tPluck, tScanMaps, tScanSmall, tRows, tGroup, tDistinct, tJoins, tPreload:
		switch g.pick(6) {
		case 1:
			c.HasLimit, c.Limit = true, -1
		case 2:
			c.HasLimit, c.Limit = true, 0
		case 3, 4:
			c.HasLimit, c.Limit = true, 1+g.pick(8)
		}
		if g.pick(3) == 0 {
			c.HasOffset, c.Offset = true, []int{0, 1, 3, 7, 40}[g.pick(5)]
		}
	}
	if c.Op == tGroup {
		c.Having = g.pick(3) == 0
	}
	if c.Op == tGroup || c.Op == tDistinct {
		c.Unordered = g.pick(3) == 0
	}
	if c.Op == tAssoc {
		c.Thing = g.pick(len(g.s.things))
		c.All, c.Where = false, twhere{}
	}
	return c
}

// axes names what a case exercises, for the known-broken list and the
// tallies.
func (c tcase) axes() []string {
	out := []string{"op:" + c.Op.String(), "dest:" + destNames[c.Dest]}
	if c.Moods {
		out = append(out, "type:enum-per-schema")
	} else if c.Col != "" {
		out = append(out, "type:"+thingCol(c.Col).axis)
	}
	if c.HasLimit {
		out = append(out, fmt.Sprintf("limit:%d", max(-1, min(c.Limit, 1))))
	}
	if c.HasOffset {
		out = append(out, "offset")
	}
	if len(c.Order) > 0 && os.Getenv("SHARDKIT_DIFF_PROBE") != "" {
		out = append(out, "probe:"+orderAxis(c.Order[0])+"/"+destNames[c.Dest]+"/"+fmt.Sprint(c.crossShard())+"/"+c.Op.String())
	}
	for _, o := range c.Order {
		out = append(out, "order:"+orderAxis(o))
		if strings.Contains(o, "nulls") {
			out = append(out, "order:nulls")
		}
	}
	return out
}

func orderAxis(o string) string {
	key := strings.Fields(o)[0]
	for _, e := range thingExprs {
		if strings.HasPrefix(o, e.sql) {
			return "expr-" + e.axis
		}
	}
	if key == "mood" {
		return "enum-per-schema"
	}
	return thingCol(key).axis
}

// code prints the case as the GORM chain that runs it.
func (c tcase) code() string {
	var ch chain
	c.build(&ch)
	return ch.text.String()
}

// ordered reports whether rows compare in order, and exact whether they
// must be equal (else a same-sized part of the unlimited answer).
func (c tcase) ordered() (ordered, exact bool) {
	total := false
	switch c.Op {
	case tFirst, tLast, tCount, tRow, tAgg, tAssoc:
		total = true
	case tGroup, tDistinct:
		total = !c.Unordered // ordered by the grouped column
	default:
		if n := len(c.Order); n > 0 {
			last := c.Order[n-1]
			total = last == "id" || last == "id desc"
		}
	}
	limited := c.HasLimit && c.Limit >= 0 || c.HasOffset && c.Offset > 0 || c.Op == tTake
	return total, total || !limited
}

// tvals prints each value of a struct's fields, in field order.
func tvals(v reflect.Value, fold map[string]bool) string {
	var b strings.Builder
	t := v.Type()
	for i := range v.NumField() {
		f := t.Field(i)
		if f.Name == "Tags" || f.Name == "Thing" {
			continue
		}
		s := tval(v.Field(i).Interface())
		if fold[strings.ToLower(f.Name)] {
			s = strings.ToLower(s)
		}
		fmt.Fprintf(&b, "%s=%s ", strings.ToLower(f.Name), s)
	}
	return strings.TrimSpace(b.String())
}

// tval prints a value with its Go type: a merge that hands a field or
// map another type than plain GORM's is a difference.
func tval(x any) string {
	switch v := x.(type) {
	case nil:
		return "nil"
	case time.Time:
		return "time:" + v.UTC().Format(time.RFC3339Nano)
	case []byte:
		if v == nil {
			return "[]byte(nil)"
		}
		return fmt.Sprintf("[]byte:%x", v)
	case float64:
		return "float64:" + floatText(&v)
	case float32:
		f := float64(v)
		return "float32:" + floatText(&f)
	case rawVal:
		return "raw:" + v.s
	case *rawVal:
		return "raw:" + v.s
	case driver.Valuer:
		if rv := reflect.ValueOf(x); rv.Kind() == reflect.Ptr && rv.IsNil() {
			return "nil"
		}
		dv, err := v.Value()
		if err != nil {
			return "valuer-error:" + err.Error()
		}
		return fmt.Sprintf("%T(%s)", x, tval(dv))
	}
	rv := reflect.ValueOf(x)
	if rv.Kind() == reflect.Ptr {
		if rv.IsNil() {
			return "nil"
		}
		return "*" + tval(rv.Elem().Interface())
	}
	return fmt.Sprintf("%T:%v", x, x)
}

// rawVal is a custom Scanner/Valuer: it keeps what the driver handed it,
// with its type.
type rawVal struct{ s string }

func (r *rawVal) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		r.s = "NULL"
	case []byte:
		r.s = fmt.Sprintf("[]byte:%q", v)
	case time.Time:
		r.s = "time:" + v.UTC().Format(time.RFC3339Nano)
	case float64:
		r.s = "float64:" + floatText(&v)
	default:
		r.s = fmt.Sprintf("%T:%v", src, src)
	}
	return nil
}

func (r rawVal) Value() (driver.Value, error) {
	if r.s == "NULL" {
		return nil, nil
	}
	return r.s, nil
}

// The destination variants of Thing (and Mood), read with
// Model(&Thing{}): GORM selects the destination's fields. They are built
// by reflection, one struct type per destination with a field per column
// of the Go type the destination gives it.
var thingDestTypes = func() [numDests]reflect.Type {
	var out [numDests]reflect.Type
	for d := range numDests {
		if d == dsModel {
			out[d] = reflect.TypeFor[Thing]()
			continue
		}
		out[d] = thingVariant(d, thingCols)
	}
	return out
}()

var moodDestTypes = func() [numDests]reflect.Type {
	var out [numDests]reflect.Type
	cols := []tcol{{name: "mood", axis: "enum-per-schema"}, {name: "n", axis: "int4"}}
	for d := range numDests {
		if d == dsModel {
			out[d] = reflect.TypeFor[Mood]()
			continue
		}
		out[d] = thingVariant(d, cols)
	}
	return out
}()

// goTypeOf is the Go type a destination gives a column.
func goTypeOf(d tdest, col string) reflect.Type {
	model := reflect.TypeFor[Thing]()
	if col == "mood" || col == "n" {
		model = reflect.TypeFor[Mood]()
	}
	var ft reflect.Type
	for i := range model.NumField() {
		f := model.Field(i)
		if f.Tag.Get("gorm") == "column:"+col {
			ft = f.Type
		}
	}
	if col == "id" {
		ft = reflect.TypeFor[*int64]()
	}
	if ft == nil {
		panic("no column " + col)
	}
	switch d {
	case dsModel:
		return ft
	case dsString:
		return reflect.TypeFor[string]()
	case dsScanner:
		return reflect.TypeFor[rawVal]()
	case dsPlain:
		if ft.Kind() == reflect.Ptr {
			return ft.Elem()
		}
		return ft
	}
	// sql.Null*
	if ft.Kind() == reflect.Slice {
		return ft
	}
	switch ft.Elem().Kind() {
	case reflect.Bool:
		return reflect.TypeFor[sql.NullBool]()
	case reflect.Int16:
		return reflect.TypeFor[sql.NullInt16]()
	case reflect.Int32:
		return reflect.TypeFor[sql.NullInt32]()
	case reflect.Int64:
		return reflect.TypeFor[sql.NullInt64]()
	case reflect.Float32, reflect.Float64:
		return reflect.TypeFor[sql.NullFloat64]()
	case reflect.Struct:
		return reflect.TypeFor[sql.NullTime]()
	}
	return reflect.TypeFor[sql.NullString]()
}

func thingVariant(d tdest, cols []tcol) reflect.Type {
	fields := []reflect.StructField{
		{Name: "ID", Type: reflect.TypeFor[int64]()},
		{Name: "UserID", Type: reflect.TypeFor[int64]()},
	}
	for _, c := range cols {
		fields = append(fields, reflect.StructField{Name: "X" + strings.ToUpper(c.name), Type: goTypeOf(d, c.name), Tag: reflect.StructTag(`gorm:"column:` + c.name + `"`)})
	}
	return reflect.StructOf(fields)
}

// typedEnv is the typed differential's two sides.
type typedEnv struct {
	e     *env
	plain *gorm.DB
	seed  *tseed
	stats map[string]int
	icu   bool // every database's default collation is ICU
}

// createThings adds the typed tables to every shard schema of every
// server (and the common types to each database), before the plugin
// checks its models.
func createThings(t testing.TB, e *env) {
	t.Helper()
	ctx := context.Background()
	for _, srv := range e.servers {
		conn := pgtest.Connect(t, e.dsn[srv])
		rows, err := conn.Query(ctx, `SELECT table_schema FROM information_schema.tables WHERE table_name = 'photos' ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		schemas, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		b.WriteString(commonTypesDDL)
		for _, s := range schemas {
			b.WriteString("SET search_path = " + pgx.Identifier{s}.Sanitize() + ";\n" + thingsDDL)
		}
		b.WriteString("RESET search_path;\n")
		if _, err := conn.Exec(ctx, b.String(), pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("create things on %s: %v", srv, err)
		}
	}
}

// newTypedEnv makes both sides and seeds them with the same rows, with
// direct SQL: IDs composed for each row's shard.
func newTypedEnv(t testing.TB, adjust func(*envOpts)) *typedEnv {
	return newTypedEnvOn(t, adjust, nil)
}

// newTypedEnvOn is newTypedEnv with the plain side's database made by
// plain (nil: one of cluster 0, ICU's where adjust gives the servers
// databases of their own).
func newTypedEnvOn(t testing.TB, adjust func(*envOpts), plain func() string) *typedEnv {
	t.Helper()
	ctx := context.Background()
	o := envOpts{shards: diffShards, models: []any{&Thing{}, &ThingTag{}, &Mood{}}, before: func(e *env) { createThings(t, e) }}
	if adjust != nil {
		adjust(&o)
	}
	te := &typedEnv{e: newEnv(t, o), seed: &tseed{}, stats: map[string]int{}, icu: o.dsnOf != nil && plain == nil}
	layout := te.e.r.Snapshot().Layout
	var plainDSN string
	switch {
	case plain != nil:
		plainDSN = plain()
	case te.icu:
		plainDSN = icuDatabase(t, 0)
	default:
		plainDSN = pgtest.NewDatabase(t, 0)
	}
	pgtest.Exec(t, plainDSN, commonTypesDDL+thingsDDL)
	var err error
	te.plain, err = gorm.Open(postgres.Open(plainDSN), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	if sqlDB, err := te.plain.DB(); err == nil {
		t.Cleanup(func() { _ = sqlDB.Close() })
	}

	// 22 users on shards of both servers (two pairs share a shard), 1-3
	// things each; column c of row n takes value (n + c) of its list, so
	// NULLs fall on different rows in each column.
	for i := range 20 {
		te.seed.users = append(te.seed.users, 1000+37*int64(i))
	}
	te.seed.users = append(te.seed.users, te.seed.users[0]+diffShards, te.seed.users[7]+2*diffShards)
	bySchema := map[string]*strings.Builder{}
	var plainSQL strings.Builder
	add := func(schema, stmt string) {
		if bySchema[schema] == nil {
			bySchema[schema] = &strings.Builder{}
		}
		bySchema[schema].WriteString(strings.ReplaceAll(stmt, "@", pgx.Identifier{schema}.Sanitize()+"."))
		plainSQL.WriteString(strings.ReplaceAll(stmt, "@", ""))
	}
	n := 0
	for i, u := range te.seed.users {
		shard := int(u % diffShards)
		schema := router.SchemaName(shard)
		for range 1 + i%3 {
			id, err := layout.Compose(diffEpoch.UnixMilli(), shard, 1+n)
			if err != nil {
				t.Fatal(err)
			}
			te.seed.things = append(te.seed.things, Thing{ID: id, UserID: u})
			cols, vals := []string{"id", "user_id"}, []string{fmt.Sprint(id), fmt.Sprint(u)}
			for j, c := range thingCols {
				cols, vals = append(cols, c.name), append(vals, c.vals[(n+j)%len(c.vals)])
			}
			add(schema, fmt.Sprintf("INSERT INTO @things (%s) VALUES (%s);\n", strings.Join(cols, ", "), strings.Join(vals, ", ")))
			for k := range n % 3 {
				tag := []string{"'red'", "'Blue'", "NULL", "'green'"}[(n+k)%4]
				add(schema, fmt.Sprintf("INSERT INTO @thing_tags VALUES (%d, %d, %d, %s);\n", id+int64(k)+1<<9, u, id, tag))
			}
			mood := []string{"'happy'", "'sad'", "NULL", "'ok'", "'sad'"}[n%5]
			nv := []string{"1", "NULL", "3", "2", "-4"}[n%5]
			add(schema, fmt.Sprintf("INSERT INTO @moods VALUES (%d, %d, %s, %s);\n", id, u, mood, nv))
			n++
		}
	}
	snap := te.e.r.Snapshot()
	byServer := map[string]*strings.Builder{}
	for schema, b := range bySchema {
		var shard int
		if _, err := fmt.Sscanf(schema, "shard_%d", &shard); err != nil {
			t.Fatal(err)
		}
		pl, err := snap.Placement(shard)
		if err != nil {
			t.Fatal(err)
		}
		if byServer[pl.Server] == nil {
			byServer[pl.Server] = &strings.Builder{}
		}
		byServer[pl.Server].WriteString(b.String())
	}
	for srv, b := range byServer {
		if _, err := pgtest.Connect(t, te.e.dsn[srv]).Exec(ctx, b.String(), pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatalf("seed %s: %v", srv, err)
		}
	}
	if _, err := pgtest.Connect(t, plainDSN).Exec(ctx, plainSQL.String(), pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("seed plain: %v", err)
	}
	return te
}

// build applies the case to ch (running it when ch.q is set) and returns
// the outcome.
func (c tcase) build(ch *chain) result {
	ch.text.WriteString("db")
	if c.All {
		ch.do("Clauses(AllShards())", func(q *gorm.DB) *gorm.DB { return q.Clauses(AllShards()) })
	}
	model, mname := any(&Thing{}), "Thing"
	dests := thingDestTypes
	if c.Moods {
		model, mname, dests = &Mood{}, "Mood", moodDestTypes
	}
	switch c.Op {
	case tJoins:
		ch.do(`Joins("Thing")`, func(q *gorm.DB) *gorm.DB { return q.Joins("Thing") })
	case tPreload:
		ch.do(`Preload("Tags")`, func(q *gorm.DB) *gorm.DB { return q.Preload("Tags") })
	case tAssoc:
	default:
		ch.do("Model(&"+mname+"{})", func(q *gorm.DB) *gorm.DB { return q.Model(model) })
	}
	col := c.Col
	qcol := col // qualified where a join makes a name ambiguous
	if c.Op == tJoins {
		qcol = "thing_tags." + col
	}
	switch c.Where.Kind {
	case 1:
		us := c.Where.Users
		w := "user_id IN ?"
		if c.Op == tJoins {
			w = "thing_tags.user_id IN ?"
		}
		ch.do(fmt.Sprintf("Where(%q, []int64{%s})", w, goList(us)), func(q *gorm.DB) *gorm.DB { return q.Where(w, us) })
	case 2, 3:
		w := c.Where.Col + " IS NULL"
		if c.Where.Kind == 3 {
			w = c.Where.Col + " IS NOT NULL"
		}
		if c.Op == tJoins {
			w = `"Thing".` + w
		}
		ch.do(fmt.Sprintf("Where(%q)", w), func(q *gorm.DB) *gorm.DB { return q.Where(w) })
	case 4:
		u := c.Where.Users[0]
		w := "user_id = ?"
		if c.Op == tJoins {
			w = "thing_tags.user_id = ?"
		}
		ch.do(fmt.Sprintf("Where(%q, %d)", w, u), func(q *gorm.DB) *gorm.DB { return q.Where(w, u) })
	}
	// A group's, a distinct value's or an aggregate's value of a column
	// whose equal values print apart ('Alice', 'alice') is one of them,
	// whichever Postgres meets first: it prints folded.
	fold := map[string]bool{}
	if (c.Op == tGroup || c.Op == tDistinct || c.Op == tAgg) && thingCol(col).loose {
		fold[col], fold["lo"], fold["hi"] = true, true, true
	}
	switch c.Op {
	case tGroup:
		sel := col + ", count(*) AS n"
		ch.do(fmt.Sprintf("Select(%q).Group(%q)", sel, col), func(q *gorm.DB) *gorm.DB { return q.Select(sel).Group(col) })
		if c.Having {
			ch.do(`Having("count(*) > ?", 1)`, func(q *gorm.DB) *gorm.DB { return q.Having("count(*) > ?", 1) })
		}
		if !c.Unordered {
			o := col + " desc nulls last"
			ch.do(fmt.Sprintf("Order(%q)", o), func(q *gorm.DB) *gorm.DB { return q.Order(o) })
		}
	case tDistinct:
		ch.do(fmt.Sprintf("Distinct(%q)", col), func(q *gorm.DB) *gorm.DB { return q.Distinct(col) })
		if !c.Unordered {
			ch.do(fmt.Sprintf("Order(%q)", col), func(q *gorm.DB) *gorm.DB { return q.Order(col) })
		}
	case tAgg:
		sel := fmt.Sprintf("min(%s) AS lo, max(%s) AS hi, count(%s) AS n, count(*) AS c", col, col, col)
		if thingCol(col).sum {
			sel += fmt.Sprintf(", sum(%s) AS s", col)
		}
		ch.do(fmt.Sprintf("Select(%q)", sel), func(q *gorm.DB) *gorm.DB { return q.Select(sel) })
	}
	for _, o := range c.Order {
		if c.Op == tJoins && (o == "id" || o == "id desc") {
			o = "thing_tags." + o
		}
		ch.do(fmt.Sprintf("Order(%q)", o), func(q *gorm.DB) *gorm.DB { return q.Order(o) })
	}
	if c.HasLimit {
		n := c.Limit
		ch.do(fmt.Sprintf("Limit(%d)", n), func(q *gorm.DB) *gorm.DB { return q.Limit(n) })
	}
	if c.HasOffset {
		n := c.Offset
		ch.do(fmt.Sprintf("Offset(%d)", n), func(q *gorm.DB) *gorm.DB { return q.Offset(n) })
	}
	var canon func() []string
	structs := func(rv reflect.Value) []string {
		out := make([]string, rv.Len())
		for i := range out {
			out[i] = tvals(rv.Index(i), fold)
		}
		return out
	}
	maps := func(rows []map[string]any) []string {
		out := make([]string, len(rows))
		for i, r := range rows {
			keys := slices.Sorted(func(yield func(string) bool) {
				for k := range r {
					if !yield(k) {
						return
					}
				}
			})
			var b strings.Builder
			for _, k := range keys {
				s := tval(r[k])
				if fold[k] {
					s = strings.ToLower(s)
				}
				fmt.Fprintf(&b, "%s=%s ", k, s)
			}
			out[i] = strings.TrimSpace(b.String())
		}
		return out
	}
	switch c.Op {
	case tFind:
		rows := reflect.New(reflect.SliceOf(dests[c.Dest]))
		ch.do(fmt.Sprintf("Find(&rows) // rows []%s", destNames[c.Dest]), func(q *gorm.DB) *gorm.DB { return q.Find(rows.Interface()) })
		canon = func() []string { return structs(rows.Elem()) }
	case tFirst, tTake, tLast:
		row := reflect.New(dests[c.Dest])
		call := map[top]string{tFirst: "First", tTake: "Take", tLast: "Last"}[c.Op]
		ch.do(fmt.Sprintf("%s(&row) // row %s", call, destNames[c.Dest]), func(q *gorm.DB) *gorm.DB {
			switch c.Op {
			case tFirst:
				return q.First(row.Interface())
			case tTake:
				return q.Take(row.Interface())
			}
			return q.Last(row.Interface())
		})
		canon = func() []string { return []string{tvals(row.Elem(), fold)} }
	case tCount:
		var n int64
		ch.do("Count(&n)", func(q *gorm.DB) *gorm.DB { return q.Count(&n) })
		canon = func() []string { return []string{fmt.Sprintf("count=%d", n)} }
	case tPluck:
		vals := reflect.New(reflect.SliceOf(goTypeOf(c.Dest, col)))
		ch.do(fmt.Sprintf("Pluck(%q, &vals) // vals []%s", col, vals.Elem().Type().Elem()), func(q *gorm.DB) *gorm.DB { return q.Pluck(col, vals.Interface()) })
		canon = func() []string {
			out := make([]string, vals.Elem().Len())
			for i := range out {
				out[i] = tval(vals.Elem().Index(i).Interface())
			}
			return out
		}
	case tScanMaps:
		var rows []map[string]any
		sel := "id, user_id, " + col
		if col == "id" {
			sel = "*"
		}
		ch.do(fmt.Sprintf("Select(%q).Scan(&rows) // rows []map[string]any", sel), func(q *gorm.DB) *gorm.DB { return q.Select(sel).Scan(&rows) })
		canon = func() []string { return maps(rows) }
	case tScanSmall:
		small := reflect.StructOf([]reflect.StructField{{Name: "ID", Type: reflect.TypeFor[int64]()}, {Name: "V", Type: goTypeOf(c.Dest, col)}})
		rows := reflect.New(reflect.SliceOf(small))
		sel := qcol + " AS v, id"
		ch.do(fmt.Sprintf("Select(%q).Scan(&rows) // rows []struct{ID int64; V %s}", sel, goTypeOf(c.Dest, col)), func(q *gorm.DB) *gorm.DB { return q.Select(sel).Scan(rows.Interface()) })
		canon = func() []string { return structs(rows.Elem()) }
	case tRows:
		var out []string
		sel := "id, " + qcol
		ch.do(fmt.Sprintf("Select(%q).Rows() // Scan(&id, &v any) each", sel), func(q *gorm.DB) *gorm.DB {
			rs, err := q.Select(sel).Rows()
			if err != nil {
				return &gorm.DB{Error: err}
			}
			defer rs.Close()
			for rs.Next() {
				var id int64
				var v any
				if err := rs.Scan(&id, &v); err != nil {
					return &gorm.DB{Error: err}
				}
				out = append(out, fmt.Sprintf("id=%d v=%s", id, tval(v)))
			}
			return &gorm.DB{Error: rs.Err(), RowsAffected: int64(len(out))}
		})
		canon = func() []string { return out }
	case tRow:
		var lo, hi any
		var cnt int64
		sel := fmt.Sprintf("min(%s), max(%s), count(%s)", col, col, col)
		ch.do(fmt.Sprintf("Select(%q).Row().Scan(&lo, &hi, &n)", sel), func(q *gorm.DB) *gorm.DB {
			err := q.Select(sel).Row().Scan(&lo, &hi, &cnt)
			return &gorm.DB{Error: err}
		})
		canon = func() []string {
			l, h := tval(lo), tval(hi)
			if thingCol(col).loose {
				l, h = strings.ToLower(l), strings.ToLower(h)
			}
			return []string{fmt.Sprintf("lo=%s hi=%s n=%d", l, h, cnt)}
		}
	case tGroup, tDistinct, tAgg:
		var rows []map[string]any
		ch.do("Find(&rows) // rows []map[string]any", func(q *gorm.DB) *gorm.DB { return q.Find(&rows) })
		canon = func() []string { return maps(rows) }
	case tJoins:
		var rows []ThingTag
		ch.do("Find(&rows) // rows []ThingTag", func(q *gorm.DB) *gorm.DB { return q.Find(&rows) })
		canon = func() []string {
			out := make([]string, len(rows))
			for i, r := range rows {
				out[i] = fmt.Sprintf("id=%d thing=%d tag=%s", r.ID, r.ThingID, tval(r.Tag))
				if r.Thing != nil {
					out[i] += " joined: " + tvals(reflect.ValueOf(*r.Thing), fold)
				}
			}
			return out
		}
	case tPreload:
		var rows []Thing
		ch.do("Find(&rows) // rows []Thing", func(q *gorm.DB) *gorm.DB { return q.Find(&rows) })
		canon = func() []string {
			out := make([]string, len(rows))
			for i, r := range rows {
				tags := make([]string, len(r.Tags))
				for j, tg := range r.Tags {
					tags[j] = fmt.Sprintf("%d:%s", tg.ID, tval(tg.Tag))
				}
				sort.Strings(tags)
				out[i] = tvals(reflect.ValueOf(r), fold) + " tags=" + strings.Join(tags, ",")
			}
			return out
		}
	case tAssoc:
		var tags []ThingTag
		var n int64
		ch.text.WriteString(fmt.Sprintf(".Model(&Thing{ID: seed[%d].ID, UserID: seed[%d].UserID}).Association(\"Tags\"): Find(&tags), Count()", c.Thing, c.Thing))
		canon = func() []string {
			out := []string{fmt.Sprintf("count=%d", n)}
			for _, tg := range tags {
				out = append(out, fmt.Sprintf("id=%d thing=%d tag=%s", tg.ID, tg.ThingID, tval(tg.Tag)))
			}
			return out
		}
		if ch.q != nil {
			return c.runAssoc(ch.q, &tags, &n, canon)
		}
	}
	var res result
	if ch.q == nil {
		return res
	}
	res.err = ch.q.Error
	res.affected = ch.q.RowsAffected
	res.rows = canon()
	return res
}

// assocThings is the seed the association cases read (set by the test).
var assocThings []Thing

func (c tcase) runAssoc(q *gorm.DB, tags *[]ThingTag, n *int64, canon func() []string) result {
	th := assocThings[c.Thing%len(assocThings)]
	owner := &Thing{ID: th.ID, UserID: th.UserID}
	err := q.Model(owner).Association("Tags").Find(tags)
	if err == nil {
		*n = q.Model(owner).Association("Tags").Count()
		err = q.Error
	}
	slices.SortFunc(*tags, func(a, b ThingTag) int { return int(a.ID - b.ID) })
	return result{err: err, rows: canon()}
}

func (c tcase) run(ctx context.Context, root *gorm.DB) (res result) {
	if p, ok := shardkitOf(root); ok {
		p.unionBatch = c.Batch
		defer func() { p.unionBatch = 0 }()
	}
	defer func() {
		if r := recover(); r != nil {
			res.panicked = fmt.Sprint(r)
		}
	}()
	ch := chain{q: root.WithContext(ctx)}
	return c.build(&ch)
}

// tfailure is a typed case the plugin got wrong.
type tfailure struct {
	c              tcase
	kind, detail   string
	sharded, plain result
	shrunkOf       string
	index          int
	known          string // the knownBroken entry the case meets
}

func (f *tfailure) class() string {
	if f.known != "" {
		return "known broken, " + f.known + ": " + f.kind
	}
	return f.c.Op.String() + ": " + f.kind
}

func (f *tfailure) report() string {
	var b strings.Builder
	batch := "the default union batch"
	if f.c.Batch != 0 {
		batch = fmt.Sprintf("reads of at most %d shards per statement (Plugin.unionBatch)", f.c.Batch)
	}
	fmt.Fprintf(&b, "%s\nreproduction, with %s:\n\t%s\naxes: %s\nplugin: %s\nplain:  %s\n", f.class(), batch, f.c.code(), strings.Join(f.c.axes(), ", "), f.sharded, f.plain)
	if f.detail != "" {
		b.WriteString(f.detail + "\n")
	}
	if f.shrunkOf != "" {
		fmt.Fprintf(&b, "shrunk from: %s\n", f.shrunkOf)
	}
	return b.String()
}

// check runs a typed case on both sides and judges the outcome.
func (te *typedEnv) check(t testing.TB, c tcase) *tfailure {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs := c.run(ctx, te.e.db)
	rp := c.run(ctx, te.plain)
	fl := &tfailure{c: c, sharded: rs, plain: rp, index: -1}
	bad := func(kind, detail string, args ...any) *tfailure {
		fl.kind, fl.detail = kind, fmt.Sprintf(detail, args...)
		return fl
	}
	if rp.panicked != "" {
		t.Fatalf("plain GORM panicked on %s: %s", c.code(), rp.panicked)
	}
	switch {
	case rs.panicked != "":
		return bad("panic", "%s", rs.panicked)
	case rs.err != nil && rp.err == nil && refusal(rs.err):
		te.stats["refused: "+refusalName(rs.err)]++
		return nil
	case rs.err != nil && rp.err == nil && te.arbitraryPluginScanFailure(c, rs, rp):
		// The same, the other way round: the plugin's rows held a value
		// the destination cannot, plain GORM's did not.
		te.stats["arbitrary rows, the plugin's failed to scan"]++
		return nil
	case rs.err != nil && rp.err == nil:
		return bad("error that is not a typed refusal", "%v", rs.err)
	case rs.err == nil && rp.err != nil && te.arbitraryScanFailure(c, rs, rp):
		// A limit without a total order returns any rows: plain GORM's
		// held a value its destination cannot, the plugin's did not.
		te.stats["arbitrary rows, plain GORM's failed to scan"]++
		return nil
	case rs.err == nil && rp.err != nil:
		return bad("success where plain GORM failed", "plain: %v", rp.err)
	case rs.err != nil:
		te.stats["both failed"]++
		return nil
	}
	ordered, exact := c.ordered()
	switch {
	case exact && ordered && !slices.Equal(rs.rows, rp.rows):
		if slices.Equal(sorted(rs.rows), sorted(rp.rows)) {
			return bad("rows in the wrong order", "plugin: %v\nplain:  %v", rs.rows, rp.rows)
		}
		return bad("rows differ", "%s", diffRows(rp.rows, rs.rows))
	case exact && !ordered && !slices.Equal(sorted(rs.rows), sorted(rp.rows)):
		return bad("rows differ", "%s", diffRows(sorted(rp.rows), sorted(rs.rows)))
	case !exact:
		all := c
		all.HasLimit, all.HasOffset, all.Limit, all.Offset = false, false, 0, 0
		if all.Op == tTake {
			all.Op = tFind
		}
		// The unlimited read may fail where the limited one does not (a
		// NULL among the rows the limit cut off, scanned into a field
		// that cannot hold it): then only the count is judged.
		ra := all.run(ctx, te.plain)
		if len(rs.rows) != len(rp.rows) {
			return bad("rows differ", "plugin has %d rows, plain GORM %d\n%s", len(rs.rows), len(rp.rows), diffRows(rp.rows, rs.rows))
		}
		if ra.err == nil {
			if extra := minus(rs.rows, ra.rows); len(extra) > 0 {
				return bad("rows differ", "rows that are not in the unlimited answer: %v", extra)
			}
		}
	}
	if rs.affected != rp.affected {
		return bad("RowsAffected differs", "plugin %d, plain GORM %d", rs.affected, rp.affected)
	}
	te.stats["same answer"]++
	return nil
}

// arbitraryScanFailure reports whether plain GORM's failure and the
// plugin's success are both answers Postgres may give: a read cut by a
// limit without a total order, whose rows are any of the matching ones,
// where plain GORM's failed to scan into the destination (a NULL into a
// field that cannot hold it), the plugin read as many rows, and, where
// the unlimited read scans, every row it returned is one of its rows.
func (te *typedEnv) arbitraryScanFailure(c tcase, rs, rp result) bool {
	if _, exact := c.ordered(); exact || !strings.Contains(rp.err.Error(), "sql: Scan error") || rs.affected != rp.affected {
		return false
	}
	all := c
	all.HasLimit, all.HasOffset, all.Limit, all.Offset = false, false, 0, 0
	if all.Op == tTake {
		all.Op = tFind
	}
	ra := all.run(context.Background(), te.plain)
	return ra.err != nil || len(minus(rs.rows, ra.rows)) == 0
}

// arbitraryPluginScanFailure reports whether the plugin's failure to
// scan a limit's rows without a total order is one plain GORM on one
// table gives for other rows it may as well return: the same read into a
// Scanner (which holds every value) returns, through the plugin, as many
// rows as plain GORM's, every one in the unlimited answer, and not the
// rows plain GORM returns. Those rows are a right page, other than the one
// plain GORM scanned, that holds a value the destination cannot (a NULL
// in a []*string that GORM's Pluck fills, among rows that tie at the cut).
func (te *typedEnv) arbitraryPluginScanFailure(c tcase, rs, rp result) bool {
	if _, exact := c.ordered(); exact || !strings.Contains(rs.err.Error(), "sql: Scan error") || c.Dest == dsScanner {
		return false
	}
	ctx := context.Background()
	held := c
	held.Dest = dsScanner
	page := held.run(ctx, te.e.db)
	if page.err != nil || len(page.rows) != len(rp.rows) {
		return false
	}
	// Plain GORM's own page, which it scanned: were the plugin's the same
	// rows, its failure would come from rows outside the page.
	if theirs := held.run(ctx, te.plain); theirs.err != nil || len(minus(page.rows, theirs.rows)) == 0 {
		return false
	}
	all := held
	all.HasLimit, all.HasOffset, all.Limit, all.Offset = false, false, 0, 0
	if all.Op == tTake {
		all.Op = tFind
	}
	ra := all.run(ctx, te.plain)
	return ra.err == nil && len(minus(page.rows, ra.rows)) == 0
}

// shrinks are smaller variants of a case.
func (c tcase) shrinks() []tcase {
	var out []tcase
	try := func(f func(*tcase)) {
		s := c
		s.Order = slices.Clone(c.Order)
		f(&s)
		if s.code() != c.code() {
			out = append(out, s)
		}
	}
	try(func(s *tcase) { s.Where = twhere{}; s.All = true })
	try(func(s *tcase) { s.HasOffset, s.Offset = false, 0 })
	try(func(s *tcase) { s.HasLimit, s.Limit = false, 0 })
	try(func(s *tcase) { s.Having = false })
	try(func(s *tcase) { s.Unordered = false })
	try(func(s *tcase) { s.Dest = dsModel })
	try(func(s *tcase) { s.Batch = 0 })
	for i := range c.Order {
		if i == len(c.Order)-1 && (c.Order[i] == "id" || c.Order[i] == "id desc") {
			break // the tiebreaker makes the order total: without it the case judges another way
		}
		try(func(s *tcase) { s.Order = slices.Delete(s.Order, i, i+1) })
		if strings.Contains(c.Order[i], " nulls") {
			try(func(s *tcase) { s.Order[i] = c.Order[i][:strings.Index(c.Order[i], " nulls")] })
		}
	}
	if c.Op == tFirst || c.Op == tLast || c.Op == tTake {
		try(func(s *tcase) { s.Op = tFind })
	}
	return out
}

func (te *typedEnv) shrink(t testing.TB, fl *tfailure, budget int) *tfailure {
	t.Helper()
	orig := fl.c.code()
	for progress := true; progress && budget > 0; {
		progress = false
		for _, s := range fl.c.shrinks() {
			if budget--; budget < 0 {
				break
			}
			if g := te.check(t, s); g != nil && g.kind == fl.kind && brokenBy(s, nil) == fl.known {
				g.index, g.known = fl.index, fl.known
				fl, progress = g, true
				break
			}
		}
	}
	if code := fl.c.code(); code != orig {
		fl.shrunkOf = orig
	}
	return fl
}

// runTyped runs n cases of the fixed-seed stream on te.
func runTyped(t *testing.T, te *typedEnv, n int) {
	assocThings = te.seed.things
	rng := newRand(*diffSeed, 0x7e9e)
	byClass := map[string][]*tfailure{}
	skipped := map[string]int{}
	axes, failedAxes := map[string]int{}, map[string]int{}
	on := enabledAxes()
	start := time.Now()
	batches := []int{0, 5, 30}
	// n counts the cases judged: those skipped as known broken do not
	// count, so that a run of n cases judges n.
	judged := 0
	for i := 0; judged < n && i < 20*n; i++ {
		input := make([]byte, 40)
		for j := range input {
			input[j] = byte(rng.UintN(256))
		}
		g := tgen{c: &byteChooser{b: input}, s: te.seed}
		c := g.tcase()
		c.Batch, c.ICU = batches[i%len(batches)], te.icu
		if kb := brokenBy(c, on); kb != "" {
			skipped[kb]++
			continue
		}
		judged++
		for _, a := range c.axes() {
			axes[a]++
		}
		if fl := te.check(t, c); fl != nil {
			fl.index = i
			// A failure of a case that meets a known-broken entry (run
			// because SHARDKIT_DIFF_AXES turned it on) is of that class.
			if kb := brokenBy(c, nil); kb != "" {
				fl.known = kb
			}
			byClass[fl.class()] = append(byClass[fl.class()], fl)
			for _, a := range c.axes() {
				failedAxes[a]++
			}
		}
	}
	t.Logf("%d cases judged in %v (%d more skipped as known broken); outcomes %v", judged, time.Since(start).Round(time.Millisecond), sumValues(skipped), te.stats)
	t.Logf("axes covered: %v", axes)
	if len(failedAxes) > 0 {
		t.Logf("axes of the failing cases: %v", failedAxes)
	}
	for _, kb := range knownBroken {
		if skipped[kb.name] > 0 {
			t.Logf("skipped %d cases of known-broken axis %s (%s); SHARDKIT_DIFF_AXES=%s runs them", skipped[kb.name], kb.name, kb.bug, kb.name)
		}
	}
	classes := slices.Sorted(func(yield func(string) bool) {
		for k := range byClass {
			if !yield(k) {
				return
			}
		}
	})
	if len(classes) > 0 {
		var sum strings.Builder
		failed := 0
		for _, k := range classes {
			failed += len(byClass[k])
			fmt.Fprintf(&sum, "\n\t%4d  %s", len(byClass[k]), k)
		}
		t.Errorf("%d of %d cases failed, in %d classes:%s", failed, judged, len(classes), sum.String())
	}
	for _, k := range classes {
		t.Run(k, func(t *testing.T) {
			fl := te.shrink(t, byClass[k][0], 60)
			t.Errorf("%d failing cases; the first, shrunk:\n%s", len(byClass[k]), fl.report())
		})
	}
}

func sumValues(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
