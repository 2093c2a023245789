package rebalance

import (
	"bytes"
	"context"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardkit/shardkit/catalog"
	"github.com/shardkit/shardkit/internal/harness/pgtest"
)

// TestMoveKeepsPasswordsOutOfLogs: with log_statement = all on both
// servers' databases and admin DSNs carrying a password, a move (its
// forward and its reverse subscription) and a CREATE SUBSCRIPTION that
// fails leave no password in either server's log, nor in the mover's log
// lines. The servers' logs do show the move's other statements, so the
// logging the test relies on is on.
func TestMoveKeepsPasswordsOutOfLogs(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 2, 2, 4) // shards 0,1 on s0; 2,3 on s1; s0 on cluster 0, s1 on cluster 1
	seedPhotos(t, e, 0, 50)
	const secret = "Pw4mover-in-no-log"
	for _, s := range e.servers {
		u, err := url.Parse(s.DSN)
		if err != nil {
			t.Fatal(err)
		}
		// Trust authentication ignores the password, but the subscription's
		// connection string carries it all the same.
		u.User = url.UserPassword(u.User.Username(), secret)
		db := strings.TrimPrefix(u.Path, "/")
		pgtest.Exec(t, s.DSN, `ALTER DATABASE "`+db+`" SET log_statement = 'all'`)
		if err := e.cat.Update(ctx, func(ctx context.Context, tx *catalog.Tx) error {
			return tx.SetServerDSN(ctx, s.Name, s.DSN, u.String())
		}); err != nil {
			t.Fatal(err)
		}
	}
	var logged bytes.Buffer
	mv := e.mover(t, Config{Logger: slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	m, err := mv.Move(ctx, 0, "s1", MoveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m.State != StateReversible {
		t.Fatalf("move ended %s at %s", m.State, m.Step)
	}
	// A statement that fails is logged under log_min_error_statement.
	tgt, err := pgxpool.New(ctx, e.servers[1].DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer tgt.Close()
	bad := "postgres://postgres:" + secret + "@127.0.0.1:1/nowhere?sslmode=disable&connect_timeout=1"
	if err := createSubscription(ctx, tgt, "sk_secret_probe", bad, nil, "nowhere"); err == nil {
		t.Fatal("a subscription to a port nothing listens on was created")
	} else if strings.Contains(err.Error(), secret) {
		t.Fatalf("the error shows the password: %v", err)
	}
	if _, err := mv.Rollback(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logged.String(), secret) {
		t.Fatalf("the mover's log shows the password:\n%s", logged.String())
	}
	for i := range 2 {
		path := filepath.Join(pgtest.Cluster(t, i).Dir, "server.log")
		log, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(log), "CREATE PUBLICATION") {
			t.Fatalf("%s shows no CREATE PUBLICATION: statements are not logged, the test proves nothing", path)
		}
		if i := bytes.Index(log, []byte(secret)); i >= 0 {
			from := max(0, bytes.LastIndexByte(log[:i], '\n'))
			t.Fatalf("%s shows the password: %s", path, log[from:min(len(log), i+200)])
		}
	}
}
