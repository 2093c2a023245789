package plugin

import (
	"fmt"
	"slices"

	"gorm.io/gorm"

	"github.com/shardkit/shardkit/internal/sqlcond"
)

// Function calls in a read of rows across shards: windows partitioned by
// the shard key run per shard; anything else is refused.

// windowsPerShard checks the function calls in the select list of a
// multi-shard read of rows. A window whose PARTITION BY includes the
// shard key (or the primary key) sees the rows of one shard only, so
// each shard computes it as one table would, and the rows merge like any
// others. Any other call is refused: an aggregate or a window over rows
// of several shards would be computed per shard, and the plugin cannot
// tell a user-defined aggregate from a function of one row.
func windowsPerShard(stmt *gorm.Statement, m *model) error {
	text, _, _, err := selectText(stmt)
	if err != nil {
		return err
	}
	toks, _, ok := sqlcond.Lex(text, false, nil)
	if !ok {
		return fmt.Errorf("%w: select list %q cannot be read to merge it across shards; scope the query to one shard", ErrUnroutableSQL, text)
	}
	keys := []string{m.key.DBName, m.pk.DBName}
	for i := 0; i < len(toks); i++ {
		if !isCall(toks, i) {
			continue
		}
		src := sqlcond.Text(toks[i:min(sqlcond.Closing(toks, i+1)+1, len(toks))])
		end, why := windowCall(toks, i, keys)
		if why != "" {
			return fmt.Errorf("%w: %s in the select list across shards: %s; select plain columns, a window partitioned by %s, or scope the query to one shard", ErrUnroutableSQL, src, why, m.key.DBName)
		}
		i = end
	}
	return nil
}

// isCall reports a function call at toks[i]: a name and its parenthesis.
func isCall(toks []sqlcond.Token, i int) bool {
	t := toks[i]
	return t.Kind == sqlcond.Ident && !t.Quoted && !sqlcond.IsReserved(t) && i+1 < len(toks) && toks[i+1].Kind == sqlcond.LParen
}

// windowCall reads the call at toks[i] as a window computed within one
// shard: f(args) OVER (PARTITION BY …, a key column, … [ORDER BY …]),
// with no call in its arguments or its window. It returns the index of
// the last token it read, and why it is not one ("" when it is).
func windowCall(toks []sqlcond.Token, i int, keys []string) (int, string) {
	end := sqlcond.Closing(toks, i+1)
	for j := i + 2; j < end; j++ {
		if isCall(toks, j) {
			return end, "only a window of plain columns runs per shard"
		}
	}
	if end+1 >= len(toks) || !toks[end+1].Keyword("over") {
		return end, "a function other than a window cannot be merged (an aggregate's rows span shards)"
	}
	j := end + 2
	if j >= len(toks) || toks[j].Kind != sqlcond.LParen {
		return end, "a named window cannot be read"
	}
	wend := sqlcond.Closing(toks, j)
	spec := toks[j+1 : wend]
	for k := range spec {
		if isCall(spec, k) || spec[k].Keyword("select") {
			return wend, "only a window of plain columns runs per shard"
		}
	}
	if len(spec) < 3 || !spec[0].Keyword("partition") || !spec[1].Keyword("by") {
		return wend, "a window without PARTITION BY spans every shard's rows"
	}
	k := 2
	for k < len(spec) {
		col, next := sqlcond.ColumnAt(spec, k)
		if col != "" && slices.Contains(keys, col) && (next == len(spec) || spec[next].Kind == sqlcond.Comma || spec[next].Keyword("order") ||
			spec[next].Keyword("rows") || spec[next].Keyword("range") || spec[next].Keyword("groups")) {
			return wend, ""
		}
		// to the next partition term
		for k < len(spec) && spec[k].Kind != sqlcond.Comma {
			if spec[k].Keyword("order") || spec[k].Keyword("rows") || spec[k].Keyword("range") || spec[k].Keyword("groups") {
				return wend, "its PARTITION BY does not include the shard key, so a partition spans shards"
			}
			if spec[k].Kind == sqlcond.LParen {
				k = sqlcond.Closing(spec, k)
			}
			k++
		}
		k++
	}
	return wend, "its PARTITION BY does not include the shard key, so a partition spans shards"
}

// aggregateCall reports whether a select list calls an aggregate the
// plugin knows (not as a window): such a read is an aggregate read; any
// other call is read as rows (and refused there unless a window runs per
// shard, windowsPerShard).
func aggregateCall(text string) bool {
	toks, _, ok := sqlcond.Lex(text, false, nil)
	if !ok {
		return true
	}
	for i := 0; i < len(toks); i++ {
		if !isCall(toks, i) {
			continue
		}
		end := sqlcond.Closing(toks, i+1)
		window := end+1 < len(toks) && toks[end+1].Keyword("over")
		if !window && (aggNames[toks[i].Text] != 0 || notCombined[toks[i].Text]) {
			return true
		}
	}
	return false
}
