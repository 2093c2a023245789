package docscheck

import (
	"fmt"
	"regexp"
	"strings"
)

// The manual says what is. Three kinds of drift turn a page into a lab
// notebook, and Drift finds each in a page's text:
//
//   - a commit hash: a page that cites a commit tells history, which is
//     git's and CHANGELOG.md's;
//   - a figure in prose beside a maintained table: in a section (a "## "
//     heading to the next) that holds a table between figures: markers, a
//     measurement written in a paragraph is one make figures does not
//     re-take, so it drifts from the table beside it;
//   - a table of figures outside the markers: a table at least half of
//     whose rows hold a figure (a table of settings or steps that names a
//     default here and there is not one), which no command re-takes and no
//     check compares with its results.
//
// What reads as a figure is a number with a unit of time, size or share
// (245 ms, 1.5–1.6 s, 94 MB, 5%) or a ratio (1.8×, 3x). A setting written
// in prose beside a table ("a 3 s lease") is a number with a unit too: an
// Allow entry names it, with the reason, and an entry that matches nothing
// is reported, so the list cannot outlive the text.

// A Finding is one drift on a page: its line (1-based), its kind and the
// text that drifted.
type Finding struct {
	Line int
	Kind string // "commit", "prose figure" or "loose table"
	Text string
}

func (f Finding) String() string {
	switch f.Kind {
	case KindCommit:
		return fmt.Sprintf("%d: %q reads as a commit hash: history goes to CHANGELOG.md and git, not docs/", f.Line, f.Text)
	case KindProseFigure:
		return fmt.Sprintf("%d: %q is a figure in prose in a section with a maintained table: put it in the table (a Row or Note of docscheck.Figures), or drop it", f.Line, f.Text)
	case KindLooseTable:
		return fmt.Sprintf("%d: a table of figures outside figures: markers (%q): declare it in docscheck.Figures with its command, or remove it and name the command that measures it", f.Line, f.Text)
	case KindUnusedAllow:
		return fmt.Sprintf("allow entry %q matches nothing on the page: remove it from docscheck.Allowed", f.Text)
	}
	return fmt.Sprintf("%d: %s %q", f.Line, f.Kind, f.Text)
}

// The kinds of Finding.
const (
	KindCommit      = "commit"
	KindProseFigure = "prose figure"
	KindLooseTable  = "loose table"
	KindUnusedAllow = "unused allow entry"
)

// An Allow entry exempts text of one page from a kind of drift: Text is
// the hex run (KindCommit), a phrase of the paragraph holding the number
// (KindProseFigure), or a phrase of the table's header row
// (KindLooseTable).
type Allow struct {
	Kind, Text, Why string
}

// Allowed are the exemptions of docs/, by page (relative to the module's
// root).
var Allowed = map[string][]Allow{
	"docs/performance.md": {
		{KindProseFigure, "the 100 ms borrow allowance", "idgen's setting"},
		{KindProseFigure, "windows of 15 s before each change", "the test's setting"},
		{KindProseFigure, "a 3 s lease, a watcher polling every 200 ms", "the test's settings"},
		{KindProseFigure, "no server backend holds more than 64 MB of private memory, and the service's live heap stays within 1.5×", "the bounds the pooled demo checks"},
	},
	"docs/transactions.md": {
		{KindCommit, "9f86d081884c7d65", "an example of a two-phase commit's nonce in a prepared transaction's identifier"},
	},
}

var (
	// hexRE finds runs of lowercase hex digits that stand alone: not part
	// of a longer word or number. A commit is named by 7 to 40 of them; a
	// longer run (a sha256) is a digest, not a commit.
	hexRE = regexp.MustCompile(`[0-9A-Za-z_]+`)
	// figureRE finds a measurement: a number or a range of numbers with
	// a unit of time, size or share after a space or none, or a ratio
	// (× or x right after the number).
	figureRE   = regexp.MustCompile(`(?:^|[^\w.,/+-])([+-]?\d[\d,]*(?:\.\d+)?(?:\s?[–-]\s?[+-]?\d[\d,]*(?:\.\d+)?)?(?:\s?(?:ns|µs|us|ms|s|sec|seconds?|min|minutes?|h|hours?|B|kB|KB|KiB|MB|MiB|GB|GiB|TB)\b|%|×|x\b))`)
	codeSpanRE = regexp.MustCompile("`[^`]*`")
	linkURLRE  = regexp.MustCompile(`\]\([^)]*\)`)
	commentRE  = regexp.MustCompile(`<!--.*?-->`)
	markerRE   = regexp.MustCompile(`^<!-- (/?)figures:([A-Za-z0-9_-]+) -->\s*$`)
	fenceOpen  = regexp.MustCompile("^\\s*(`{3,}|~{3,})")
)

// isCommit reports whether a word reads as a commit hash: 7 to 40
// lowercase hex digits with both a digit and a letter, which a number
// (1000000) and an English word (defaced) are not.
func isCommit(w string) bool {
	if len(w) < 7 || len(w) > 40 {
		return false
	}
	digit, letter := false, false
	for _, r := range w {
		switch {
		case r >= '0' && r <= '9':
			digit = true
		case r >= 'a' && r <= 'f':
			letter = true
		default:
			return false
		}
	}
	return digit && letter
}

// mdLine is a line of a page and what it is.
type mdLine struct {
	text       string
	code       bool // inside a fenced block, or a fence
	maintained bool // between figures: markers, or a marker
}

func classify(src string) []mdLine {
	var out []mdLine
	var fence, figure string
	for _, l := range strings.Split(src, "\n") {
		ml := mdLine{text: l}
		if m := markerRE.FindStringSubmatch(l); m != nil && fence == "" {
			if m[1] == "" {
				figure = m[2]
			} else if figure == m[2] {
				figure = ""
			}
			ml.maintained = true
			out = append(out, ml)
			continue
		}
		ml.maintained = figure != ""
		t := strings.TrimSpace(l)
		switch {
		case fence != "":
			ml.code = true
			if strings.HasPrefix(t, fence) && strings.Trim(t, fence[:1]) == "" {
				fence = ""
			}
		default:
			if m := fenceOpen.FindStringSubmatch(l); m != nil {
				fence = m[1]
				ml.code = true
			}
		}
		out = append(out, ml)
	}
	return out
}

// plain is a prose line as the checks read it: code spans, link targets
// and HTML comments dropped (a code span leaves a mark, so that "2000
// `COPY`s" does not read as 2000 s).
func plain(l string) string {
	l = codeSpanRE.ReplaceAllString(l, "·")
	l = linkURLRE.ReplaceAllString(l, "]")
	return commentRE.ReplaceAllString(l, "")
}

// figures returns the measurements in a prose line.
func figures(l string) []string {
	var out []string
	for _, m := range figureRE.FindAllStringSubmatch(plain(l), -1) {
		out = append(out, strings.TrimSpace(m[1]))
	}
	return out
}

// Drift returns the drift of one page, src, named page (for its Allowed
// entries), in the order of its lines.
func Drift(page, src string) []Finding {
	allow := Allowed[page]
	used := make([]bool, len(allow))
	// allowed reports whether an entry of kind exempts text (and, for a
	// figure in prose, holds the figure f), and marks the entry used.
	allowed := func(kind, text, f string) bool {
		for i, a := range allow {
			if a.Kind == kind && strings.Contains(text, a.Text) && strings.Contains(a.Text, f) {
				used[i] = true
				return true
			}
		}
		return false
	}
	lines := classify(src)
	var out []Finding

	// Commit hashes, anywhere on the page, code blocks included.
	for i, l := range lines {
		for _, w := range hexRE.FindAllString(l.text, -1) {
			if isCommit(w) && !allowed(KindCommit, w, w) {
				out = append(out, Finding{i + 1, KindCommit, w})
			}
		}
	}

	// Sections that hold a maintained table.
	type section struct{ from, to int }
	var sections []section
	start := 0
	for i, l := range lines {
		if !l.code && !l.maintained && strings.HasPrefix(l.text, "## ") {
			sections = append(sections, section{start, i})
			start = i
		}
	}
	sections = append(sections, section{start, len(lines)})
	for _, s := range sections {
		hasTable := false
		for _, l := range lines[s.from:s.to] {
			if markerRE.MatchString(l.text) {
				hasTable = true
			}
		}
		if !hasTable {
			continue
		}
		// A paragraph's lines are read together, so that an Allow phrase
		// may span a line break.
		for i := s.from; i < s.to; i++ {
			if !prose(lines[i]) {
				continue
			}
			j := i
			var para []string
			for j < s.to && prose(lines[j]) && strings.TrimSpace(lines[j].text) != "" {
				para = append(para, lines[j].text)
				j++
			}
			text := strings.Join(strings.Fields(strings.Join(para, " ")), " ")
			for k, l := range para {
				for _, f := range figures(l) {
					if !allowed(KindProseFigure, text, f) {
						out = append(out, Finding{i + k + 1, KindProseFigure, f})
					}
				}
			}
			if j > i {
				i = j - 1
			}
		}
	}

	// Tables of figures outside the markers, anywhere on the page.
	for i := 0; i < len(lines); i++ {
		if lines[i].code || lines[i].maintained || !strings.HasPrefix(strings.TrimSpace(lines[i].text), "|") {
			continue
		}
		j := i
		rows, measured := 0, 0
		for j < len(lines) && !lines[j].code && !lines[j].maintained && strings.HasPrefix(strings.TrimSpace(lines[j].text), "|") {
			if j > i+1 {
				rows++
				if len(figures(strings.ReplaceAll(lines[j].text, "|", " | "))) > 0 {
					measured++
				}
			}
			j++
		}
		if rows > 0 && 2*measured >= rows && !allowed(KindLooseTable, lines[i].text, "") {
			out = append(out, Finding{i + 1, KindLooseTable, strings.TrimSpace(lines[i].text)})
		}
		i = j - 1
	}

	for i, a := range allow {
		if !used[i] {
			out = append(out, Finding{0, KindUnusedAllow, a.Text})
		}
	}
	return out
}

func prose(l mdLine) bool {
	t := strings.TrimSpace(l.text)
	return !l.code && !l.maintained && !strings.HasPrefix(t, "|") && !strings.HasPrefix(t, "#")
}
