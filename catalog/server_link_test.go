package catalog

import (
	"context"
	"errors"
	"testing"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/router"
)

// TestServerLinkRecorded: registration records how a server's app DSN
// reaches it from the DSNs (a login of another user on the admin DSN's
// host, port and database is direct; another endpoint is a pooler's),
// SetServerLink overrides it, a change of passwords keeps the record and
// a move to another endpoint records it anew; the operator's and the
// application's snapshots both say so.
func TestServerLinkRecorded(t *testing.T) {
	cat, _ := seedCatalog(t, 4, idgen.DefaultLayout())
	ctx := testCtx(t)
	update := func(f func(ctx context.Context, tx *Tx) error) {
		t.Helper()
		if err := cat.Update(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	check := func(step, name string, direct bool, link router.Link) {
		t.Helper()
		for _, c := range []*Catalog{cat, cat.Operator()} {
			snap, err := c.Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			s, _ := snap.Server(name)
			if s.Direct() != direct || s.Link != link {
				t.Fatalf("%s: server %s %+v: direct %v, link %v; want %v, %v", step, name, s, s.Direct(), s.Link, direct, link)
			}
		}
	}
	update(func(ctx context.Context, tx *Tx) error {
		if err := tx.AddServer(ctx, router.Server{Name: "gamma", DSN: "postgres://app@gamma:5432/db?password=a",
			AdminDSN: "postgres://operator@gamma:5432/db?password=o"}); err != nil {
			return err
		}
		if err := tx.AddServer(ctx, router.Server{Name: "delta", DSN: "postgres://app@pooler:6432/db", AdminDSN: "postgres://operator@delta/db"}); err != nil {
			return err
		}
		return tx.AddServer(ctx, router.Server{Name: "eps", DSN: "postgres://eps/db"})
	})
	check("registered", "gamma", true, router.LinkDirect)
	check("registered", "delta", false, router.LinkPooled)
	check("registered", "eps", true, router.LinkDirect)
	check("seeded before the record", "alpha", true, router.LinkUnrecorded)
	if snap, _ := cat.Load(ctx); !func() bool { g, _ := snap.Server("gamma"); return g.AdminHidden && g.Admin() == "" }() {
		t.Fatalf("the application's snapshot of gamma does not hide its admin DSN")
	}

	update(func(ctx context.Context, tx *Tx) error { return tx.SetServerLink(ctx, "gamma", router.LinkPooled) })
	check("set pooled", "gamma", false, router.LinkPooled)
	update(func(ctx context.Context, tx *Tx) error {
		return tx.SetServerDSN(ctx, "gamma", "postgres://app@gamma:5432/db?password=rotated", "")
	})
	check("password rotated", "gamma", false, router.LinkPooled)
	update(func(ctx context.Context, tx *Tx) error {
		return tx.SetServerDSN(ctx, "gamma", "postgres://app@pgb:6432/db", "")
	})
	check("moved to a pooler", "gamma", false, router.LinkPooled)
	update(func(ctx context.Context, tx *Tx) error {
		return tx.SetServerDSN(ctx, "gamma", "postgres://app@gamma:5432/db", "")
	})
	check("moved back", "gamma", true, router.LinkDirect)
	update(func(ctx context.Context, tx *Tx) error { return tx.SetServerLink(ctx, "delta", router.LinkDirect) })
	check("set direct", "delta", true, router.LinkDirect)

	err := cat.Update(ctx, func(ctx context.Context, tx *Tx) error { return tx.SetServerLink(ctx, "zeta", router.LinkDirect) })
	if !errors.Is(err, router.ErrUnknownServer) {
		t.Fatalf("SetServerLink of an unknown server: %v, want router.ErrUnknownServer", err)
	}
}

// TestMigrateKeepsServerLinks: the servers of a catalog made before the
// record (version 14) keep what they were, whether read before or after
// the migration, by an operator or an application (one DSN is direct, an
// admin DSN on another endpoint counts as a pooler's, neither recorded),
// except the one reached with an application login on its admin DSN's
// endpoint, which the migration records direct in a new map version.
func TestMigrateKeepsServerLinks(t *testing.T) {
	ctx := testCtx(t)
	cat, dsn := openEmpty(t)
	if err := cat.migrateTo(ctx, 14); err != nil {
		t.Fatal(err)
	}
	l := idgen.DefaultLayout()
	pgtest.Exec(t, dsn, `INSERT INTO shardkit.config (shards, epoch_ms, time_bits, shard_bits, seq_bits, slot_bits, map_version) VALUES (2, $1, $2, $3, $4, $5, 3)`,
		l.EpochMs, int16(l.TimeBits), int16(l.ShardBits), int16(l.SeqBits), int16(l.SlotBits))
	pgtest.Exec(t, dsn, `INSERT INTO shardkit.servers (name, dsn, admin_dsn) VALUES
		('one', 'postgres://one/db', NULL), ('role', 'postgres://app@role/db?password=a', 'postgres://operator@role/db'),
		('pooled', 'postgres://pgb:6432/db', 'postgres://pooled/db')`)
	pgtest.Exec(t, dsn, `INSERT INTO shardkit.shard_map (shard, server, version) VALUES (0, 'one', 3), (1, 'role', 3)`)
	type want struct {
		direct bool
		link   router.Link
	}
	check := func(when string, cs []*Catalog, version int64, ws map[string]want) {
		t.Helper()
		for _, c := range cs {
			snap, err := c.Load(ctx)
			if err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			if snap.Version != version {
				t.Fatalf("%s: map version %d, want %d", when, snap.Version, version)
			}
			for name, w := range ws {
				if s, _ := snap.Server(name); s.Direct() != w.direct || s.Link != w.link {
					t.Fatalf("%s: server %s %+v: direct %v, want %+v", when, name, s, s.Direct(), w)
				}
			}
		}
	}
	check("version 14", []*Catalog{cat, cat.Operator()}, 3, map[string]want{"one": {true, router.LinkUnrecorded}, "role": {false, router.LinkUnrecorded},
		"pooled": {false, router.LinkUnrecorded}})
	if err := cat.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	after := map[string]want{"one": {true, router.LinkUnrecorded}, "role": {true, router.LinkDirect}, "pooled": {false, router.LinkUnrecorded}}
	fresh, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	check("migrated", []*Catalog{fresh, fresh.Operator()}, 4, after)
	check("migrated, read by an operator started before", []*Catalog{cat.Operator()}, 4, after)
	// An application process started before reads the view as of version
	// 12, whose direct column now says what the record says.
	after["role"] = want{true, router.LinkUnrecorded}
	check("migrated, read by an application started before", []*Catalog{cat}, 4, after)
}
