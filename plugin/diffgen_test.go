package plugin

import (
	"math"
	"slices"
	"strconv"
)

// The generator of the differential test: a case is a small value that
// describes one GORM statement (where tree, select list, order, limit,
// destination, operation), so that it can be run on both sides, printed
// as Go code and shrunk by dropping parts.

// dop is the GORM call a case ends with.
type dop uint8

const (
	dFind         dop = iota // Find(&[]Photo)
	dFindSmall               // Model(&Photo{}).Find(&[]photoKey)
	dFindMap                 // Model(&Photo{}).Find(&[]map[string]any)
	dFirst                   // First(&Photo)
	dTake                    // Take(&Photo)
	dLast                    // Last(&Photo)
	dCount                   // Model(&Photo{}).Count(&n)
	dPluckID                 // Model(&Photo{}).Pluck("id", &[]int64)
	dPluckCaption            // Model(&Photo{}).Pluck("caption", &[]string)
	dScan                    // Model(&Photo{}).Scan(&[]photoKey)
	dGroup                   // Select("user_id, count(*) AS n").Group("user_id")
	dDistinct                // Distinct("user_id")
	dUpdate                  // Update/Updates/UpdateColumn, see setSpec
	dDelete                  // Delete(&Photo{}) or Delete(&rows) with Returning
	dDeleteIDs               // Delete(&Photo{}, ids)
	dCreate                  // Create(&row) or Create(&rows)
	dSave                    // Save(&row)
	numOps
)

var opNames = [...]string{"find", "find-small-struct", "find-map", "first", "take", "last", "count", "pluck-id", "pluck-caption", "scan", "group", "distinct", "update", "delete", "delete-ids", "create", "save"}

func (o dop) String() string { return opNames[o] }

// write reports whether the operation changes rows.
func (o dop) write() bool { return o >= dUpdate }

// condKind is a leaf or inner node of a where tree.
type condKind uint8

const (
	cKeyEq      condKind = iota // "user_id = ?"
	cKeyIn                      // "user_id IN ?"
	cIDEq                       // "id = ?"
	cIDIn                       // "id IN ?"
	cLikesGt                    // "likes > ?"
	cCaptionEq                  // "caption = ?"
	cStruct                     // &Photo{UserID: u, Caption: s}
	cMap                        // map[string]any{"user_id": u or []int64}
	cClauseIn                   // clause.IN{Column: "user_id", Values: ...}
	cRawOr                      // "user_id = ? OR user_id = ?"
	cRawOrMixed                 // "user_id = ? OR likes > ?"
	cKeyExpr                    // "user_id + 0 = ?"
	cKeyAndID                   // "user_id = ? AND id = ?"
	cSub                        // "id IN (?)", db.Model(&Photo{}).Select("id").Where(kid)
	cGroup                      // db.Where(kid0).Or(kid1)
	numConds
)

// cond is a node of a where tree.
type cond struct {
	Kind  condKind
	Users []int64 // shard key values
	IDs   []int64
	N     int
	S     string
	Slugs []string // lookup values (pin cases, difflookup_test.go)
	Kids  []cond
}

// callKind is how a condition joins the chain.
type callKind uint8

const (
	callWhere callKind = iota
	callOr
	callNot
)

type call struct {
	How callKind
	C   cond
}

// setKind is the assignment of an update.
type setKind uint8

const (
	setCaption setKind = iota // Update("caption", S)
	setLikes                  // Update("likes", N)
	setMap                    // Updates(map[string]any{"caption": S, "likes": N})
	setStruct                 // Updates(Photo{Likes: N})
	setExpr                   // UpdateColumn("likes", gorm.Expr("likes + ?", N))
	setKey                    // Update("user_id", U): moves the row's shard key
	setKeyMap                 // Updates(map[string]any{"user_id": U, "caption": S})
	setID                     // Update("id", ID)
	numSets
)

type setSpec struct {
	Kind setKind
	S    string
	N    int
	U    int64
	ID   int64
	Slug *string // a slug assignment's value (nil: NULL)
}

// prow is a row to create or save, or the model value of an update or
// delete (only ID and UserID count there).
type prow struct {
	ID      int64
	UserID  int64
	Caption string
	Likes   int
	At      int     // minutes after diffEpoch
	Slug    *string // pin cases: the lookup column (nil: NULL)
}

// dcase is one generated statement.
type dcase struct {
	Op        dop
	All       bool  // Clauses(plugin.AllShards())
	SkipTx    bool  // Session(&gorm.Session{SkipDefaultTransaction: true})
	Returning bool  // Clauses(clause.Returning{}) into a []Photo
	Model     *prow // update/delete: Model(&Photo{ID:…, UserID:…}) / Delete(&Photo{ID:…, UserID:…})
	Select    []string
	Omit      []string
	Calls     []call
	Order     string
	Limit     int // 0: none
	Offset    int // 0: none
	Set       setSpec
	Rows      []prow  // create (Many: a slice) and save (one row)
	Inline    []int64 // Find(&rows, ids) / First(&row, id): primary keys as inline conditions
	Many      bool
	Agg       *aggSpec // group and distinct: a generated aggregate statement (diffagg_test.go); nil: the fixed shape
	Pins      bool     // on Pin, the model with a lookup column (difflookup_test.go), instead of Photo
}

// chooser makes the generator's choices. Zero is always the simplest one.
type chooser interface{ intn(n int) int }

// byteChooser reads choices from bytes (a fuzz input, or random bytes for
// the fixed-seed run); past the end every choice is zero.
type byteChooser struct {
	b []byte
	i int
}

func (c *byteChooser) intn(n int) int {
	if n <= 1 || c.i >= len(c.b) {
		return 0
	}
	v := int(c.b[c.i])
	c.i++
	if n > 256 && c.i < len(c.b) {
		v = v<<8 | int(c.b[c.i])
		c.i++
	}
	return v % n
}

// seedData is what the generator picks values from.
type seedData struct {
	users  []int64 // seeded users
	absent []int64 // users without rows, on shards of both servers
	ids    []int64 // seeded photo IDs
	owner  map[int64]int64
	fresh  []int64         // IDs no row has, one per user shard of users[i]
	pinOf  map[int64]int64 // seeded photo ID → its pin twin's ID
	slugs  []string        // the seeded pins' slugs
}

var (
	captions = []string{"sunset", "cat", "a", "b", "dog", "Cat", "B", "éclair"} // linguistic collations order them apart from bytes
	likeVals = []int{0, 1, 2, 3, 5, 8}
	orders   = []string{"", "id", "id desc", "likes desc, id", "likes", "caption, id desc", "created_at desc, id", "user_id + 0, id", "likes desc",
		"likes % 3 desc, created_at, id", "lower(caption) desc, id"} // expressions and columns not selected: hidden ORDER BY values
	selects = [][]string{nil, {"id", "user_id"}, {"id", "user_id", "likes"}, {"id", "caption", "likes"}, {"user_id", "likes"},
		{"id", "user_id", "row_number() over (partition by user_id order by likes, id desc) as rn"}, {"id", "count(*) over (partition by caption, user_id) as n"}} // windows run per shard
)

type gen struct {
	c chooser
	d *seedData
}

func (g *gen) pick(n int) int { return g.c.intn(n) }
func (g *gen) coin() bool     { return g.c.intn(2) == 1 }

func (g *gen) user() int64 {
	if g.pick(8) == 7 {
		return g.d.absent[g.pick(len(g.d.absent))]
	}
	return g.d.users[g.pick(len(g.d.users))]
}

func (g *gen) users() []int64 {
	n := 1 + g.pick(4)
	out := make([]int64, n)
	for i := range out {
		out[i] = g.user()
	}
	return out
}

func (g *gen) id() int64 {
	if g.pick(8) == 7 {
		return g.d.fresh[g.pick(len(g.d.fresh))]
	}
	return g.d.ids[g.pick(len(g.d.ids))]
}

func (g *gen) idList() []int64 {
	n := 1 + g.pick(4)
	out := make([]int64, n)
	for i := range out {
		out[i] = g.id()
	}
	return out
}

// cond makes a where tree of at most the given depth.
func (g *gen) cond(depth int) cond {
	n := int(numConds)
	if depth <= 0 {
		n = int(cSub) // leaves only
	}
	k := condKind(g.pick(n))
	c := cond{Kind: k}
	switch k {
	case cKeyEq, cKeyExpr:
		c.Users = []int64{g.user()}
	case cKeyIn, cClauseIn:
		c.Users = g.users()
	case cIDEq:
		c.IDs = []int64{g.id()}
	case cIDIn:
		c.IDs = g.idList()
	case cLikesGt:
		c.N = likeVals[g.pick(len(likeVals))]
	case cCaptionEq:
		c.S = captions[g.pick(len(captions))]
	case cStruct:
		c.Users = []int64{g.user()}
		if g.coin() {
			c.S = captions[g.pick(len(captions))]
		}
	case cMap:
		if g.coin() {
			c.Users = g.users()
		} else {
			c.Users = []int64{g.user()}
		}
	case cRawOr:
		c.Users = []int64{g.user(), g.user()}
	case cRawOrMixed:
		c.Users = []int64{g.user()}
		c.N = likeVals[g.pick(len(likeVals))]
	case cKeyAndID:
		i := g.pick(len(g.d.ids))
		c.IDs = []int64{g.d.ids[i]}
		c.Users = []int64{g.d.owner[g.d.ids[i]]}
		if g.pick(4) == 3 {
			c.Users[0] = g.user() // maybe another shard's key
		}
	case cSub:
		c.Kids = []cond{g.cond(depth - 1)}
	case cGroup:
		c.Kids = []cond{g.cond(depth - 1), g.cond(depth - 1)}
	}
	return c
}

func (g *gen) calls() []call {
	n := g.pick(4)
	if n == 0 && g.coin() {
		n = 1 // most statements have a condition
	}
	out := make([]call, n)
	for i := range out {
		out[i].C = g.cond(2)
		if i > 0 {
			switch g.pick(6) {
			case 4:
				out[i].How = callOr
			case 5:
				out[i].How = callNot
			}
		} else {
			switch g.pick(8) {
			case 6:
				out[i].How = callOr // GORM moves a leading lone Or behind the next condition
			case 7:
				out[i].How = callNot
			}
		}
	}
	return out
}

func (g *gen) row(existing bool) prow {
	r := prow{UserID: g.user(), Caption: captions[g.pick(len(captions))], Likes: likeVals[g.pick(len(likeVals))], At: 1000 + g.pick(50)}
	if existing {
		i := g.pick(len(g.d.ids))
		r.ID = g.d.ids[i]
		if g.pick(4) != 3 {
			r.UserID = g.d.owner[r.ID] // else: Save moves the row to another key
		}
	}
	return r
}

// dcase generates one case: a Photo case, and for a quarter of them its
// Pin variant. The Pin choice comes last, so that inputs from before pins
// existed still make the Photo cases they made.
func (g *gen) dcase() dcase {
	c := g.photoCase()
	if g.pick(4) == 3 {
		g.pinify(&c)
	}
	return c
}

func (g *gen) photoCase() dcase {
	c := dcase{Op: dop(g.pick(int(numOps)))}
	c.All = g.pick(3) == 2
	c.SkipTx = g.pick(4) == 3
	switch c.Op {
	case dCreate:
		n := 1
		if c.Many = g.coin(); c.Many {
			n = 1 + g.pick(5)
		}
		for i := 0; i < n; i++ {
			c.Rows = append(c.Rows, g.row(g.pick(8) == 7))
		}
		switch g.pick(4) {
		case 2:
			c.Select = []string{"id", "user_id", "caption", "created_at"}
		case 3:
			c.Omit = []string{[]string{"likes", "caption"}[g.pick(2)]}
		}
		return c
	case dSave:
		c.Rows = []prow{g.row(g.pick(4) != 3)}
		if c.Rows[0].ID != 0 && g.pick(4) == 3 {
			// Only for a row with an ID: the plain side gets the sharded
			// side's new ID, and Select("*") turns Save of a row with an
			// ID into an UPDATE only.
			c.Select = []string{"*"}
		}
		return c
	}
	c.Calls = g.calls()
	switch c.Op {
	case dFind, dFindSmall, dFindMap, dFirst, dTake, dLast:
		c.Select = selects[g.pick(len(selects))]
		if c.Op == dFindSmall {
			c.Select = nil // the destination's fields pick the columns
		}
	}
	switch c.Op {
	case dFind, dFindSmall, dFindMap, dFirst, dLast, dPluckID, dPluckCaption, dScan:
		c.Order = orders[g.pick(len(orders))]
	}
	switch c.Op {
	case dFind:
		if g.pick(5) == 4 {
			c.Inline = g.idList()
		}
	case dFirst:
		if g.pick(5) == 4 {
			c.Inline = []int64{g.id()}
		}
	}
	switch c.Op {
	case dFind, dFindSmall, dFindMap, dPluckID, dPluckCaption:
		if g.pick(3) == 2 {
			c.Limit = 1 + g.pick(5)
		}
		if g.pick(4) == 3 {
			c.Offset = 1 + g.pick(4)
		}
	case dUpdate:
		c.Set = setSpec{Kind: setKind(g.pick(int(numSets))), S: captions[g.pick(len(captions))], N: 1 + g.pick(9), U: g.user(), ID: g.id()}
		c.Returning = g.pick(3) == 2
		if g.pick(4) == 3 {
			r := g.row(true)
			c.Model = &prow{ID: r.ID, UserID: r.UserID}
			c.Returning = false
		}
	case dDelete:
		c.Returning = g.pick(3) == 2
		if g.pick(4) == 3 {
			r := g.row(true)
			c.Model = &prow{ID: r.ID, UserID: r.UserID}
			c.Returning = false
		}
	case dGroup, dDistinct:
		if g.pick(8) != 0 {
			if !c.All && g.coin() {
				c.All = true // most aggregate reads span shards
			}
			if g.pick(3) != 0 {
				c.Calls = c.Calls[:min(len(c.Calls), g.pick(2))] // and many rows
			}
			if c.Op == dGroup {
				c.Agg = g.aggGroup(&c)
			} else {
				c.Agg = g.aggDistinct(&c)
			}
		}
	case dDeleteIDs:
		c.Calls = nil
		c.Rows = nil
		for _, id := range g.idList() {
			c.Rows = append(c.Rows, prow{ID: id})
		}
	}
	return c
}

// scoreOrders order pins by their float column, whose seeded values
// hold NaN, both infinities, ties and NULL: the merge of the shards' rows
// must put each where Postgres's sort of one table puts it.
var scoreOrders = []string{"score, id", "score desc, id", "score desc, likes, id", "score", "score desc nulls last, id", "score nulls first, id desc"}

// seedScores are the seeded pins' scores, in turn; every fifth is NULL.
var seedScores = []float64{math.NaN(), 1.5, math.Inf(1), -2, 0, math.Inf(-1), 1.5, 7, math.NaN()}

// seedScore is the score of the i-th seeded pin.
func seedScore(i int) *float64 {
	if i%5 == 3 {
		return nil
	}
	v := seedScores[i%len(seedScores)]
	return &v
}

// scoreOrder orders two pin reads in three into pins (Find, First,
// Last) by the float column, selecting it where the case selects
// columns (else the plugin refuses the order it cannot merge). Half of
// those read every shard, half of these every row, so that the merge
// meets many shards' NaNs, infinities and NULLs.
func (g *gen) scoreOrder(c *dcase) {
	if c.Agg != nil || c.Op != dFind && c.Op != dFirst && c.Op != dLast || g.pick(3) == 0 {
		return
	}
	c.Order = scoreOrders[g.pick(len(scoreOrders))]
	if c.Select != nil && g.pick(4) != 0 {
		c.Select = append(slices.Clone(c.Select), "score")
	}
	if g.coin() {
		c.All = true
		if g.coin() {
			c.Calls = nil
		}
	}
}

// floatLit is a float8 as SQL text: NULL, NaN and the infinities
// included.
func floatLit(f *float64) string {
	switch {
	case f == nil:
		return "NULL"
	case math.IsNaN(*f), math.IsInf(*f, 0):
		return "'" + floatText(f) + "'::float8"
	}
	return strconv.FormatFloat(*f, 'g', -1, 64)
}

// floatText prints a float8 as Postgres does, NULL for nil.
func floatText(f *float64) string {
	switch {
	case f == nil:
		return "NULL"
	case math.IsNaN(*f):
		return "NaN"
	case math.IsInf(*f, 1):
		return "Infinity"
	case math.IsInf(*f, -1):
		return "-Infinity"
	}
	return strconv.FormatFloat(*f, 'g', -1, 64)
}
