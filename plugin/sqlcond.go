package plugin

import (
	"strings"
)

// A conservative reader of SQL conditions. It reads the WHERE text GORM
// builds (or a condition fragment a caller wrote) as Postgres would, and
// finds the shard constraints in it: equality and IN on a column, under
// AND and OR. Everything it does not understand is "no constraint" for
// its part; so the shards it returns always hold every row the condition
// can match (the statement's rows are a subset of the union of those
// shards' rows), never fewer.

// tokKind is the kind of a lexical token of a condition.
type tokKind uint8

const (
	tIdent  tokKind = iota + 1 // identifier or keyword; text lowered unless quoted
	tParam                     // $n (built SQL) or ? (fragment); n in num
	tNumber                    // numeric literal
	tString                    // '…' literal, text unescaped
	tOp                        // a run of operator characters
	tLParen
	tRParen
	tComma
	tDot
)

type token struct {
	kind   tokKind
	text   string
	quoted bool // a "quoted" identifier
	num    int  // tParam: 0-based index of the bind variable
	match  int  // tLParen: index of the matching tRParen
}

// lex splits a condition into tokens. It reports ok=false for anything
// whose extent it cannot be sure of: unbalanced parentheses or quotes,
// comments, statement separators, dollar quoting, escape strings.
// Question marks are placeholders when questions is set (a fragment
// before GORM binds it), counted as GORM counts them: every '?' byte,
// quoted or not, takes the next variable.
func lex(sql string, questions bool, buf []token) (toks []token, params int, ok bool) {
	toks = buf[:0]
	var open []int
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
		case c == '(' || c == '[':
			open = append(open, len(toks))
			toks = append(toks, token{kind: tLParen, text: string(c)})
			i++
		case c == ')' || c == ']':
			if len(open) == 0 {
				return nil, 0, false
			}
			o := open[len(open)-1]
			open = open[:len(open)-1]
			if (c == ')') != (toks[o].text == "(") {
				return nil, 0, false
			}
			toks[o].match = len(toks)
			toks = append(toks, token{kind: tRParen})
			i++
		case c == ',':
			toks = append(toks, token{kind: tComma})
			i++
		case c == ';':
			return nil, 0, false
		case c == '.' && (i+1 >= len(sql) || !isDigit(sql[i+1])):
			toks = append(toks, token{kind: tDot})
			i++
		case c == '\'':
			s, n, q, good := quoted(sql[i:], '\'')
			if !good {
				return nil, 0, false
			}
			if len(toks) > 0 && toks[len(toks)-1].kind == tIdent && !toks[len(toks)-1].quoted && adjacent(sql, i) {
				return nil, 0, false // E'…', B'…', U&'…': escapes we do not read
			}
			if questions {
				params += q
			}
			toks = append(toks, token{kind: tString, text: s})
			i += n
		case c == '"':
			s, n, q, good := quoted(sql[i:], '"')
			if !good || s == "" {
				return nil, 0, false
			}
			if questions {
				params += q
			}
			toks = append(toks, token{kind: tIdent, text: s, quoted: true})
			i += n
		case c == '?' && questions:
			toks = append(toks, token{kind: tParam, num: params})
			params++
			i++
		case c == '$':
			j := i + 1
			for j < len(sql) && isDigit(sql[j]) {
				j++
			}
			if j == i+1 || j < len(sql) && isIdentByte(sql[j]) {
				return nil, 0, false // $tag$ quoting, or $ inside a name
			}
			n := 0
			for _, d := range sql[i+1 : j] {
				n = n*10 + int(d-'0')
				if n > 1<<20 {
					return nil, 0, false
				}
			}
			if n == 0 {
				return nil, 0, false
			}
			toks = append(toks, token{kind: tParam, num: n - 1})
			i = j
		case isDigit(c) || c == '.':
			j := i
			for j < len(sql) && (isIdentByte(sql[j]) || sql[j] == '.' ||
				(sql[j] == '+' || sql[j] == '-') && (sql[j-1] == 'e' || sql[j-1] == 'E')) {
				j++
			}
			toks = append(toks, token{kind: tNumber, text: sql[i:j]})
			i = j
		case isIdentStart(c):
			j := i
			for j < len(sql) && isIdentByte(sql[j]) {
				j++
			}
			toks = append(toks, token{kind: tIdent, text: strings.ToLower(sql[i:j])})
			i = j
		default:
			j := i
			for j < len(sql) && isOpByte(sql[j]) && !(questions && sql[j] == '?') {
				if sql[j] == '-' && j+1 < len(sql) && sql[j+1] == '-' || sql[j] == '/' && j+1 < len(sql) && sql[j+1] == '*' {
					return nil, 0, false // a comment
				}
				j++
			}
			if j == i {
				return nil, 0, false // a byte we do not know
			}
			toks = append(toks, token{kind: tOp, text: sql[i:j]})
			i = j
		}
	}
	if len(open) != 0 {
		return nil, 0, false
	}
	return toks, params, true
}

// quoted reads a literal or identifier quoted by q (doubled q escapes
// it). It returns the text, the bytes read and the '?' bytes inside.
func quoted(s string, q byte) (text string, n, questions int, ok bool) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case q:
			if i+1 < len(s) && s[i+1] == q {
				b.WriteByte(q)
				i++
				continue
			}
			return b.String(), i + 1, questions, true
		case '?':
			questions++
		}
		b.WriteByte(s[i])
	}
	return "", 0, 0, false
}

// adjacent reports whether the byte before i is part of the token before.
func adjacent(sql string, i int) bool { return i > 0 && isIdentByte(sql[i-1]) }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isIdentStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}
func isIdentByte(c byte) bool { return isIdentStart(c) || isDigit(c) || c == '$' }
func isOpByte(c byte) bool    { return strings.IndexByte("+-*/<>=~!@#%^&|`?:", c) >= 0 }

// keyword reports whether t is the unquoted keyword k (lower case).
func (t token) keyword(k string) bool { return t.kind == tIdent && !t.quoted && t.text == k }

// expr reads toks[lo:hi], one whole boolean expression.
func (r *condReader) expr(lo, hi int) (shardSet, error) {
	if lo >= hi {
		return shardSet{}, nil
	}
	// Keywords whose syntax holds AND at this level: the expression is
	// read as a whole, unconstrained.
	for i := lo; i < hi; i++ {
		t := r.toks[i]
		if t.kind == tLParen {
			i = t.match
			continue
		}
		if t.keyword("between") || t.keyword("case") {
			return shardSet{}, nil
		}
	}
	if parts := r.split(lo, hi, "or"); len(parts) > 1 {
		var out shardSet
		for i, pt := range parts {
			s, err := r.expr(pt[0], pt[1])
			if err != nil {
				return shardSet{}, err
			}
			if !s.known {
				return shardSet{}, nil
			}
			if i == 0 {
				out = s
			} else {
				out = out.or(s)
			}
		}
		return out, nil
	}
	if parts := r.split(lo, hi, "and"); len(parts) > 1 {
		var out shardSet
		for _, pt := range parts {
			s, err := r.expr(pt[0], pt[1])
			if err != nil {
				return shardSet{}, err
			}
			out = out.and(s)
		}
		return out, nil
	}
	first := r.toks[lo]
	if first.keyword("not") {
		return shardSet{}, nil
	}
	if first.kind == tLParen && first.match == hi-1 {
		if lo+1 < hi-1 {
			if n := r.toks[lo+1]; n.keyword("select") || n.keyword("with") || n.keyword("values") || n.keyword("table") {
				return shardSet{}, nil
			}
		}
		return r.expr(lo+1, hi-1)
	}
	return r.atom(lo, hi)
}

// split cuts toks[lo:hi] at the keyword kw outside parentheses.
func (r *condReader) split(lo, hi int, kw string) [][2]int {
	var parts [][2]int
	start := lo
	for i := lo; i < hi; i++ {
		t := r.toks[i]
		if t.kind == tLParen {
			i = t.match
			continue
		}
		if t.keyword(kw) {
			parts = append(parts, [2]int{start, i})
			start = i + 1
		}
	}
	if parts == nil {
		return nil
	}
	return append(parts, [2]int{start, hi})
}

// atom reads `col = v`, `v = col`, `col IN (v, …)`; anything else is
// unconstrained.
func (r *condReader) atom(lo, hi int) (shardSet, error) {
	col, rest := r.columnRef(lo, hi)
	if col != nil {
		k := r.column(col)
		if k == 0 {
			return shardSet{}, nil
		}
		switch {
		case rest+2 == hi && r.toks[rest].kind == tOp && r.toks[rest].text == "=" && isValue(r.toks[rest+1]):
			return r.values(k, r.toks[rest+1:hi])
		case rest+2 == hi && r.toks[rest].keyword("in") && r.toks[rest+1].kind == tParam:
			return r.values(k, r.toks[rest+1:hi]) // `col IN ?` before GORM expands the list
		case rest+2 < hi && r.toks[rest].keyword("in") && r.toks[rest+1].kind == tLParen && r.toks[rest+1].match == hi-1:
			var vals []token
			for i := rest + 2; i < hi-1; i += 2 {
				if !isValue(r.toks[i]) || (i+1 < hi-1 && r.toks[i+1].kind != tComma) {
					return shardSet{}, nil
				}
				vals = append(vals, r.toks[i])
			}
			return r.values(k, vals)
		}
		return shardSet{}, nil
	}
	// v = col
	if lo+2 < hi && isValue(r.toks[lo]) && r.toks[lo+1].kind == tOp && r.toks[lo+1].text == "=" {
		if col, rest := r.columnRef(lo+2, hi); col != nil && rest == hi {
			if k := r.column(col); k != 0 {
				return r.values(k, r.toks[lo:lo+1])
			}
		}
	}
	return shardSet{}, nil
}

// columnRef reads ident(.ident)* at lo; it returns nil if there is none.
func (r *condReader) columnRef(lo, hi int) ([]token, int) {
	i := lo
	for i < hi && r.toks[i].kind == tIdent && !isReserved(r.toks[i]) {
		i++
		if i < hi && r.toks[i].kind == tDot {
			i++
			continue
		}
		return r.toks[lo:i], i
	}
	return nil, lo
}

func isValue(t token) bool { return t.kind == tParam || t.kind == tNumber || t.kind == tString }

// isReserved reports keywords that cannot name a column unquoted.
func isReserved(t token) bool {
	if t.quoted {
		return false
	}
	switch t.text {
	case "not", "and", "or", "in", "is", "null", "true", "false", "select", "case", "exists", "any", "all", "some", "array", "row", "interval", "cast":
		return true
	}
	return false
}
