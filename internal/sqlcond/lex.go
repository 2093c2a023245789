// Package sqlcond is a conservative lexer of the SQL that GORM builds and
// that callers write as conditions and select lists: it splits text into
// tokens as Postgres would, and refuses (ok=false) anything whose extent
// it cannot be sure of, so that a reader built on it never mistakes a
// literal, a comment or a quoted name for structure.
package sqlcond

import "strings"

// Kind is the kind of a token.
type Kind uint8

// The kinds of tokens.
const (
	Ident  Kind = iota + 1 // identifier or keyword; text lowered unless quoted
	Param                  // $n (built SQL) or ? (fragment); n in Num
	Number                 // numeric literal
	String                 // '…' literal, text unescaped
	Op                     // a run of operator characters
	LParen                 // ( or [
	RParen                 // ) or ]
	Comma
	Dot
)

// Token is one lexical token.
type Token struct {
	Kind   Kind
	Text   string
	Quoted bool // a "quoted" identifier
	Num    int  // Param: 0-based index of the bind variable
	Match  int  // LParen: index of the matching RParen in the whole token list
}

// Keyword reports whether t is the unquoted keyword k (lower case).
func (t Token) Keyword(k string) bool { return t.Kind == Ident && !t.Quoted && t.Text == k }

// Lex splits SQL text into tokens, reusing buf. It reports ok=false for
// anything whose extent it cannot be sure of: unbalanced parentheses or
// quotes, comments, statement separators, dollar quoting, escape
// strings. Question marks are placeholders when questions is set (a
// fragment before GORM binds it), counted as GORM counts them: every '?'
// byte, quoted or not, takes the next variable; params is their number.
func Lex(sql string, questions bool, buf []Token) (toks []Token, params int, ok bool) {
	l := lexer{sql: sql, questions: questions, toks: buf[:0]}
	for l.i < len(sql) {
		if !l.next() {
			return nil, 0, false
		}
	}
	if len(l.open) != 0 {
		return nil, 0, false
	}
	return l.toks, l.params, true
}

type lexer struct {
	sql       string
	questions bool
	i         int
	toks      []Token
	open      []int // indexes of the LParens not yet closed
	params    int
}

// next reads the token (or blank) at l.i; false: the text is refused.
func (l *lexer) next() bool {
	sql, i := l.sql, l.i
	c := sql[i]
	switch {
	case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
		l.i++
	case c == '(' || c == '[':
		l.open = append(l.open, len(l.toks))
		l.toks = append(l.toks, Token{Kind: LParen, Text: string(c)})
		l.i++
	case c == ')' || c == ']':
		return l.close(c)
	case c == ',':
		l.toks = append(l.toks, Token{Kind: Comma})
		l.i++
	case c == ';':
		return false
	case c == '.' && (i+1 >= len(sql) || !IsDigit(sql[i+1])):
		l.toks = append(l.toks, Token{Kind: Dot})
		l.i++
	case c == '\'':
		if n := len(l.toks); n > 0 && l.toks[n-1].Kind == Ident && !l.toks[n-1].Quoted && i > 0 && IsIdentByte(sql[i-1]) {
			return false // E'…', B'…', U&'…': escapes not read
		}
		return l.quoted('\'', String)
	case c == '"':
		return l.quoted('"', Ident)
	case c == '?' && l.questions:
		l.toks = append(l.toks, Token{Kind: Param, Num: l.params})
		l.params++
		l.i++
	case c == '$':
		return l.dollar()
	case IsDigit(c) || c == '.':
		j := i
		for j < len(sql) && (IsIdentByte(sql[j]) || sql[j] == '.' ||
			(sql[j] == '+' || sql[j] == '-') && (sql[j-1] == 'e' || sql[j-1] == 'E')) {
			j++
		}
		l.toks = append(l.toks, Token{Kind: Number, Text: sql[i:j]})
		l.i = j
	case IsIdentStart(c):
		j := i
		for j < len(sql) && IsIdentByte(sql[j]) {
			j++
		}
		l.toks = append(l.toks, Token{Kind: Ident, Text: strings.ToLower(sql[i:j])})
		l.i = j
	default:
		return l.operator()
	}
	return true
}

func (l *lexer) close(c byte) bool {
	if len(l.open) == 0 {
		return false
	}
	o := l.open[len(l.open)-1]
	l.open = l.open[:len(l.open)-1]
	if (c == ')') != (l.toks[o].Text == "(") {
		return false
	}
	l.toks[o].Match = len(l.toks)
	l.toks = append(l.toks, Token{Kind: RParen})
	l.i++
	return true
}

// quoted reads a literal or identifier quoted by q (doubled q escapes
// it); with questions set, the '?' bytes inside take variables, as GORM
// counts them.
func (l *lexer) quoted(q byte, kind Kind) bool {
	s := l.sql[l.i:]
	var b strings.Builder
	questions := 0
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case q:
			if i+1 < len(s) && s[i+1] == q {
				b.WriteByte(q)
				i++
				continue
			}
			if kind == Ident && b.Len() == 0 {
				return false // "" names nothing
			}
			if l.questions {
				l.params += questions
			}
			l.toks = append(l.toks, Token{Kind: kind, Text: b.String(), Quoted: kind == Ident})
			l.i += i + 1
			return true
		case '?':
			questions++
		}
		b.WriteByte(s[i])
	}
	return false
}

// dollar reads $n; $tag$ quoting and $ inside a name are refused.
func (l *lexer) dollar() bool {
	sql, i := l.sql, l.i
	j := i + 1
	for j < len(sql) && IsDigit(sql[j]) {
		j++
	}
	if j == i+1 || j < len(sql) && IsIdentByte(sql[j]) {
		return false
	}
	n := 0
	for _, d := range sql[i+1 : j] {
		n = n*10 + int(d-'0')
		if n > 1<<20 {
			return false
		}
	}
	if n == 0 {
		return false
	}
	l.toks = append(l.toks, Token{Kind: Param, Num: n - 1})
	l.i = j
	return true
}

// operator reads a run of operator bytes; comments and unknown bytes are
// refused.
func (l *lexer) operator() bool {
	sql, i := l.sql, l.i
	j := i
	for j < len(sql) && isOpByte(sql[j]) && !(l.questions && sql[j] == '?') {
		if sql[j] == '-' && j+1 < len(sql) && sql[j+1] == '-' || sql[j] == '/' && j+1 < len(sql) && sql[j+1] == '*' {
			return false
		}
		j++
	}
	if j == i {
		return false
	}
	l.toks = append(l.toks, Token{Kind: Op, Text: sql[i:j]})
	l.i = j
	return true
}

// IsDigit reports an ASCII digit.
func IsDigit(c byte) bool { return c >= '0' && c <= '9' }

// IsIdentStart reports a byte that may start an unquoted identifier.
func IsIdentStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// IsIdentByte reports a byte that may continue an unquoted identifier
// (Postgres allows $ after the first byte).
func IsIdentByte(c byte) bool { return IsIdentStart(c) || IsDigit(c) || c == '$' }

func isOpByte(c byte) bool { return strings.IndexByte("+-*/<>=~!@#%^&|`?:", c) >= 0 }
