package app

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shardkit/shardkit/examples/photos/api"
	"github.com/shardkit/shardkit/examples/photos/store"
	"github.com/shardkit/shardkit/internal/pgdsn"
	"github.com/shardkit/shardkit/migrations"
)

// Environment variables read by ParseConfig; a flag given on the command
// line wins over its variable.
const (
	EnvCatalog = "SHARDKIT_CATALOG" // catalog DSN
	EnvServers = "SHARDKIT_SERVERS" // shard servers to provision: name=DSN,name=DSN,…
	// EnvAdminServers gives servers of EnvServers a separate DSN for
	// administration and replication (name=DSN,…), where EnvServers names a
	// connection pooler.
	EnvAdminServers = "SHARDKIT_ADMIN_SERVERS"
	EnvAddr         = "PHOTOS_ADDR"       // listen address, default :8080
	EnvProvision    = "PHOTOS_PROVISION"  // "true": provision catalog and servers at start
	EnvShards       = "PHOTOS_SHARDS"     // logical shards when provisioning, default 2000
	EnvFenceWait    = "PHOTOS_FENCE_WAIT" // bound on a write's wait on a fenced shard, default 2s
	EnvLogLevel     = "PHOTOS_LOG_LEVEL"  // debug, info, warn, error
	// EnvAdminToken opens the admin endpoints to other hosts, for requests
	// with "Authorization: Bearer TOKEN"; @PATH reads it from a file.
	// Unset, they answer this host's clients only.
	EnvAdminToken = "PHOTOS_ADMIN_TOKEN"
)

// ErrConfig reports an unusable configuration.
var ErrConfig = errors.New("photos: bad configuration")

// Config is the service's configuration.
type Config struct {
	Addr       api.Addr
	AdminToken api.AdminToken
	Catalog    store.CatalogDSN
	FenceWait  store.FenceWait
	// Provision creates (or completes) the catalog and the shard schemas
	// on Servers before serving.
	Provision bool
	// ProvisionOnly provisions and exits without serving (to register a
	// new, empty server in a running deployment).
	ProvisionOnly bool
	Servers       []migrations.ServerSpec
	Shards        int
	LogLevel      slog.Level
}

// ParseConfig reads the configuration from args (without the program
// name), falling back to the environment through getenv.
func ParseConfig(name string, args []string, getenv func(string) string) (Config, error) {
	env := func(k, def string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return def
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	addr := fs.String("addr", env(EnvAddr, ":8080"), "listen address ($"+EnvAddr+")")
	catalog := fs.String("catalog", env(EnvCatalog, ""), "catalog DSN, or @FILE holding it ($"+EnvCatalog+")")
	servers := fs.String("servers", env(EnvServers, ""), "shard servers to provision, name=DSN,… ($"+EnvServers+")")
	adminServers := fs.String("admin-servers", env(EnvAdminServers, ""), "the servers' direct DSNs for administration and replication, name=DSN,…, where -servers names poolers ($"+EnvAdminServers+")")
	provision := fs.Bool("provision", env(EnvProvision, "") == "true", "provision the catalog and servers at start ($"+EnvProvision+")")
	provisionOnly := fs.Bool("provision-only", false, "provision (as -provision) and exit without serving")
	shards := fs.Int("shards", 0, "logical shards when provisioning ($"+EnvShards+", default 2000)")
	fence := fs.Duration("fence-wait", 0, "longest wait of a write on a fenced shard ($"+EnvFenceWait+", default 2s)")
	level := fs.String("log-level", env(EnvLogLevel, "info"), "log level: debug, info, warn, error ($"+EnvLogLevel+")")
	if err := fs.Parse(args); err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	cfg := Config{Addr: api.Addr(*addr), Catalog: store.CatalogDSN(*catalog), Provision: *provision || *provisionOnly,
		ProvisionOnly: *provisionOnly, Shards: *shards,
		FenceWait: store.FenceWait(*fence)}
	if cfg.Shards == 0 {
		n, err := strconv.Atoi(env(EnvShards, "2000"))
		if err != nil {
			return Config{}, fmt.Errorf("%w: %s=%q is not a number", ErrConfig, EnvShards, getenv(EnvShards))
		}
		cfg.Shards = n
	}
	if cfg.FenceWait == 0 {
		d, err := time.ParseDuration(env(EnvFenceWait, "2s"))
		if err != nil {
			return Config{}, fmt.Errorf("%w: %s: %w", ErrConfig, EnvFenceWait, err)
		}
		cfg.FenceWait = store.FenceWait(d)
	}
	if tok := getenv(EnvAdminToken); tok != "" {
		t, err := pgdsn.Load(tok)
		if err != nil {
			return Config{}, fmt.Errorf("%w: %s: %w", ErrConfig, EnvAdminToken, err)
		}
		cfg.AdminToken = api.AdminToken(t)
	}
	if err := cfg.LogLevel.UnmarshalText([]byte(*level)); err != nil {
		return Config{}, fmt.Errorf("%w: log level %q: use debug, info, warn or error", ErrConfig, *level)
	}
	var err error
	if cfg.Servers, err = ParseServers(*servers); err != nil {
		return Config{}, err
	}
	if cfg.Servers, err = WithAdminDSNs(cfg.Servers, *adminServers); err != nil {
		return Config{}, err
	}
	if cfg.Catalog == "" {
		return Config{}, fmt.Errorf("%w: no catalog: pass -catalog DSN or set %s", ErrConfig, EnvCatalog)
	}
	catalogDSN, err := pgdsn.Load(string(cfg.Catalog))
	if err != nil {
		return Config{}, fmt.Errorf("%w: catalog: %w", ErrConfig, err)
	}
	cfg.Catalog = store.CatalogDSN(catalogDSN)
	if cfg.Provision && len(cfg.Servers) == 0 {
		return Config{}, fmt.Errorf("%w: provisioning needs servers: pass -servers name=DSN,… or set %s", ErrConfig, EnvServers)
	}
	return cfg, nil
}

// WithAdminDSNs sets the AdminDSN of each server named in admin (name=DSN,
// as ParseServers reads): the direct connection that provisioning,
// migrations and moves use where DSN names a connection pooler. A name
// that is not among servers is refused.
func WithAdminDSNs(servers []migrations.ServerSpec, admin string) ([]migrations.ServerSpec, error) {
	direct, err := ParseServers(admin)
	if err != nil {
		return nil, err
	}
	out := append([]migrations.ServerSpec(nil), servers...)
	for _, d := range direct {
		i := slices.IndexFunc(out, func(s migrations.ServerSpec) bool { return s.Name == d.Name })
		if i < 0 {
			return nil, fmt.Errorf("%w: admin DSN for server %q, which the servers (%s) do not name", ErrConfig, d.Name, EnvServers)
		}
		out[i].AdminDSN = d.DSN
	}
	return out, nil
}

// ParseServers reads "name=DSN,name=DSN" (spaces around items ignored); a
// DSN given as @PATH is read from that file (pgdsn.Load).
func ParseServers(s string) ([]migrations.ServerSpec, error) {
	var out []migrations.ServerSpec
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, setting, ok := strings.Cut(item, "=")
		if !ok || name == "" || setting == "" {
			return nil, fmt.Errorf("%w: server %q: want name=DSN or name=@FILE", ErrConfig, pgdsn.Redact(item))
		}
		dsn, err := pgdsn.Load(strings.TrimSpace(setting))
		if err != nil {
			return nil, fmt.Errorf("%w: server %q: %w", ErrConfig, name, err)
		}
		out = append(out, migrations.ServerSpec{Name: strings.TrimSpace(name), DSN: dsn})
	}
	return out, nil
}
