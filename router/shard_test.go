package router

import (
	"errors"
	"math"
	"testing"
)

func TestShardOfKey(t *testing.T) {
	tests := []struct {
		name    string
		key     int64
		shards  int
		want    int
		wantErr error
	}{
		{"zero", 0, 2000, 0, nil},
		{"below shards", 1341, 2000, 1341, nil},
		{"wraps", 2000, 2000, 0, nil},
		{"instagram user", 31341, 2000, 1341, nil},
		{"max key", math.MaxInt64, 2000, int(math.MaxInt64 % 2000), nil},
		{"one shard", 12345, 1, 0, nil},
		{"negative key", -1, 2000, 0, ErrNegativeKey},
		{"min key", math.MinInt64, 2000, 0, ErrNegativeKey},
		{"zero shards", 5, 0, 0, ErrInvalidShardCount},
		{"negative shards", 5, -3, 0, ErrInvalidShardCount},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ShardOfKey(tt.key, tt.shards)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("ShardOfKey(%d, %d) error = %v, want %v", tt.key, tt.shards, err, tt.wantErr)
			}
			if err == nil && got != tt.want {
				t.Fatalf("ShardOfKey(%d, %d) = %d, want %d", tt.key, tt.shards, got, tt.want)
			}
		})
	}
}

// TestShardOfString pins the string hash: changing it would move every
// string-keyed row, so these values must never change.
func TestShardOfString(t *testing.T) {
	tests := []struct {
		key   string
		hash  int64
		shard int
	}{
		{"", 5472609002491880229, 229},
		{"alice", 5803779529149266183, 183},
		{"user@example.com", 4041589142821522139, 139},
		{"ünïcode", 3580594814462352363, 363},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			if h := HashString(tt.key); h != tt.hash {
				t.Fatalf("HashString(%q) = %d, want %d", tt.key, h, tt.hash)
			}
			got, err := ShardOfString(tt.key, 2000)
			if err != nil || got != tt.shard {
				t.Fatalf("ShardOfString(%q, 2000) = %d, %v; want %d", tt.key, got, err, tt.shard)
			}
		})
	}
	if _, err := ShardOfString("x", 0); !errors.Is(err, ErrInvalidShardCount) {
		t.Fatalf("ShardOfString with 0 shards = %v", err)
	}
}

func TestSchemaName(t *testing.T) {
	tests := []struct {
		shard int
		want  string
	}{
		{0, "shard_0000"},
		{7, "shard_0007"},
		{1341, "shard_1341"},
		{9999, "shard_9999"},
		{12345, "shard_12345"},
	}
	for _, tt := range tests {
		if got := SchemaName(tt.shard); got != tt.want {
			t.Errorf("SchemaName(%d) = %q, want %q", tt.shard, got, tt.want)
		}
		if n, err := ParseSchemaName(tt.want); err != nil || n != tt.shard {
			t.Errorf("ParseSchemaName(%q) = %d, %v; want %d", tt.want, n, err, tt.shard)
		}
	}
}

func TestParseSchemaNameRefuses(t *testing.T) {
	for _, name := range []string{
		"", "shard_", "shard_1", "shard_123", "shard_01341", "shard_00000", "shard_123456",
		"Shard_0001", "shard-0001", "shard_0001 ", " shard_0001", "shard_0001\n", "shard_-001",
		"shard_+001", "shard_１２３４", `"shard_0001"`, "public", "shard_0001;drop",
	} {
		if n, err := ParseSchemaName(name); !errors.Is(err, ErrInvalidSchemaName) {
			t.Errorf("ParseSchemaName(%q) = %d, %v; want ErrInvalidSchemaName", name, n, err)
		}
	}
}

// FuzzParseSchemaName: whatever ParseSchemaName accepts is exactly what
// SchemaName produces for the shard it returns.
func FuzzParseSchemaName(f *testing.F) {
	for _, s := range []string{"shard_0000", "shard_1341", "shard_12345", "shard_01234", "shard_", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		n, err := ParseSchemaName(name)
		if err != nil {
			if !errors.Is(err, ErrInvalidSchemaName) {
				t.Fatalf("ParseSchemaName(%q) error %v does not wrap ErrInvalidSchemaName", name, err)
			}
			return
		}
		if n < 0 || SchemaName(n) != name {
			t.Fatalf("ParseSchemaName(%q) = %d, but SchemaName(%d) = %q", name, n, n, SchemaName(n))
		}
	})
}
