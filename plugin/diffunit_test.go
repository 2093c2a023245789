package plugin

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// Pure parts of the differential test: what counts as a refusal, when
// rows must come in order, the printed reproduction, and shrinking.

func TestDiffRefusal(t *testing.T) {
	pg := &pgconn.PgError{Code: "42P01", Message: `relation "shard_0001.photos" does not exist`}
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"sentinel", ErrMissingShardKey, true},
		{"wrapped sentinel", fmt.Errorf("shardkit: %w", ErrUnroutableSQL), true},
		{"shard error with a sentinel", &ShardError{Shard: 3, Table: "photos", Err: ErrCrossShard}, true},
		{"shard error with a new error", &ShardError{Shard: 3, Table: "photos", Err: errors.New("some new refusal")}, true},
		{"shard error with a database error", &ShardError{Shard: 3, Table: "photos", Err: pg}, false},
		{"shard error with a timeout", &ShardError{Shard: 3, Table: "photos", Err: fmt.Errorf("begin: %w", context.DeadlineExceeded)}, false},
		{"database error", pg, false},
		{"other error", errors.New("boom"), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := refusal(c.err); got != c.want {
				t.Fatalf("refusal(%v) = %v, want %v", c.err, got, c.want)
			}
		})
	}
}

func TestDiffOrdered(t *testing.T) {
	cases := []struct {
		name           string
		c              dcase
		ordered, exact bool
	}{
		{"no order", dcase{Op: dFind}, false, true},
		{"by id", dcase{Op: dFind, Order: "id"}, true, true},
		{"ends with id desc", dcase{Op: dFind, Order: "caption, id desc"}, true, true},
		{"not total", dcase{Op: dFind, Order: "likes desc"}, false, true},
		{"not total, limited", dcase{Op: dFind, Order: "likes", Limit: 2}, false, false},
		{"no order, offset", dcase{Op: dPluckID, Offset: 1}, false, false},
		{"user_id is not id", dcase{Op: dFind, Order: "user_id"}, false, true},
		{"first adds the key", dcase{Op: dFirst, Order: "likes"}, true, true},
		{"take", dcase{Op: dTake}, false, false},
		{"count", dcase{Op: dCount}, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o, e := c.c.ordered()
			if o != c.ordered || e != c.exact {
				t.Fatalf("ordered() = %v, %v; want %v, %v", o, e, c.ordered, c.exact)
			}
		})
	}
}

func TestDiffCode(t *testing.T) {
	cases := []struct {
		name string
		c    dcase
		want string
	}{
		{"or", dcase{Op: dFind, Calls: []call{{C: cond{Kind: cKeyEq, Users: []int64{1}}}, {How: callOr, C: cond{Kind: cKeyIn, Users: []int64{2, 3}}}}, Order: "likes desc, id", Limit: 2},
			`db.Where("user_id = ?", 1).Or("user_id IN ?", []int64{2, 3}).Order("likes desc, id").Limit(2).Find(&rows) // rows []Photo`},
		{"sub-query", dcase{Op: dCount, All: true, Calls: []call{{How: callNot, C: cond{Kind: cSub, Kids: []cond{{Kind: cCaptionEq, S: "cat"}}}}}},
			`db.Clauses(AllShards()).Model(&Photo{}).Not("id IN (?)", db.Model(&Photo{}).Select("id").Where("caption = ?", "cat")).Count(&n)`},
		{"group", dcase{Op: dFindSmall, Calls: []call{{C: cond{Kind: cGroup, Kids: []cond{{Kind: cStruct, Users: []int64{4}}, {Kind: cLikesGt, N: 2}}}}}},
			`db.Model(&Photo{}).Where(db.Where(&Photo{UserID: 4, Caption: ""}).Or("likes > ?", 2)).Find(&rows) // rows []photoKey{ID, UserID int64}`},
		{"update returning", dcase{Op: dUpdate, Returning: true, Calls: []call{{C: cond{Kind: cMap, Users: []int64{5, 6}}}}, Set: setSpec{Kind: setKey, U: 7}},
			`db.Clauses(clause.Returning{}).Model(&ret).Where(map[string]any{"user_id": []int64{5, 6}}).Update("user_id", 7) // ret []Photo`},
		{"create", dcase{Op: dCreate, Omit: []string{"likes"}, Rows: []prow{{UserID: 8, Caption: "a", At: 3}}},
			`db.Omit("likes").Create(&Photo{ID: 0, UserID: 8, Caption: "a", Likes: 0, CreatedAt: diffEpoch.Add(3 * time.Minute)})`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.c.code(); got != c.want {
				t.Fatalf("code:\n got %s\nwant %s", got, c.want)
			}
		})
	}
}

// TestDiffShrinks checks that every shrink of generated cases is smaller,
// so shrinking ends.
func TestDiffShrinks(t *testing.T) {
	d := &seedData{users: []int64{1, 2, 3}, absent: []int64{9}, ids: []int64{100, 200, 300}, fresh: []int64{400},
		owner: map[int64]int64{100: 1, 200: 2, 300: 3}, slugs: []string{"s00", "s01"}, pinOf: map[int64]int64{100: 101, 200: 201, 300: 301}}
	for i := 0; i < 300; i++ {
		in := make([]byte, 48)
		for j := range in {
			in[j] = byte(i*31 + j*17 + i*j)
		}
		c := (&gen{c: &byteChooser{b: in}, d: d}).dcase()
		for _, s := range c.shrinks() {
			if caseSize(s) >= caseSize(c) {
				t.Fatalf("shrink of\n%s\nis not smaller:\n%s", c.code(), s.code())
			}
		}
	}
}

func caseSize(c dcase) int {
	n := len(c.Rows) + len(c.Inline) + len(c.Select) + len(c.Omit) + c.Limit + c.Offset
	for _, b := range []bool{c.All, c.SkipTx, c.Returning, c.Model != nil, c.Order != "", c.Order != "id" && c.Order != "", c.Set.Kind != setCaption, c.Many, c.Agg != nil && c.Agg.Order != "", c.Agg != nil && c.Agg.Having > 0} {
		if b {
			n++
		}
	}
	for _, cl := range c.Calls {
		n += 1 + condSize(cl.C)
		if cl.How != callWhere {
			n++
		}
	}
	return n
}

func condSize(c cond) int {
	n := 1 + len(c.Users) + len(c.IDs) + len(c.Slugs)
	if c.S != "" && c.Kind == cStruct {
		n++
	}
	for _, k := range c.Kids {
		n += condSize(k)
	}
	return n
}
