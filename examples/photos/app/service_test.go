package app_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardkit/shardkit/examples/photos/app"
	"github.com/shardkit/shardkit/examples/photos/loadgen"
	"github.com/shardkit/shardkit/internal/harness/testkit"
	"github.com/shardkit/shardkit/plugin"
	"github.com/shardkit/shardkit/router"
)

// TestService runs every API route of the photo service against a catalog
// and two servers with 2000 logical shards, and checks with direct SQL that
// each row lands in the right shard schema on the right server. The
// subtests share one fixture (provisioning 2000 shards is the slow part)
// and run in order.
func TestService(t *testing.T) {
	f := newFixture(t)
	var users []userJSON // one per server
	var photos []photoJSON

	t.Run("create and get users", func(t *testing.T) {
		users = f.createUsers(t)
	})
	if len(users) != 2 {
		t.FailNow()
	}
	owner, liker := users[0], users[1]

	t.Run("unique usernames", func(t *testing.T) {
		var ada userJSON
		f.mustCall(t, http.StatusCreated, "POST", "/users", map[string]string{"name": "Ada", "username": "Ada_L"}, &ada)
		if ada.Username != "ada_l" {
			t.Fatalf("created %+v, want username ada_l", ada)
		}
		f.mustCall(t, http.StatusConflict, "POST", "/users", map[string]string{"name": "Other Ada", "username": "ada_l"}, nil)
		var got userJSON
		f.mustCall(t, http.StatusOK, "GET", "/usernames/ADA_L", nil, &got)
		if got != ada {
			t.Fatalf("GET by username: %+v, created %+v", got, ada)
		}
		f.mustCall(t, http.StatusNotFound, "GET", "/usernames/nobody", nil, nil)
		f.mustCall(t, http.StatusBadRequest, "GET", "/usernames/no-dashes", nil, nil)
		// The lookup row lives in the username's shard, naming Ada.
		var shards int
		if err := f.catalog.QueryRow(context.Background(), `SELECT count(*) FROM shardkit.shard_map`).Scan(&shards); err != nil {
			t.Fatal(err)
		}
		s, err := plugin.LookupShard("ada_l", shards)
		if err != nil {
			t.Fatal(err)
		}
		var server string
		if err := f.catalog.QueryRow(context.Background(), `SELECT server FROM shardkit.shard_map WHERE shard = $1`, s).Scan(&server); err != nil {
			t.Fatal(err)
		}
		f.assertPlaced(t, s, server, "users_username_lookup", "value = $1 AND owner_id = $2", "ada_l", id(t, ada.ID))
	})

	t.Run("upload, get and list photos", func(t *testing.T) {
		uid := id(t, owner.ID)
		shard, server := f.home(t, uid)
		for i := 0; i < 7; i++ {
			var p photoJSON
			in := map[string]any{"caption": fmt.Sprintf("sunset %d", i), "url": fmt.Sprintf("https://img.example/%d.jpg", i), "width": 640, "height": 480}
			f.mustCall(t, http.StatusCreated, "POST", "/users/"+owner.ID+"/photos", in, &p)
			pid := id(t, p.ID)
			if s, _ := f.layout.ShardOf(pid); s != shard {
				t.Fatalf("photo %d has shard bits %d, its owner's home shard is %d", pid, s, shard)
			}
			f.assertPlaced(t, shard, server, "photos", "id = $1 AND user_id = $2 AND caption = $3", pid, uid, p.Caption)
			var got photoJSON
			f.mustCall(t, http.StatusOK, "GET", "/photos/"+p.ID, nil, &got)
			if got != p {
				t.Fatalf("GET photo: %+v, uploaded %+v", got, p)
			}
			photos = append(photos, p)
		}
		// Newest first, by ID, three at a time with the cursor.
		want := f.idsSQL(t, server, shard, "photos", "user_id = $1", uid)
		got := f.pagedIDs(t, "/users/"+owner.ID+"/photos?limit=3")
		if !slices.Equal(got, want) {
			t.Fatalf("paged list %v, want (direct SQL, id DESC) %v", got, want)
		}
		if len(want) != 7 {
			t.Fatalf("%d photos in the shard, want 7", len(want))
		}
	})
	if len(photos) != 7 {
		t.FailNow()
	}

	t.Run("like a photo and list its likes", func(t *testing.T) {
		p := photos[3]
		pid := id(t, p.ID)
		shard, server := f.home(t, pid)
		var like struct {
			ID      string `json:"id"`
			PhotoID string `json:"photo_id"`
			UserID  string `json:"user_id"`
		}
		for _, u := range users {
			f.mustCall(t, http.StatusCreated, "POST", "/photos/"+p.ID+"/likes", map[string]string{"user_id": u.ID}, &like)
			if like.PhotoID != p.ID || like.UserID != u.ID {
				t.Fatalf("like %+v", like)
			}
			// The like lives with the photo, whoever liked it.
			f.assertPlaced(t, shard, server, "likes", "id = $1 AND photo_id = $2 AND user_id = $3", id(t, like.ID), pid, id(t, u.ID))
		}
		f.mustCall(t, http.StatusConflict, "POST", "/photos/"+p.ID+"/likes", map[string]string{"user_id": liker.ID}, nil)
		var pg pageJSON[struct {
			UserID string `json:"user_id"`
		}]
		f.mustCall(t, http.StatusOK, "GET", "/photos/"+p.ID+"/likes", nil, &pg)
		if len(pg.Items) != 2 || pg.Items[0].UserID != liker.ID || pg.Items[1].UserID != owner.ID {
			t.Fatalf("likes %+v, want %s then %s (newest first)", pg.Items, liker.ID, owner.ID)
		}
	})

	t.Run("follow and feed", func(t *testing.T) {
		// The liker (on the other server) posts too; a third user follows both.
		var extra photoJSON
		f.mustCall(t, http.StatusCreated, "POST", "/users/"+liker.ID+"/photos", map[string]any{"url": "https://img.example/x.jpg", "caption": "other server"}, &extra)
		var reader userJSON
		f.mustCall(t, http.StatusCreated, "POST", "/users", map[string]string{"name": "reader"}, &reader)
		rid := id(t, reader.ID)
		rshard, rserver := f.home(t, rid)
		for _, u := range users {
			var fl struct {
				ID         string `json:"id"`
				FollowerID string `json:"follower_id"`
				FolloweeID string `json:"followee_id"`
			}
			f.mustCall(t, http.StatusCreated, "POST", "/users/"+reader.ID+"/follows", map[string]string{"followee_id": u.ID}, &fl)
			f.assertPlaced(t, rshard, rserver, "follows", "id = $1 AND follower_id = $2 AND followee_id = $3", id(t, fl.ID), rid, id(t, u.ID))
		}
		f.mustCall(t, http.StatusConflict, "POST", "/users/"+reader.ID+"/follows", map[string]string{"followee_id": owner.ID}, nil)
		f.mustCall(t, http.StatusBadRequest, "POST", "/users/"+reader.ID+"/follows", map[string]string{"followee_id": reader.ID}, nil)
		var following struct {
			Items []string `json:"items"`
		}
		f.mustCall(t, http.StatusOK, "GET", "/users/"+reader.ID+"/following", nil, &following)
		if !slices.Equal(following.Items, []string{owner.ID, liker.ID}) {
			t.Fatalf("following %v, want %v", following.Items, []string{owner.ID, liker.ID})
		}
		// Each follow is also on the followee's shard, written atomically
		// with the follower's row (the users are on both servers).
		for _, u := range users {
			shard, server := f.home(t, id(t, u.ID))
			f.assertPlaced(t, shard, server, "followers", "followee_id = $1 AND follower_id = $2", id(t, u.ID), rid)
			var followers struct {
				Items []string `json:"items"`
			}
			f.mustCall(t, http.StatusOK, "GET", "/users/"+u.ID+"/followers", nil, &followers)
			if !slices.Equal(followers.Items, []string{reader.ID}) {
				t.Fatalf("followers of %s: %v, want [%s]", u.ID, followers.Items, reader.ID)
			}
		}

		// The feed merges both servers' photos newest first: compare with
		// the photos read directly from each server.
		var want []string
		for _, u := range users {
			uid := id(t, u.ID)
			shard, server := f.home(t, uid)
			want = append(want, f.idsSQL(t, server, shard, "photos", "user_id = $1", uid)...)
		}
		slices.SortFunc(want, func(a, b string) int { return cmpID(t, b, a) })
		got := f.pagedIDs(t, "/users/"+reader.ID+"/feed?limit=5")
		if !slices.Equal(got, want) {
			t.Fatalf("feed %v, want %v", got, want)
		}
		if !slices.Contains(got, extra.ID) || len(got) != 8 {
			t.Fatalf("feed has %d photos (%v), want 8 including %s from the other server", len(got), got, extra.ID)
		}
		var empty pageJSON[photoJSON]
		f.mustCall(t, http.StatusOK, "GET", "/users/"+owner.ID+"/feed", nil, &empty)
		if len(empty.Items) != 0 {
			t.Fatalf("feed of a user who follows no one: %v", empty.Items)
		}

		// Unfollow deletes both rows together; a second time finds none.
		f.mustCall(t, http.StatusOK, "DELETE", "/users/"+reader.ID+"/follows/"+liker.ID, nil, nil)
		f.mustCall(t, http.StatusNotFound, "DELETE", "/users/"+reader.ID+"/follows/"+liker.ID, nil, nil)
		var after, followersAfter struct {
			Items []string `json:"items"`
		}
		f.mustCall(t, http.StatusOK, "GET", "/users/"+reader.ID+"/following", nil, &after)
		f.mustCall(t, http.StatusOK, "GET", "/users/"+liker.ID+"/followers", nil, &followersAfter)
		if !slices.Equal(after.Items, []string{owner.ID}) || len(followersAfter.Items) != 0 {
			t.Fatalf("after unfollowing: following %v, followers of the unfollowed %v", after.Items, followersAfter.Items)
		}
		f.mustCall(t, http.StatusCreated, "POST", "/users/"+reader.ID+"/follows", map[string]string{"followee_id": liker.ID}, nil)
	})

	t.Run("errors", func(t *testing.T) {
		missingPhoto, err := f.layout.Compose(f.layout.EpochMs+1000, 7, 1)
		if err != nil {
			t.Fatal(err)
		}
		cases := []struct {
			name, method, path string
			body               any
			want               int
		}{
			{"unknown photo", "GET", fmt.Sprintf("/photos/%d", missingPhoto), nil, http.StatusNotFound},
			{"unknown user", "GET", fmt.Sprintf("/users/%d", missingPhoto), nil, http.StatusNotFound},
			{"bad id", "GET", "/photos/abc", nil, http.StatusBadRequest},
			{"negative id", "GET", "/users/-5", nil, http.StatusBadRequest},
			{"photo of unknown user", "POST", fmt.Sprintf("/users/%d/photos", missingPhoto), map[string]string{"url": "u"}, http.StatusNotFound},
			{"photo without url", "POST", "/users/" + owner.ID + "/photos", map[string]string{"caption": "c"}, http.StatusBadRequest},
			{"user without name", "POST", "/users", map[string]string{"name": " "}, http.StatusBadRequest},
			{"unknown field", "POST", "/users", map[string]string{"nom": "x"}, http.StatusBadRequest},
			{"like of unknown photo", "POST", fmt.Sprintf("/photos/%d/likes", missingPhoto), map[string]string{"user_id": owner.ID}, http.StatusNotFound},
			{"like by unknown user", "POST", "/photos/" + photos[0].ID + "/likes", map[string]string{"user_id": fmt.Sprint(missingPhoto)}, http.StatusNotFound},
			{"bad limit", "GET", "/users/" + owner.ID + "/photos?limit=1000", nil, http.StatusBadRequest},
			{"bad cursor", "GET", "/users/" + owner.ID + "/photos?before=x", nil, http.StatusBadRequest},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				if got := f.call(t, c.method, c.path, c.body, nil); got != c.want {
					t.Fatalf("%s %s: %d, want %d", c.method, c.path, got, c.want)
				}
			})
		}
	})

	t.Run("healthz and metrics", func(t *testing.T) {
		var h struct {
			Status  string `json:"status"`
			Shards  int    `json:"shards"`
			Servers int    `json:"servers"`
		}
		f.mustCall(t, http.StatusOK, "GET", "/healthz", nil, &h)
		if h.Status != "ok" || h.Shards != 2000 || h.Servers != 2 {
			t.Fatalf("healthz %+v", h)
		}
		body := f.get(t, "/metrics")
		for _, want := range []string{
			`shardkit_statements_total{kind="create",server="alpha",shape="single"}`,
			`shardkit_statements_total{kind="create",server="beta",shape="single"}`,
			`shardkit_statement_duration_seconds_bucket{kind="query",server="alpha",shape="single"`,
			`shardkit_statement_errors_total{kind="query",server="alpha",type="server_unavailable"} 0`,
			`shardkit_server_up{server="alpha"} 1`,
			`shardkit_server_up{server="beta"} 1`,
			`shardkit_map_version `,
			`shardkit_id_lease_valid 1`,
			`shardkit_id_fallback 0`,
			`photos_http_requests_total{code="201",route="POST /users"}`,
			`shardkit_fence_wait_seconds`,
			`shardkit_atomic_in_doubt 0`,
			`shardkit_atomic_in_doubt_oldest_seconds 0`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	})

	t.Run("a write to a fenced shard waits, and the wait is measured", func(t *testing.T) {
		ctx := context.Background()
		shard, server := f.home(t, id(t, owner.ID))
		setState := func(state string) {
			_, err := f.operator.PlaceShard(ctx, shard, server, router.ShardState(state)) // the operator's: the service may not write the map
			if err != nil {
				t.Fatal(err)
			}
		}
		setState("fenced")
		testkit.Eventually(t, testkit.Wait, func() bool { p, _ := f.app.Router.Snapshot().Placement(shard); return p.State == "fenced" })
		time.AfterFunc(400*time.Millisecond, func() { setState("active") })
		start := time.Now()
		var p photoJSON
		f.mustCall(t, http.StatusCreated, "POST", "/users/"+owner.ID+"/photos", map[string]any{"url": "https://img.example/fenced.jpg"}, &p)
		d := time.Since(start)
		if d < 300*time.Millisecond {
			t.Fatalf("the write to fenced shard %d returned after %s; it should have waited for the unfence", shard, d)
		}
		f.assertPlaced(t, shard, server, "photos", "id = $1", id(t, p.ID))
		photos = append(photos, p)
		body := f.get(t, "/metrics")
		m := regexp.MustCompile(`shardkit_fence_wait_seconds_sum\{server="` + server + `"\} ([0-9.e+-]+)`).FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("no fence wait recorded for %s", server)
		}
		// The wait recorded is part of the request: more than nothing, no
		// more than the whole request. (Not "at least 0.3 s": on a loaded
		// machine the request may reach the plugin well after it was sent.)
		if v, _ := strconv.ParseFloat(m[1], 64); v <= 0 || v > d.Seconds() {
			t.Fatalf("fence wait sum %s s, want more than 0 and at most the request's %s", m[1], d)
		}
	})

	t.Run("admin API", func(t *testing.T) {
		var m struct {
			Shards  int      `json:"shards"`
			Servers []string `json:"servers"`
			Server  []int    `json:"server"`
			State   []string `json:"state"`
		}
		f.mustCall(t, http.StatusOK, "GET", "/admin/api/map", nil, &m)
		if m.Shards != 2000 || len(m.Server) != 2000 || len(m.State) != 2000 || !slices.Equal(m.Servers, serverNames) {
			t.Fatalf("map: %d shards, %d placements, servers %v", m.Shards, len(m.Server), m.Servers)
		}
		var rows []struct {
			Server string           `json:"server"`
			Tables map[string]int64 `json:"tables"`
			Total  int64            `json:"total"`
		}
		f.mustCall(t, http.StatusOK, "GET", "/admin/api/rows", nil, &rows)
		var total int64
		for _, r := range rows {
			total += r.Total
		}
		if want := f.totalRowsSQL(t); total != want {
			t.Fatalf("admin rows total %d, direct SQL %d (%+v)", total, want, rows)
		}
		var up struct {
			Items []struct {
				ID     string `json:"id"`
				Server string `json:"server"`
				Parts  struct {
					Shard int `json:"shard"`
					Slot  int `json:"slot"`
				} `json:"parts"`
			} `json:"items"`
		}
		f.mustCall(t, http.StatusOK, "GET", "/admin/api/users/"+owner.ID+"/photos", nil, &up)
		shard, server := f.home(t, id(t, owner.ID))
		if len(up.Items) != len(photos) {
			t.Fatalf("admin: %d photos of the owner, want %d", len(up.Items), len(photos))
		}
		for _, p := range up.Items {
			if p.Parts.Shard != shard || p.Server != server || p.Parts.Slot == 0 {
				t.Fatalf("admin photo %+v: want shard %d on %s, an app slot (not 0)", p, shard, server)
			}
		}
		// The move journal is the operator's; the service's role is refused
		// it, and the answer says where to look.
		if code, body := f.raw(t, "GET", "/admin/api/moves", nil); code != http.StatusForbidden || !strings.Contains(string(body), "shardctl move status") {
			t.Errorf("GET /admin/api/moves as the application role: %d %s; want 403 naming shardctl move status", code, body)
		}
	})

	t.Run("admin page in headless Chromium", func(t *testing.T) {
		checkAdminPage(t, f, owner.ID, len(photos))
	})

	t.Run("load generator runs with no errors", func(t *testing.T) {
		res, err := loadgen.Run(context.Background(), loadgen.Config{URL: f.url, Users: 20, Follows: 5, Workers: 4, Duration: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if res.Errors != 0 || res.Requests < 100 || res.Photos < 20 {
			var b strings.Builder
			res.Print(&b)
			t.Fatalf("load: %s", b.String())
		}
		t.Logf("load: %d requests, %.0f req/s, 0 errors", res.Requests, res.Throughput())
	})

	t.Run("graceful shutdown", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- f.app.ServeListener(ctx, ln) }()
		resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("healthz %d", resp.StatusCode)
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("ServeListener after cancel: %v", err)
			}
		case <-time.After(app.ShutdownTimeout + time.Second):
			t.Fatal("ServeListener did not return after cancel")
		}
		if _, err := http.Get("http://" + ln.Addr().String() + "/healthz"); err == nil {
			t.Fatal("the server still answers after shutdown")
		}
	})
}

func (f *fixture) get(t *testing.T, path string) string {
	t.Helper()
	resp, err := http.Get(f.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// idsSQL returns the IDs of matching rows, newest first, read directly.
func (f *fixture) idsSQL(t *testing.T, server string, shard int, table, where string, args ...any) []string {
	t.Helper()
	q := "SELECT id::text FROM " + pgx.Identifier{router.SchemaName(shard), table}.Sanitize() + " WHERE " + where + " ORDER BY id DESC"
	rows, err := f.servers[server].Query(context.Background(), q, args...)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// totalRowsSQL counts every row of the example's tables on all servers.
func (f *fixture) totalRowsSQL(t *testing.T) int64 {
	t.Helper()
	var total int64
	for name, conn := range f.servers {
		var n int64
		err := conn.QueryRow(context.Background(), `
SELECT coalesce(sum((xpath('/row/n/text()', query_to_xml(format('SELECT count(*) AS n FROM %I.%I', table_schema, table_name), false, true, '')))[1]::text::bigint), 0)
FROM information_schema.tables
WHERE table_schema LIKE 'shard\_%' AND table_name IN ('users', 'photos', 'likes', 'follows', 'followers')`).Scan(&n)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		total += n
	}
	return total
}

func cmpID(t *testing.T, a, b string) int {
	x, y := id(t, a), id(t, b)
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// pagedIDs reads a paged list of photos from path (a query with its
// limit), cursor after cursor, at most seven pages, and returns the
// photos' IDs in the order served.
func (f *fixture) pagedIDs(t *testing.T, path string) []string {
	t.Helper()
	var got []string
	page := path
	for pages := 0; ; pages++ {
		var pg pageJSON[photoJSON]
		f.mustCall(t, http.StatusOK, "GET", page, nil, &pg)
		for _, p := range pg.Items {
			got = append(got, p.ID)
		}
		if pg.NextBefore == "" || pages > 5 {
			return got
		}
		page = path + "&before=" + pg.NextBefore
	}
}
