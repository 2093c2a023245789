package sqlcond

import (
	"strings"
	"testing"
)

func TestLex(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sql       string
		questions bool
		ok        bool
		text      string // Text of the tokens
		params    int
	}{
		{"equality", "user_id = ?", true, true, "user_id = ?", 1},
		{"built", `"photos"."user_id" = $1 AND id IN ($2,$3)`, false, true, `"photos"."user_id" = ? and id in(?, ?)`, 0},
		{"question in a literal takes a variable", "caption = '?' AND id = ?", true, true, "caption = '?' and id = ?", 2},
		{"doubled quote", "s = 'it''s'", false, true, "s = 'it's'", 0},
		{"number with exponent", "x > 1.5e-3", false, true, "x > 1.5e-3", 0},
		{"brackets", "a[1] = 2", false, true, "a(1) = 2", 0},
		{"comment", "a = 1 -- x", false, false, "", 0},
		{"block comment", "a = 1 /* x */", false, false, "", 0},
		{"separator", "a = 1; DROP TABLE t", false, false, "", 0},
		{"dollar quoting", "a = $$x$$", false, false, "", 0},
		{"dollar tag", "a = $1a", false, false, "", 0},
		{"parameter zero", "a = $0", false, false, "", 0},
		{"escape string", `a = E'\''`, false, false, "", 0},
		{"unbalanced", "(a = 1", false, false, "", 0},
		{"mismatched", "(a = 1]", false, false, "", 0},
		{"close first", ")", false, false, "", 0},
		{"unterminated literal", "a = 'x", false, false, "", 0},
		{"empty quoted name", `"" = 1`, false, false, "", 0},
		{"unknown byte", "a = \\1", false, false, "", 0},
		{"empty", "", false, true, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			toks, params, ok := Lex(tc.sql, tc.questions, nil)
			if ok != tc.ok {
				t.Fatalf("Lex(%q) ok = %v, want %v", tc.sql, ok, tc.ok)
			}
			if !ok {
				return
			}
			if got := Text(toks); got != tc.text {
				t.Errorf("Text = %q, want %q", got, tc.text)
			}
			if params != tc.params {
				t.Errorf("params = %d, want %d", params, tc.params)
			}
		})
	}
}

func TestItemsAndSplit(t *testing.T) {
	toks, _, ok := Lex("user_id, count(*) AS n, max(coalesce(a, b))", false, nil)
	if !ok {
		t.Fatal("not lexed")
	}
	var got []string
	for _, it := range Items(toks) {
		got = append(got, Text(it))
	}
	if want := "user_id|count(*) as n|max(coalesce(a, b))"; strings.Join(got, "|") != want {
		t.Errorf("Items = %q, want %q", strings.Join(got, "|"), want)
	}
	toks, _, _ = Lex("a = 1 OR (b = 2 OR c = 3) OR d = 4", false, nil)
	if parts := Split(toks, 0, len(toks), "or"); len(parts) != 3 {
		t.Errorf("Split = %v, want 3 parts (the parenthesised OR is one)", parts)
	}
	if parts := Split(toks, 0, 3, "or"); parts != nil {
		t.Errorf("Split without the keyword = %v, want nil", parts)
	}
	toks, _, _ = Lex(`"t".col = 1`, false, nil)
	if ref, n := ColumnRef(toks, 0, len(toks)); len(ref) != 3 || n != 3 {
		t.Errorf("ColumnRef = %v, %d", ref, n)
	}
	if col, n := ColumnAt(toks, 0); col != "col" || n != 3 {
		t.Errorf("ColumnAt = %q, %d", col, n)
	}
	toks, _, _ = Lex("not = 1", false, nil)
	if ref, _ := ColumnRef(toks, 0, len(toks)); ref != nil {
		t.Errorf("a reserved word read as a column: %v", ref)
	}
	toks, _, _ = Lex("sum(x) + (1)", false, nil)
	if c := Closing(toks[1:], 0); c != 2 {
		t.Errorf("Closing in a slice = %d, want 2", c)
	}
}

// FuzzLex: whatever the text, the lexer never panics, and what it
// accepts is well formed: parentheses matched forwards, placeholders
// numbered in order and counted.
func FuzzLex(f *testing.F) {
	for _, s := range []string{"user_id = ?", "user_id IN (?, ?) OR id = ?", "(user_id = ?) AND NOT (x)",
		"a BETWEEN ? AND ?", "\"photos\".\"user_id\" = $1", "user_id = ? OR\nx", "((", "'?''", "E'\\''", "a[1]", "$12"} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, sql string, questions bool) {
		toks, params, ok := Lex(sql, questions, nil)
		if !ok {
			return
		}
		last := -1
		for i, tk := range toks {
			switch tk.Kind {
			case LParen:
				if tk.Match <= i || tk.Match >= len(toks) || toks[tk.Match].Kind != RParen {
					t.Fatalf("%q: parenthesis %d matched at %d", sql, i, tk.Match)
				}
			case Param:
				if questions && !strings.Contains(sql, "$") { // $n numbers itself
					if tk.Num <= last || tk.Num >= params {
						t.Fatalf("%q: placeholder %d numbered %d after %d of %d", sql, i, tk.Num, last, params)
					}
					last = tk.Num
				}
			}
		}
		if !questions && params != 0 {
			t.Fatalf("%q: %d placeholders counted without questions", sql, params)
		}
		_ = Text(toks)
	})
}

// BenchmarkLex lexes a WHERE clause as GORM builds it, reusing the token
// buffer as the plugin's routing does.
func BenchmarkLex(b *testing.B) {
	b.ReportAllocs()
	sql := `"photos"."user_id" = $1 AND ("photos"."id" IN ($2,$3,$4) OR "photos"."likes" > $5) AND "photos"."deleted_at" IS NULL`
	var buf []Token
	for b.Loop() {
		toks, _, ok := Lex(sql, false, buf)
		if !ok {
			b.Fatal("not lexed")
		}
		buf = toks
	}
}
