package pgdsn

import (
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// tlsKeys are the settings of a DSN that decide how a connection is
// secured, in the order Libpq writes them after sslmode. pgx reads them
// into a tls.Config, from which they cannot be read back as written, so
// Libpq and Env take them from the DSN's text.
var tlsKeys = []string{"sslrootcert", "sslcert", "sslkey", "sslpassword", "sslsni", "sslcrl", "channel_binding", "require_auth"}

// written returns the settings dsn spells out itself (not those pgx
// would take from the environment or a service file): its URL query or
// its keyword/value pairs, values unquoted and unescaped.
func written(dsn string) map[string]string {
	out := map[string]string{}
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return out
		}
		for k, v := range u.Query() {
			out[k] = v[0]
		}
		return out
	}
	s := dsn
	for i := 0; i < len(s); {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		j := i
		for j < len(s) && s[j] != '=' && !isSpace(s[j]) {
			j++
		}
		key := s[i:j]
		k := j
		for k < len(s) && isSpace(s[k]) {
			k++
		}
		if k >= len(s) || s[k] != '=' {
			i = j
			if i == k {
				i++
			}
			continue
		}
		k++
		for k < len(s) && isSpace(s[k]) {
			k++
		}
		end := valueEnd(s, k)
		out[key] = unescape(s[k:end])
		i = end
	}
	return out
}

// unescape reads a keyword/value DSN's value: quotes removed, a backslash
// standing for the character after it.
func unescape(v string) string {
	if strings.HasPrefix(v, "'") {
		v = strings.TrimSuffix(v[1:], "'")
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// sslMode is the DSN's sslmode as written, or as pgx's parsed form says
// when it names none.
func sslMode(dsn string, cfg *pgconn.Config) string {
	if m := written(dsn)["sslmode"]; m != "" {
		return m
	}
	return SSLMode(cfg)
}

// Env returns the libpq environment variables (PGSSLMODE, PGSSLROOTCERT, …)
// that carry dsn's TLS settings as written to a client tool (pg_dump,
// psql): the mode, the root and client certificates, the client key, SNI,
// the revocation list, channel binding and required authentication. The
// key's passphrase (sslpassword) has no variable; a DSN with one needs a
// key without a passphrase for the tools.
func Env(dsn string, cfg *pgconn.Config) []string {
	w := written(dsn)
	env := []string{"PGSSLMODE=" + sslMode(dsn, cfg)}
	vars := map[string]string{"sslrootcert": "PGSSLROOTCERT", "sslcert": "PGSSLCERT", "sslkey": "PGSSLKEY",
		"sslsni": "PGSSLSNI", "sslcrl": "PGSSLCRL", "channel_binding": "PGCHANNELBINDING", "require_auth": "PGREQUIREAUTH"}
	for _, k := range tlsKeys {
		if v, ok := w[k]; ok && vars[k] != "" {
			env = append(env, vars[k]+"="+v)
		}
	}
	return env
}
