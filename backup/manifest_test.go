package backup

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/shardkit/shardkit/idgen"
)

func sampleManifest() *Manifest {
	return &Manifest{
		Shard: 7, Schema: "shard_0007", Server: "a", MapVersion: 3, Shards: 2000, Layout: idgen.DefaultLayout(),
		TakenAt:   time.Date(2026, 11, 23, 7, 0, 0, 0, time.UTC),
		Versions:  []SQLVersion{{Version: 0, Part: "tables", Name: "shardkit"}, {Version: 1, Part: "tables", Name: "0001_photos.sql"}},
		Sequences: []Sequence{{Name: "id_seq", LastValue: 123}},
		Tables:    []Table{{Name: "photos", Rows: 2, Sum: "-42"}},
		NewestID:  99,
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	if err := writeHeader(&buf, sampleManifest()); err != nil {
		t.Fatal(err)
	}
	buf.WriteString("PGDMP archive bytes\n\x00\x01")
	m, rest, err := ReadHeader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if m.Shard != 7 || m.Tables[0].Sum != "-42" || m.Layout != idgen.DefaultLayout() || !m.TakenAt.Equal(sampleManifest().TakenAt) {
		t.Fatalf("read back %+v", m)
	}
	b, _ := io.ReadAll(rest)
	if string(b) != "PGDMP archive bytes\n\x00\x01" {
		t.Fatalf("archive after the header = %q", b)
	}
}

func TestReadHeaderRefuses(t *testing.T) {
	header := func(change func(*Manifest)) string {
		m := sampleManifest()
		change(m)
		var buf bytes.Buffer
		_ = writeHeader(&buf, m)
		return buf.String()
	}
	for _, tc := range []struct {
		name, in string
	}{
		{"empty", ""},
		{"a pg_dump archive", "PGDMP\x01\x0e\x00"},
		{"other format version", "SHARDKIT-SHARD-DUMP 2\n{}\n"},
		{"no manifest line end", magic + `{"shard":7`},
		{"not JSON", magic + "shard=7\n"},
		{"unknown field", magic + `{"shard":7,"extra":1}` + "\n"},
		{"schema of another shard", header(func(m *Manifest) { m.Schema = "shard_0008" })},
		{"schema with SQL", header(func(m *Manifest) { m.Schema = `shard_0007"; DROP` })},
		{"shard beyond the count", header(func(m *Manifest) { m.Shards = 7 })},
		{"bad layout", header(func(m *Manifest) { m.Layout.SeqBits = 11 })},
		{"bad part", header(func(m *Manifest) { m.Versions[0].Part = "data" })},
		{"negative sequence", header(func(m *Manifest) { m.Sequences[0].LastValue = -1 })},
		{"checksum not a number", header(func(m *Manifest) { m.Tables[0].Sum = "1 OR 1" })},
		{"unnamed table", header(func(m *Manifest) { m.Tables[0].Name = "" })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := ReadHeader(strings.NewReader(tc.in)); !errors.Is(err, ErrBadDump) {
				t.Fatalf("ReadHeader = %v, want ErrBadDump", err)
			}
		})
	}
}

// FuzzReadHeader: any input is read or refused with ErrBadDump, never a
// panic; what is read is valid and writes back to the same manifest.
func FuzzReadHeader(f *testing.F) {
	var buf bytes.Buffer
	_ = writeHeader(&buf, sampleManifest())
	f.Add(buf.Bytes())
	f.Add([]byte(magic + "{}\n"))
	f.Add([]byte(magic))
	f.Fuzz(func(t *testing.T, in []byte) {
		m, _, err := ReadHeader(bytes.NewReader(in))
		if err != nil {
			if !errors.Is(err, ErrBadDump) {
				t.Fatalf("error %v does not wrap ErrBadDump", err)
			}
			return
		}
		if err := m.validate(); err != nil {
			t.Fatalf("accepted an invalid manifest: %v", err)
		}
		var out bytes.Buffer
		if err := writeHeader(&out, m); err != nil {
			t.Fatal(err)
		}
		m2, _, err := ReadHeader(&out)
		if err != nil || m2.Shard != m.Shard || m2.Schema != m.Schema || len(m2.Tables) != len(m.Tables) {
			t.Fatalf("round trip: %+v, %v", m2, err)
		}
	})
}

func TestLibpqEnv(t *testing.T) {
	for _, tc := range []struct {
		name, dsn string
		want      []string
	}{
		{"url with pgx-only settings", "postgres://u:secret@db.example:6432/shard?sslmode=disable&statement_cache_capacity=4096&pool_max_conns=9",
			[]string{"PGHOST=db.example", "PGPORT=6432", "PGDATABASE=shard", "PGUSER=u", "PGSSLMODE=disable", "PGPASSWORD=secret"}},
		{"key=value", "host=dbhost port=5433 dbname=s user=pg sslmode=require",
			[]string{"PGHOST=dbhost", "PGPORT=5433", "PGDATABASE=s", "PGUSER=pg", "PGSSLMODE=require"}},
		{"unix socket: no TLS", "host=/var/run/postgresql dbname=s user=pg", []string{"PGHOST=/var/run/postgresql", "PGSSLMODE=disable"}},
		{"default sslmode prefers TLS", "postgres://u@h/d", []string{"PGSSLMODE=prefer"}},
		{"verify-full", "postgres://u@h/d?sslmode=verify-full", []string{"PGSSLMODE=verify-full"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, err := libpqEnv(tc.dsn, nil)
			if err != nil {
				t.Fatal(err)
			}
			joined := "\n" + strings.Join(env, "\n") + "\n"
			for _, w := range tc.want {
				if !strings.Contains(joined, "\n"+w+"\n") {
					t.Fatalf("env %v lacks %s", env, w)
				}
			}
			if strings.Contains(joined, "statement_cache") || strings.Contains(joined, "pool_") {
				t.Fatalf("env %v carries pgx-only settings", env)
			}
		})
	}
	if _, err := libpqEnv("postgres://u@h:notaport/d", nil); err == nil {
		t.Fatal("a bad DSN was accepted")
	}
}
