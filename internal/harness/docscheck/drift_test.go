package docscheck

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestNoDrift: the pages of docs/ hold no commit hash, no figure in prose
// beside a maintained table, and no table of figures outside the markers.
func TestNoDrift(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		for _, f := range Drift(rel, string(src)) {
			t.Errorf("%s:%s", rel, f)
		}
	}
}

// TestDriftFinds feeds Drift a page with each kind of drift, and the
// look-alikes that are not drift, and checks what it reports.
func TestDriftFinds(t *testing.T) {
	for _, c := range []struct {
		name  string
		page  string
		allow []Allow
		want  []Finding
	}{
		{
			name: "a commit hash in prose, in a code span and in a code block",
			page: "# P\n\nThe read cache of d0fcf4d made it faster.\n\nSee `be31271`.\n\n```sh\ngit checkout 7f638ed\n```\n",
			want: []Finding{{3, KindCommit, "d0fcf4d"}, {5, KindCommit, "be31271"}, {8, KindCommit, "7f638ed"}},
		},
		{
			name: "hex that is not a commit: numbers, words, digests, identifiers",
			page: "# P\n\n1000000 rows, 2978166101147534337 as an ID, a defaced accede, 0x1f2e3d4c, shard_0001,\n" +
				"a sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855, abc123 (six).\n",
		},
		{
			name:  "an allowed hex run, and one allowed entry that matches nothing",
			page:  "# P\n\n`shardkit:v1:a:74211:9f86d081884c7d65:1`\n",
			allow: []Allow{{KindCommit, "9f86d081884c7d65", "a nonce"}, {KindCommit, "abcdef12", "gone"}},
			want:  []Finding{{0, KindUnusedAllow, "abcdef12"}},
		},
		{
			name: "a figure in prose beside a maintained table",
			page: "# P\n\n## Bulk\n\n<!-- figures:bulk -->\n| a | b |\n|---|---|\n| x | 1.80–1.88× |\n<!-- /figures:bulk -->\n\n" +
				"Single rounds ranged 1.24–1.44× in the table's runs,\nthe longest 245 ms; 94 MB of heap, 5% of a core, 3x.\n",
			want: []Finding{{11, KindProseFigure, "1.24–1.44×"}, {12, KindProseFigure, "245 ms"}, {12, KindProseFigure, "94 MB"},
				{12, KindProseFigure, "5%"}, {12, KindProseFigure, "3x"}},
		},
		{
			name: "figures in prose of a section without a maintained table, in code, in a table's own notes, or counts",
			page: "# P\n\nA move took 6.4 s.\n\n## Bulk\n\n2000 shards × 3 tables, 2000 `COPY`s, `-benchtime 3x`, [a link](x.md#a-1.5-s), PostgreSQL 15, PgBouncer 1.24.\n\n" +
				"```sh\ntook 12 s\n```\n\n<!-- figures:bulk -->\nTaken in 3 runs; 1.5× the plain read.\n<!-- /figures:bulk -->\n\n## Other\n\nIt took 7.7 s.\n",
		},
		{
			name:  "a setting named in prose beside a maintained table, allowed",
			page:  "# P\n\n## Lease\n\nWith a 3 s lease and a watcher\npolling every 200 ms, it took 3.1 s.\n\n<!-- figures:lease -->\n<!-- /figures:lease -->\n",
			allow: []Allow{{KindProseFigure, "a 3 s lease and a watcher polling every 200 ms", "the test's settings"}},
			want:  []Finding{{6, KindProseFigure, "3.1 s"}},
		},
		{
			name: "a table of figures outside the markers",
			page: "# P\n\n| what | took |\n|---|---|\n| 2000 shards on 4 servers | 7.7 s quiet |\n| the same again | 23–277 ms |\n",
			want: []Finding{{3, KindLooseTable, "| what | took |"}},
		},
		{
			name: "tables that are not of figures: settings here and there, counts, maintained",
			page: "# P\n\n| step | what |\n|---|---|\n| lag gate | within `CutoverLag` (15 ms) |\n| fence | one statement |\n| flip | one statement |\n\n" +
				"| IDs | duplicates |\n|---|---|\n| 1000000 | 0 |\n\n<!-- figures:t -->\n| a | b |\n|---|---|\n| x | 12 ms |\n<!-- /figures:t -->\n",
		},
		{
			name:  "an allowed table, by its header",
			page:  "# P\n\n| clusters | took |\n|---|---|\n| 2 | 7.7 s |\n",
			allow: []Allow{{KindLooseTable, "| clusters | took |", "why"}},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			saved := Allowed["test.md"]
			Allowed["test.md"] = c.allow
			defer func() { Allowed["test.md"] = saved }()
			got := Drift("test.md", c.page)
			if !slices.Equal(got, c.want) {
				t.Errorf("got\n%v\nwant\n%v", got, c.want)
			}
		})
	}
}

// TestRatiosNameTheirPlainRead: in the reads-across-shards table each mode
// is paired with a plain read of its own, so a ratio cell gives the plain
// read it divides by, not a column of another mode's.
func TestRatiosNameTheirPlainRead(t *testing.T) {
	ratio := regexp.MustCompile(`\{(/[a-z0-9_]+) (cpu-)?ratio\}`)
	for _, fig := range Figures {
		if fig.Name != "scatter" {
			continue
		}
		for _, row := range fig.Rows {
			for _, cell := range row.Cells {
				m := ratio.FindStringSubmatch(cell)
				if m == nil {
					continue
				}
				want := "{" + m[1] + " plain-" + m[2] + "µs/op"
				if !strings.Contains(cell, want) {
					t.Errorf("figure scatter, row %q: the cell %q gives a ratio without its plain read (%s…})", row.Label, cell, want)
				}
			}
		}
		return
	}
	t.Fatal("no scatter figure")
}
