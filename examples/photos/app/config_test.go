package app

import (
	"errors"
	"log/slog"
	"testing"
	"time"
)

func TestParseConfig(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		env     map[string]string
		want    func(Config) bool
		wantErr bool
	}{
		{"defaults with a catalog from the environment", nil, map[string]string{EnvCatalog: "postgres://c"},
			func(c Config) bool {
				return c.Addr == ":8080" && c.Catalog == "postgres://c" && c.Shards == 2000 &&
					time.Duration(c.FenceWait) == 2*time.Second && !c.Provision && c.LogLevel == slog.LevelInfo
			}, false},
		{"flags win over the environment", []string{"-catalog", "postgres://flag", "-addr", ":9", "-shards", "64", "-fence-wait", "50ms", "-log-level", "debug"},
			map[string]string{EnvCatalog: "postgres://env", EnvAddr: ":1", EnvShards: "8", EnvFenceWait: "1s"},
			func(c Config) bool {
				return c.Catalog == "postgres://flag" && c.Addr == ":9" && c.Shards == 64 &&
					time.Duration(c.FenceWait) == 50*time.Millisecond && c.LogLevel == slog.LevelDebug
			}, false},
		{"provisioning from the environment", nil,
			map[string]string{EnvCatalog: "c", EnvProvision: "true", EnvServers: " a=postgres://a , b=postgres://b "},
			func(c Config) bool {
				return c.Provision && len(c.Servers) == 2 &&
					c.Servers[0].Name == "a" && c.Servers[0].DSN == "postgres://a" && c.Servers[1].Name == "b"
			}, false},
		{"admin DSNs beside pooled ones", nil,
			map[string]string{EnvCatalog: "c", EnvServers: "a=postgres://pool-a,b=postgres://pool-b", EnvAdminServers: "b=postgres://b"},
			func(c Config) bool {
				return len(c.Servers) == 2 && c.Servers[0].AdminDSN == "" &&
					c.Servers[1].DSN == "postgres://pool-b" && c.Servers[1].AdminDSN == "postgres://b"
			}, false},
		{"admin DSN of a server not listed", nil,
			map[string]string{EnvCatalog: "c", EnvServers: "a=postgres://pool-a", EnvAdminServers: "z=postgres://z"}, nil, true},
		{"provision only", []string{"-provision-only", "-servers", "a=x"}, map[string]string{EnvCatalog: "c"},
			func(c Config) bool { return c.Provision && c.ProvisionOnly && len(c.Servers) == 1 }, false},
		{"no catalog", nil, nil, nil, true},
		{"provision without servers", []string{"-provision"}, map[string]string{EnvCatalog: "c"}, nil, true},
		{"bad server list", nil, map[string]string{EnvCatalog: "c", EnvServers: "a"}, nil, true},
		{"bad shard count", nil, map[string]string{EnvCatalog: "c", EnvShards: "many"}, nil, true},
		{"bad fence wait", nil, map[string]string{EnvCatalog: "c", EnvFenceWait: "soon"}, nil, true},
		{"bad log level", []string{"-log-level", "loud"}, map[string]string{EnvCatalog: "c"}, nil, true},
		{"unknown flag", []string{"-nope"}, map[string]string{EnvCatalog: "c"}, nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := ParseConfig("photos", c.args, func(k string) string { return c.env[k] })
			if c.wantErr {
				if !errors.Is(err, ErrConfig) {
					t.Fatalf("err %v, want ErrConfig", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !c.want(cfg) {
				t.Fatalf("config %+v", cfg)
			}
		})
	}
}
