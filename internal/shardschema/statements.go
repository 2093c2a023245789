package shardschema

import (
	"regexp"
	"strings"
)

// NoTransactionMarker is migrations.NoTransactionMarker, documented there:
// the line that marks a per-shard SQL file to run outside a transaction.
const NoTransactionMarker = "-- shardkit:no-transaction"

// noTransaction reports whether sql carries NoTransactionMarker on a line
// of its own.
func noTransaction(sql string) bool {
	for _, line := range strings.Split(sql, "\n") {
		if strings.TrimSpace(line) == NoTransactionMarker {
			return true
		}
	}
	return false
}

// splitStatements splits SQL text at the semicolons that end statements:
// those outside quotes ('…', "…", E'…'), comments (-- and nested /* */)
// and dollar-quoted bodies ($$…$$, $tag$…$tag$). Empty statements and
// statements of comments only are dropped; each statement keeps its text
// without the semicolon.
func splitStatements(sql string) []string {
	var out []string
	start := 0
	emit := func(end int) {
		if s := strings.TrimSpace(sql[start:end]); s != "" && !onlyComments(s) {
			out = append(out, s)
		}
	}
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == '\'' && i > 0 && (sql[i-1] == 'E' || sql[i-1] == 'e') && (i == 1 || !isIdentByte(sql[i-2])):
			i = skipEscaped(sql, i)
		case c == '\'' || c == '"':
			i = skipQuoted(sql, i, c)
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			if j := strings.IndexByte(sql[i:], '\n'); j >= 0 {
				i += j + 1
			} else {
				i = len(sql)
			}
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			i = skipBlockComment(sql, i)
		case c == '$':
			i = skipDollar(sql, i)
		case c == ';':
			emit(i)
			i++
			start = i
		default:
			i++
		}
	}
	emit(len(sql))
	return out
}

// skipQuoted returns the index after the quoted run opened at i; a
// doubled quote is part of the run.
func skipQuoted(sql string, i int, q byte) int {
	for j := i + 1; j < len(sql); j++ {
		if sql[j] == q {
			if j+1 < len(sql) && sql[j+1] == q {
				j++
				continue
			}
			return j + 1
		}
	}
	return len(sql)
}

// skipEscaped returns the index after the E'…' string opened at i, where
// a backslash escapes the next byte.
func skipEscaped(sql string, i int) int {
	for j := i + 1; j < len(sql); j++ {
		switch {
		case sql[j] == '\\':
			j++
		case sql[j] == '\'' && j+1 < len(sql) && sql[j+1] == '\'':
			j++
		case sql[j] == '\'':
			return j + 1
		}
	}
	return len(sql)
}

func skipBlockComment(sql string, i int) int {
	depth := 0
	for j := i; j+1 < len(sql); j++ {
		switch {
		case sql[j] == '/' && sql[j+1] == '*':
			depth++
			j++
		case sql[j] == '*' && sql[j+1] == '/':
			depth--
			j++
			if depth == 0 {
				return j + 1
			}
		}
	}
	return len(sql)
}

var dollarTagRE = regexp.MustCompile(`^\$([A-Za-z_][A-Za-z0-9_]*)?\$`)

// skipDollar returns the index after a dollar-quoted body opened at i, or
// i+1 when the $ opens none (a parameter such as $1).
func skipDollar(sql string, i int) int {
	if i > 0 && isIdentByte(sql[i-1]) {
		return i + 1 // part of an identifier such as a$b
	}
	tag := dollarTagRE.FindString(sql[i:])
	if tag == "" {
		return i + 1
	}
	end := strings.Index(sql[i+len(tag):], tag)
	if end < 0 {
		return len(sql)
	}
	return i + len(tag) + end + len(tag)
}

func isIdentByte(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// onlyComments reports whether s holds nothing but comments and space.
func onlyComments(s string) bool {
	for i := 0; i < len(s); {
		switch {
		case s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r':
			i++
		case strings.HasPrefix(s[i:], "--"):
			j := strings.IndexByte(s[i:], '\n')
			if j < 0 {
				return true
			}
			i += j + 1
		case strings.HasPrefix(s[i:], "/*"):
			i = skipBlockComment(s, i)
		default:
			return false
		}
	}
	return true
}

// concurrentIndexRE finds the name of the index a CREATE INDEX
// CONCURRENTLY statement builds (after leading comments are stripped).
var concurrentIndexRE = regexp.MustCompile(`(?is)^CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+(?:IF\s+NOT\s+EXISTS\s+)?("(?:[^"]|"")+"|[A-Za-z_][A-Za-z0-9_$]*)`)

var concurrentlyRE = regexp.MustCompile(`(?is)^CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\b`)

// concurrentIndex returns the name of the index stmt builds concurrently,
// and whether stmt is such a build; a build without a name returns ("",
// true).
func concurrentIndex(stmt string) (string, bool) {
	s := stripLeadingComments(stmt)
	if !concurrentlyRE.MatchString(s) {
		return "", false
	}
	m := concurrentIndexRE.FindStringSubmatch(s)
	if m == nil {
		return "", true
	}
	name := m[1]
	if strings.EqualFold(name, "ON") {
		return "", true
	}
	if strings.HasPrefix(name, `"`) {
		return strings.ReplaceAll(name[1:len(name)-1], `""`, `"`), true
	}
	return strings.ToLower(name), true
}

func stripLeadingComments(s string) string {
	for {
		s = strings.TrimLeft(s, " \t\r\n")
		switch {
		case strings.HasPrefix(s, "--"):
			j := strings.IndexByte(s, '\n')
			if j < 0 {
				return ""
			}
			s = s[j+1:]
		case strings.HasPrefix(s, "/*"):
			s = s[skipBlockComment(s, 0):]
		default:
			return s
		}
	}
}

// inTransaction rewrites a file marked NoTransactionMarker to run in a
// transaction on a schema nobody serves yet: each CREATE INDEX
// CONCURRENTLY becomes a plain CREATE INDEX of the same name and
// definition (the only difference is how the build locks the table).
func inTransaction(sql string) string {
	stmts := splitStatements(sql)
	for i, stmt := range stmts {
		s := stripLeadingComments(stmt)
		if loc := concurrentlyRE.FindStringIndex(s); loc != nil {
			head := s[:loc[1]]
			stmts[i] = head[:len(head)-len("CONCURRENTLY")] + s[loc[1]:]
		}
	}
	return strings.Join(stmts, ";\n")
}
