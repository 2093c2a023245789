package sqlcond

import "strings"

// Split cuts toks[lo:hi] at the keyword kw outside parentheses; nil when
// kw does not occur there.
func Split(toks []Token, lo, hi int, kw string) [][2]int {
	var parts [][2]int
	start := lo
	for i := lo; i < hi; i++ {
		t := toks[i]
		if t.Kind == LParen {
			i = t.Match
			continue
		}
		if t.Keyword(kw) {
			parts = append(parts, [2]int{start, i})
			start = i + 1
		}
	}
	if parts == nil {
		return nil
	}
	return append(parts, [2]int{start, hi})
}

// Items cuts a whole token list (as Lex returned it) at its top-level
// commas: the items of a select list or an ORDER BY.
func Items(toks []Token) [][]Token {
	var items [][]Token
	start := 0
	for i := 0; i <= len(toks); i++ {
		if i < len(toks) && toks[i].Kind == LParen {
			i = toks[i].Match
			continue
		}
		if i == len(toks) || toks[i].Kind == Comma {
			items = append(items, toks[start:i])
			start = i + 1
		}
	}
	return items
}

// Closing returns the index in t of the parenthesis closing t[i]. It
// counts, because Match indexes the whole list, not a slice of it.
func Closing(t []Token, i int) int {
	depth := 0
	for j := i; j < len(t); j++ {
		switch t[j].Kind {
		case LParen:
			depth++
		case RParen:
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return len(t) - 1
}

// ColumnAt reads name or table.name at toks[i], returning the column and
// the index after it (i when there is none).
func ColumnAt(toks []Token, i int) (string, int) {
	if i >= len(toks) || toks[i].Kind != Ident {
		return "", i
	}
	if i+2 < len(toks) && toks[i+1].Kind == Dot && toks[i+2].Kind == Ident {
		return toks[i+2].Text, i + 3
	}
	return toks[i].Text, i + 1
}

// ColumnRef reads ident(.ident)* at toks[lo:hi]; it returns nil and lo
// if there is none.
func ColumnRef(toks []Token, lo, hi int) ([]Token, int) {
	i := lo
	for i < hi && toks[i].Kind == Ident && !IsReserved(toks[i]) {
		i++
		if i < hi && toks[i].Kind == Dot {
			i++
			continue
		}
		return toks[lo:i], i
	}
	return nil, lo
}

// IsValue reports a token that is one value: a parameter or a literal.
func IsValue(t Token) bool { return t.Kind == Param || t.Kind == Number || t.Kind == String }

// IsReserved reports keywords that cannot name a column unquoted.
func IsReserved(t Token) bool {
	if t.Quoted {
		return false
	}
	switch t.Text {
	case "not", "and", "or", "in", "is", "null", "true", "false", "select", "case", "exists", "any", "all", "some", "array", "row", "interval", "cast":
		return true
	}
	return false
}

// QuoteIdent quotes an identifier as Postgres reads it.
func QuoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// Text prints tokens back in a readable form, for messages.
func Text(t []Token) string {
	var b strings.Builder
	for i, k := range t {
		call := i > 0 && k.Kind == LParen && t[i-1].Kind == Ident && t[i-1].Text != "over" && t[i-1].Text != "filter" && t[i-1].Text != "as"
		if i > 0 && !call && k.Kind != RParen && k.Kind != Comma && k.Kind != Dot && t[i-1].Kind != LParen && t[i-1].Kind != Dot {
			b.WriteByte(' ')
		}
		switch k.Kind {
		case LParen:
			b.WriteByte('(')
		case RParen:
			b.WriteByte(')')
		case Comma:
			b.WriteByte(',')
		case Dot:
			b.WriteByte('.')
		case Param:
			b.WriteByte('?')
		case String:
			b.WriteString("'" + k.Text + "'")
		default:
			if k.Quoted {
				b.WriteString(QuoteIdent(k.Text))
			} else {
				b.WriteString(k.Text)
			}
		}
	}
	return b.String()
}
