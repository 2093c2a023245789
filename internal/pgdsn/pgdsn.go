// Package pgdsn turns the DSNs shardkit keeps in its catalog (any form pgx
// accepts, with pgx's own settings such as statement_cache_capacity or
// pool_max_conns) into what libpq accepts: a Postgres server connecting
// to another one (a move's subscription) and the client tools (pg_dump,
// psql) read only libpq's keywords and refuse the rest.
package pgdsn

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Libpq returns dsn as a libpq keyword/value connection string: host,
// port, database, user, password, sslmode as written (else see SSLMode),
// sslrootcert, sslcert, sslkey, sslpassword, sslsni, sslcrl,
// channel_binding and require_auth as written, connect_timeout
// and application_name as keywords, every other run-time parameter as
// `-c name=value` in options, and pgx's own settings left out. Every host
// is kept (see Hosts), with target_session_attrs.
func Libpq(dsn string) (string, error) { return libpq(dsn, nil) }

// LibpqAt is Libpq naming the one host at (one of the DSN's hosts, see
// HostAt) in place of the DSN's list: a server that must reach the very
// host a connection of the DSN reached (a subscription to the slot made
// there) then cannot reach another host of an HA group.
func LibpqAt(dsn string, at HostPort) (string, error) { return libpq(dsn, &at) }

func libpq(dsn string, at *HostPort) (string, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return "", Scrub(err)
	}
	var b strings.Builder
	add := func(k, v string) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k)
		b.WriteString("='")
		for i := 0; i < len(v); i++ { // bytes: a value need not be UTF-8
			if v[i] == '\'' || v[i] == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(v[i])
		}
		b.WriteByte('\'')
	}
	hosts := Hosts(cfg)
	if at != nil {
		hosts = []HostPort{*at}
	}
	host, port := HostList(hosts)
	add("host", host)
	add("port", port)
	if tsa := TargetSessionAttrs(cfg); tsa != "" {
		add("target_session_attrs", tsa)
	}
	if cfg.Database != "" { // empty: libpq's default, as pgx's
		add("dbname", cfg.Database)
	}
	if cfg.User != "" {
		add("user", cfg.User)
	}
	if cfg.Password != "" {
		add("password", cfg.Password)
	}
	// TLS as written: verify-ca stays verify-ca, and the certificates,
	// the key and channel binding reach libpq.
	add("sslmode", sslMode(dsn, cfg))
	w := written(dsn)
	for _, k := range tlsKeys {
		if v, ok := w[k]; ok {
			add(k, v)
		}
	}
	if cfg.ConnectTimeout > 0 {
		secs := (cfg.ConnectTimeout + 999_999_999) / 1_000_000_000 // whole seconds, rounded up
		add("connect_timeout", strconv.FormatInt(int64(secs), 10))
	}
	var opts []string
	for _, k := range slices.Sorted(maps.Keys(cfg.RuntimeParams)) {
		v := cfg.RuntimeParams[k]
		if pgxOnly(k) {
			continue
		}
		switch k {
		case "application_name":
			add(k, v)
			continue
		case "options": // given as options already: in options syntax
			opts = append(opts, v)
			continue
		}
		// In options, a backslash escapes the next character: spaces
		// inside a value, and backslashes themselves.
		var o strings.Builder
		fmt.Fprintf(&o, "-c %s=", escapeOption(k))
		o.WriteString(escapeOption(v))
		opts = append(opts, o.String())
	}
	if len(opts) > 0 {
		add("options", strings.Join(opts, " "))
	}
	return b.String(), nil
}

// pgxOnly reports the settings pgx (statement_cache_capacity and the
// like) and pgxpool (pool_max_conns, …) take from a DSN for themselves,
// which pgconn leaves among the run-time parameters.
func pgxOnly(k string) bool {
	switch k {
	case "statement_cache_capacity", "description_cache_capacity", "default_query_exec_mode":
		return true
	}
	return strings.HasPrefix(k, "pool_")
}

func escapeOption(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\\', '\t', '\n', '\r', '\f', '\v':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// SSLMode approximates the DSN's sslmode from pgx's parsed form: no TLS
// is "disable", TLS with a plain fallback "prefer", TLS that checks the
// certificate's chain but not its name "verify-ca" (pgx's verify-ca, and
// require with a root certificate, as libpq reads it), TLS that skips
// verification "require", verified TLS "verify-full".
func SSLMode(cfg *pgconn.Config) string {
	switch {
	case cfg.TLSConfig == nil:
		return "disable"
	case len(cfg.Fallbacks) > 0 && cfg.Fallbacks[len(cfg.Fallbacks)-1].TLSConfig == nil:
		return "prefer"
	case cfg.TLSConfig.InsecureSkipVerify && cfg.TLSConfig.VerifyPeerCertificate != nil:
		return "verify-ca"
	case cfg.TLSConfig.InsecureSkipVerify:
		return "require"
	default:
		return "verify-full"
	}
}
