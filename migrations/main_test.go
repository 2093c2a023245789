package migrations

import (
	"os"
	"testing"

	"github.com/shardkit/shardkit/internal/harness/pgtest"
	"github.com/shardkit/shardkit/internal/harness/shardtest/photos"
)

// Four clusters: the provisioning target is "2000 shards on 4 servers".
// A child process of TestProvisionSurvivesSIGKILL provisions instead.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		runChild()
	}
	if arg := os.Getenv(bulkChildEnv); arg != "" {
		os.Exit(runBulkChild(arg))
	}
	pgtest.Main(m, 4)
}

// testSQL is the tests' shared per-shard SQL (photos, likes, follows).
var testSQL = photos.SQL

// testSQLv2 adds version 2 (comments, photos.width).
var testSQLv2 = photos.V2
