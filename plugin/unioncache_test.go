package plugin

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"gorm.io/gorm"

	"github.com/shardkit/shardkit/router"
)

// TestUnionTextsExact: a read across shards takes its statements' texts
// from the plugin's cache when it ran before, and they are the texts it
// writes afresh: for every shape of read, and when reads of other batch
// sizes put units that start with the same shard but read other shards
// in the cache before it.
func TestUnionTextsExact(t *testing.T) {
	e := newEnv(t, envOpts{shards: 40})
	for u := range 12 {
		if err := e.db.Create(&Photo{UserID: int64(u + 1), Caption: fmt.Sprint("c", u%3), Likes: u % 5}).Error; err != nil {
			t.Fatal(err)
		}
	}
	reads := map[string]func(db *gorm.DB) error{
		"ordered": func(db *gorm.DB) error {
			var ps []Photo
			return db.Order("id desc").Limit(5).Find(&ps).Error
		},
		"two keys, offset": func(db *gorm.DB) error {
			var ps []Photo
			return db.Order("caption").Order("id desc").Offset(2).Limit(3).Find(&ps).Error
		},
		"where": func(db *gorm.DB) error {
			var ps []Photo
			return db.Where("likes > ?", 1).Order("likes desc, id").Limit(4).Find(&ps).Error
		},
		"count": func(db *gorm.DB) error {
			var n int64
			return db.Model(&Photo{}).Where("likes < ?", 4).Count(&n).Error
		},
		"aggregate": func(db *gorm.DB) error {
			var rows []struct {
				Caption string
				N       int64
			}
			return db.Model(&Photo{}).Select("caption, count(*) AS n").Group("caption").Scan(&rows).Error
		},
	}
	var mu sync.Mutex
	var texts map[string]string // by the statement's shards
	e.p.running = func(st *readStmt) {
		if len(st.shards) < 2 {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		texts[fmt.Sprint(st.shards)] = st.sql
	}
	defer func() { e.p.running, e.p.unionBatch = nil, 0 }()
	run := func(name string, batch int) map[string]string {
		t.Helper()
		texts, e.p.unionBatch = map[string]string{}, batch
		if err := reads[name](e.db.Clauses(AllShards())); err != nil {
			t.Fatalf("%s, batch %d: %v", name, batch, err)
		}
		return texts
	}
	names := slices.Sorted(maps.Keys(reads))
	fresh := map[string]map[int]map[string]string{}
	for _, name := range names {
		fresh[name] = map[int]map[string]string{}
		for _, batch := range []int{5, 7, 30} {
			e.p.unions = unionTexts{}
			fresh[name][batch] = run(name, batch)
			if len(fresh[name][batch]) == 0 {
				t.Fatalf("%s, batch %d: no statement read several shards", name, batch)
			}
		}
	}
	// Shapes and batches alternate: each read finds the cache holding
	// other shapes' statements of the same shards, and its own shape's
	// units of other batches, whose first shards are its own.
	e.p.unions = unionTexts{}
	for _, batch := range []int{5, 30, 7, 5, 30} {
		for _, name := range names {
			got := run(name, batch)
			if len(got) != len(fresh[name][batch]) {
				t.Fatalf("%s, batch %d: %d statements, written afresh %d", name, batch, len(got), len(fresh[name][batch]))
			}
			for shards, text := range got {
				if text != fresh[name][batch][shards] {
					t.Fatalf("%s, batch %d, shards %s:\n got %s\nwant %s", name, batch, shards, text, fresh[name][batch][shards])
				}
				for _, s := range strings.Fields(strings.Trim(shards, "[]")) {
					var n int
					fmt.Sscan(s, &n)
					if !strings.Contains(text, router.SchemaName(n)) {
						t.Fatalf("%s, batch %d: statement of shards %s does not read shard %d", name, batch, shards, n)
					}
				}
			}
		}
	}
	// The same read again: every text is the one kept.
	for _, name := range names {
		before := run(name, 5)
		for shards, text := range run(name, 5) {
			if unsafe.StringData(text) != unsafe.StringData(before[shards]) {
				t.Fatalf("%s: the statement of shards %s was written again, not taken from the cache", name, shards)
			}
		}
	}
}

// TestUnionTextsBound: the bytes the cache counts are the bytes of the
// entries it holds, through replacements, and it never holds more than
// maxUnionBytes: a text that would pass the bound empties it first.
func TestUnionTextsBound(t *testing.T) {
	var c unionTexts
	held := func() int {
		n := 0
		for k, e := range c.m {
			n += e.size(k)
		}
		return n
	}
	names := []string{`"s0001"`, `"s0002"`}
	text := strings.Repeat("x", 1<<20)
	cases := []struct {
		key     string
		text    string
		entries int
	}{
		{"a", "short", 1},
		{"a", text, 1}, // replaced: the short text no longer counts
		{"b", text, 2},
		{"a", "short", 2},
	}
	for i, tc := range cases {
		c.put(tc.key, names, tc.text)
		if c.bytes != held() || len(c.m) != tc.entries {
			t.Fatalf("step %d: counts %d bytes, holds %d in %d entries, want %d entries", i, c.bytes, held(), len(c.m), tc.entries)
		}
	}
	for i := range 20 {
		c.put(fmt.Sprint("k", i), names, text)
		if c.bytes != held() || c.bytes > maxUnionBytes {
			t.Fatalf("after %d more: counts %d bytes, holds %d, bound %d", i+1, c.bytes, held(), maxUnionBytes)
		}
	}
	if len(c.m) >= 20 {
		t.Fatalf("holds %d texts of 1 MB: the bound of %d bytes was not applied", len(c.m), maxUnionBytes)
	}
}
