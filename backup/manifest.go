package backup

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shardkit/shardkit/idgen"
	"github.com/shardkit/shardkit/router"
)

// magic is the first line of a shard dump; the number is the format.
const magic = "SHARDKIT-SHARD-DUMP 1\n"

// maxManifest bounds the manifest line a reader accepts.
const maxManifest = 16 << 20

// Manifest describes a shard dump. It is the file's second line (JSON);
// the rest of the file is a pg_dump custom-format archive of the schema.
type Manifest struct {
	Shard      int          `json:"shard"`
	Schema     string       `json:"schema"`
	Server     string       `json:"server"`      // the shard's home when dumped
	MapVersion int64        `json:"map_version"` // the shard map's version when dumped
	Shards     int          `json:"shards"`      // the catalog's shard count
	Layout     idgen.Layout `json:"layout"`
	TakenAt    time.Time    `json:"taken_at"` // the server's clock at the snapshot
	Versions   []SQLVersion `json:"versions"`
	Sequences  []Sequence   `json:"sequences"`
	Tables     []Table      `json:"tables"`
	NewestID   int64        `json:"newest_id"` // largest id of the schema's tables, 0 if none
}

// SQLVersion is one per-shard SQL step recorded for the schema
// (shardkit.shard_migrations on its server).
type SQLVersion struct {
	Version   int       `json:"version"`
	Part      string    `json:"part"`
	Name      string    `json:"name"`
	AppliedAt time.Time `json:"applied_at"`
}

// Sequence is a sequence of the schema and its last value when dumped.
// id_seq is next_id()'s hybrid sequence (ms·2^counter bits + counter).
type Sequence struct {
	Name      string `json:"name"`
	LastValue int64  `json:"last_value"`
}

// Table is a table of the schema with its row count and checksum (the sum
// of hashtextextended over each row's text form, UTC and ISO settings).
type Table struct {
	Name string `json:"name"`
	Rows int64  `json:"rows"`
	Sum  string `json:"sum"`
}

// Rows returns the dump's total row count.
func (m *Manifest) Rows() int64 {
	var n int64
	for _, t := range m.Tables {
		n += t.Rows
	}
	return n
}

// validate checks what a restore relies on.
func (m *Manifest) validate() error {
	if m.Shard < 0 || router.SchemaName(m.Shard) != m.Schema {
		return fmt.Errorf("%w: manifest names shard %d and schema %q", ErrBadDump, m.Shard, m.Schema)
	}
	if err := m.Layout.Validate(); err != nil {
		return fmt.Errorf("%w: manifest layout: %w", ErrBadDump, err)
	}
	if m.Shards <= 0 || m.Shard >= m.Shards || m.Shards > m.Layout.MaxShards() {
		return fmt.Errorf("%w: shard %d of %d shards in a layout of %d", ErrBadDump, m.Shard, m.Shards, m.Layout.MaxShards())
	}
	for _, v := range m.Versions {
		if v.Version < 0 || (v.Part != "tables" && v.Part != "indexes") || v.Name == "" {
			return fmt.Errorf("%w: SQL version %+v", ErrBadDump, v)
		}
	}
	for _, s := range m.Sequences {
		if s.Name == "" || s.LastValue < 0 {
			return fmt.Errorf("%w: sequence %+v", ErrBadDump, s)
		}
	}
	for _, t := range m.Tables {
		if t.Name == "" || t.Rows < 0 || t.Sum == "" || strings.Trim(t.Sum, "-0123456789") != "" {
			return fmt.Errorf("%w: table %+v", ErrBadDump, t)
		}
	}
	if m.NewestID < 0 {
		return fmt.Errorf("%w: newest ID %d", ErrBadDump, m.NewestID)
	}
	return nil
}

// writeHeader writes the magic line and the manifest line.
func writeHeader(w io.Writer, m *Manifest) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if _, err := io.WriteString(w, magic); err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// ReadHeader reads a dump's magic line and manifest and returns the
// manifest and a reader positioned at the pg_dump archive.
func ReadHeader(r io.Reader) (*Manifest, io.Reader, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	first, err := br.ReadString('\n')
	if err != nil || first != magic {
		return nil, nil, fmt.Errorf("%w: the file does not start with %q", ErrBadDump, strings.TrimSpace(magic))
	}
	line, err := readLine(br, maxManifest)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: manifest: %w", ErrBadDump, err)
	}
	var m Manifest
	dec := json.NewDecoder(strings.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, nil, fmt.Errorf("%w: manifest: %w", ErrBadDump, err)
	}
	if err := m.validate(); err != nil {
		return nil, nil, err
	}
	return &m, br, nil
}

// readLine reads up to a newline, refusing lines longer than limit.
func readLine(br *bufio.Reader, limit int) (string, error) {
	var b strings.Builder
	for {
		chunk, err := br.ReadSlice('\n')
		b.Write(chunk)
		if b.Len() > limit {
			return "", fmt.Errorf("longer than %d bytes", limit)
		}
		if err == nil {
			return strings.TrimSuffix(b.String(), "\n"), nil
		}
		if err != bufio.ErrBufferFull {
			return "", err
		}
	}
}
