package migrations

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/router"
)

func TestProvisionUnreachableServer(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 1)
	servers := append(e.servers, ServerSpec{Name: "gone", DSN: "postgres://postgres@127.0.0.1:1/x?sslmode=disable"})
	err := Provision(ctx, e.cat, ProvisionOptions{Servers: servers, Shards: 8})
	t.Log(err)
	if !errors.Is(err, ErrServerUnreachable) {
		t.Fatalf("err = %v, want ErrServerUnreachable", err)
	}
	var se *ServerError
	if !errors.As(err, &se) || se.Server != "gone" {
		t.Fatalf("err = %v, want a *ServerError naming \"gone\"", err)
	}
	if !strings.HasPrefix(err.Error(), "shardkit: ") {
		t.Fatalf("message %q lacks the shardkit: prefix", err)
	}
	// Nothing was recorded: the catalog is still uninitialised.
	if _, err := e.cat.Load(ctx); !errors.Is(err, router.ErrNoCatalog) {
		t.Fatalf("catalog after a refused provision: %v, want ErrNoCatalog", err)
	}
}

func TestProvisionRefusals(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 2)
	base := ProvisionOptions{Servers: e.servers, Shards: 8}
	if err := Provision(ctx, e.cat, base); err != nil {
		t.Fatal(err)
	}
	otherLayout := idgen.DefaultLayout()
	otherLayout.SlotBits = 4
	tests := []struct {
		name   string
		opts   ProvisionOptions
		want   error
		server string // the *ServerError's server, if any
	}{
		{"name given twice", ProvisionOptions{Shards: 8, Servers: []ServerSpec{e.servers[0], {Name: "pg0", DSN: e.servers[1].DSN}}}, ErrDuplicateServer, "pg0"},
		{"name taken with another DSN", ProvisionOptions{Shards: 8, Servers: []ServerSpec{{Name: "pg0", DSN: e.servers[1].DSN}}}, ErrDuplicateServer, "pg0"},
		{"DSN taken by another name", ProvisionOptions{Shards: 8, Servers: []ServerSpec{{Name: "again", DSN: e.servers[1].DSN}}}, ErrDuplicateServer, "again"},
		{"shard count", ProvisionOptions{Shards: 16, Servers: e.servers}, ErrShardCountMismatch, ""},
		{"layout", ProvisionOptions{Shards: 8, Layout: otherLayout, Servers: e.servers}, ErrLayoutMismatch, ""},
		{"no servers", ProvisionOptions{Shards: 8}, ErrNoServers, ""},
		{"bad name", ProvisionOptions{Shards: 8, Servers: []ServerSpec{{Name: "Bad Name", DSN: e.servers[0].DSN}}}, ErrBadServerName, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Provision(ctx, e.cat, tt.opts)
			t.Log(err)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			var se *ServerError
			if tt.server != "" && (!errors.As(err, &se) || se.Server != tt.server) {
				t.Fatalf("err = %v, want a *ServerError naming %q", err, tt.server)
			}
			if !strings.HasPrefix(err.Error(), "shardkit: ") {
				t.Fatalf("message %q lacks the shardkit: prefix", err)
			}
		})
	}
	if err := Provision(ctx, e.cat, base); err != nil {
		t.Fatalf("the original options after the refusals: %v", err)
	}
	// Without a shard count or layout, an existing catalog's are used.
	if err := Provision(ctx, e.cat, ProvisionOptions{Servers: e.servers}); err != nil {
		t.Fatalf("no shard count given: %v", err)
	}
}

func TestInsufficientPrivilege(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 1)
	admin := pgtest.Connect(t, e.servers[0].DSN)
	// A role that may connect but not create schemas (PG15: no CREATE for PUBLIC).
	if _, err := admin.Exec(ctx, `DO $$ BEGIN
		IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'shardkit_limited') THEN
			CREATE ROLE shardkit_limited LOGIN;
		END IF; END $$`); err != nil {
		t.Fatal(err)
	}
	limited := strings.Replace(e.servers[0].DSN, "postgres://postgres@", "postgres://shardkit_limited@", 1)
	err := Provision(ctx, e.cat, ProvisionOptions{Shards: 4, Servers: []ServerSpec{{Name: "weak", DSN: limited}}})
	t.Log(err)
	if !errors.Is(err, ErrInsufficientPrivilege) {
		t.Fatalf("err = %v, want ErrInsufficientPrivilege", err)
	}
	var se *ServerError
	if !errors.As(err, &se) || se.Server != "weak" {
		t.Fatalf("err = %v, want a *ServerError naming \"weak\"", err)
	}
	if !strings.Contains(err.Error(), "CREATE on database") {
		t.Fatalf("err = %v, want it to name the CREATE privilege", err)
	}
	// Refused before anything was recorded: with an owner's DSN, it works.
	if err := Provision(ctx, e.cat, ProvisionOptions{Shards: 4, Servers: []ServerSpec{{Name: "weak", DSN: e.servers[0].DSN}}}); err != nil {
		t.Fatalf("after fixing the DSN: %v", err)
	}
}

func TestUnknownServer(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 1)
	if err := Provision(ctx, e.cat, ProvisionOptions{Servers: e.servers, Shards: 4}); err != nil {
		t.Fatal(err)
	}
	err := Migrate(ctx, e.cat, nil, MigrateOptions{Servers: []string{"nope"}})
	var se *ServerError
	if !errors.Is(err, router.ErrUnknownServer) || !errors.As(err, &se) || se.Server != "nope" {
		t.Fatalf("Migrate: err = %v, want router.ErrUnknownServer naming \"nope\"", err)
	}
}
