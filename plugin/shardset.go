package plugin

// shardSet is what a condition says about the logical shards of the rows
// it can match: nothing (!known), every shard (all: AllShards), or a
// sorted list (possibly empty: no row can match).
type shardSet struct {
	known bool  // some condition constrains the shard
	all   bool  // every shard (AllShards)
	list  []int // sorted, unique; empty with known && !all: nothing matches
}

// singles backs the one-shard lists, so that routing to one shard does
// not allocate. Lists are never written in place (add copies on growth).
var singles = func() []int {
	s := make([]int, 1<<14)
	for i := range s {
		s[i] = i
	}
	return s
}()

func one(s int) shardSet {
	if s >= 0 && s < len(singles) {
		return shardSet{known: true, list: singles[s : s+1 : s+1]}
	}
	return shardSet{known: true, list: []int{s}}
}

// none is the set of a condition no row can match.
var none = shardSet{known: true}

// and intersects two constraints (both conditions hold).
func (a shardSet) and(b shardSet) shardSet {
	switch {
	case !a.known || a.all:
		if a.all && !b.known {
			return a
		}
		return b
	case !b.known || b.all:
		return a
	}
	if len(a.list) == 1 && len(b.list) == 1 {
		if a.list[0] == b.list[0] {
			return a
		}
		return none
	}
	var out []int
	for _, x := range a.list {
		for _, y := range b.list {
			if x == y {
				out = append(out, x)
				break
			}
		}
	}
	return shardSet{known: true, list: out}
}

// or unites two constraints (either condition holds). Unknown on either
// side leaves the union unknown.
func (a shardSet) or(b shardSet) shardSet {
	switch {
	case !a.known || !b.known:
		return shardSet{}
	case a.all:
		return a
	case b.all:
		return b
	}
	out := a.list
	for _, s := range b.list {
		out = add(out, s)
	}
	return shardSet{known: true, list: out}
}

// add inserts a shard into a sorted list, copying it.
func add(list []int, s int) []int {
	if len(list) == 0 {
		return one(s).list
	}
	for i, x := range list {
		if x == s {
			return list
		}
		if x > s {
			out := make([]int, 0, len(list)+1)
			out = append(out, list[:i]...)
			out = append(out, s)
			return append(out, list[i:]...)
		}
	}
	out := make([]int, 0, len(list)+1)
	out = append(out, list...)
	return append(out, s)
}
