package pgdsn

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// redacted stands for a secret in a DSN shown to people.
const redacted = "xxxxx"

// secretKey reports the settings whose value is a secret: the password
// and the passphrase of the client key. Keywords are compared without
// case, so a misspelt one is masked rather than shown.
func secretKey(k string) bool {
	switch strings.ToLower(k) {
	case "password", "sslpassword":
		return true
	}
	return false
}

// Redact returns dsn with its secrets replaced by xxxxx, for status output,
// logs and errors: in a URL (one host or several) the userinfo password
// and the password and sslpassword query parameters, in keyword/value form
// the values of password and sslpassword, quoted or bare, with libpq's
// backslash escapes. Text that does not parse is masked from a secret's
// start to where its value could end, so a malformed DSN is over-masked
// rather than shown.
func Redact(dsn string) string {
	if scheme, rest, ok := strings.Cut(dsn, "://"); ok && (scheme == "postgres" || scheme == "postgresql") {
		return scheme + "://" + redactURL(rest)
	}
	return redactKV(dsn)
}

// redactURL masks the password in the userinfo of a URL's remainder (after
// the scheme) and the secret query parameters. The userinfo ends at the last
// @ of the authority; when a @ follows the authority's apparent end (a
// password with an unescaped / or ?), it ends at the last @ of all.
func redactURL(rest string) string {
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	at := strings.LastIndex(rest[:end], "@")
	if at < 0 {
		at = strings.LastIndex(rest, "@")
	}
	var b strings.Builder
	if at >= 0 {
		user, _, hasPW := strings.Cut(rest[:at], ":")
		b.WriteString(user)
		if hasPW {
			b.WriteString(":" + redacted)
		}
		b.WriteByte('@')
		rest = rest[at+1:]
	}
	path, query, hasQuery := strings.Cut(rest, "?")
	b.WriteString(path)
	if !hasQuery {
		return b.String()
	}
	b.WriteByte('?')
	query, frag, hasFrag := strings.Cut(query, "#")
	for i, kv := range strings.Split(query, "&") {
		if i > 0 {
			b.WriteByte('&')
		}
		k, _, hasValue := strings.Cut(kv, "=")
		dk, err := url.QueryUnescape(k)
		if err != nil {
			dk = k
		}
		if hasValue && secretKey(strings.TrimSpace(dk)) {
			b.WriteString(k + "=" + redacted)
			continue
		}
		b.WriteString(kv)
	}
	if hasFrag {
		b.WriteString("#" + frag)
	}
	return b.String()
}

// redactKV masks the secret values of a keyword/value DSN, read as libpq
// reads it: keyword, optional spaces, =, optional spaces, then a value
// quoted with ' or bare up to a space, a backslash escaping the next
// character in either.
func redactKV(s string) string {
	var b strings.Builder
	i := 0
	for i < len(s) {
		// Spaces between pairs are copied as they are.
		j := i
		for j < len(s) && isSpace(s[j]) {
			j++
		}
		b.WriteString(s[i:j])
		i = j
		for j < len(s) && s[j] != '=' && !isSpace(s[j]) {
			j++
		}
		key := s[i:j]
		k := j
		for k < len(s) && isSpace(s[k]) {
			k++
		}
		if k >= len(s) || s[k] != '=' {
			// A word without =: libpq refuses it; copy it and go on.
			b.WriteString(s[i:j])
			i = j
			continue
		}
		k++
		for k < len(s) && isSpace(s[k]) {
			k++
		}
		end := valueEnd(s, k)
		b.WriteString(s[i:k])
		if secretKey(key) {
			b.WriteString(redacted)
		} else {
			b.WriteString(s[k:end])
		}
		i = end
	}
	return b.String()
}

// valueEnd returns where the value starting at i ends: after its closing
// quote, or at the first unescaped space; an unterminated quote runs to
// the end.
func valueEnd(s string, i int) int {
	if i < len(s) && s[i] == '\'' {
		for j := i + 1; j < len(s); j++ {
			switch s[j] {
			case '\\':
				j++
			case '\'':
				return j + 1
			}
		}
		return len(s)
	}
	for j := i; j < len(s); j++ {
		switch {
		case s[j] == '\\':
			j++
		case isSpace(s[j]):
			return j
		}
	}
	return len(s)
}

func isSpace(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '\f', '\v':
		return true
	}
	return false
}

// ErrBadDSN reports a DSN the driver cannot parse.
var ErrBadDSN = errors.New("the DSN does not parse; give a URL (postgres://user@host/db) or key=value pairs")

// ParseError is a DSN that does not parse: the DSN redacted and the
// driver's reason, without the driver's own rendering of the DSN (which
// masks a quoted or escaped password only in part).
type ParseError struct {
	DSN    string // redacted
	Reason string
}

func (e *ParseError) Error() string {
	return ErrBadDSN.Error() + ": " + e.Reason + " (" + e.DSN + ")"
}

// Unwrap returns ErrBadDSN.
func (e *ParseError) Unwrap() error { return ErrBadDSN }

// Scrub returns err with any DSN the driver quotes in it redacted: a
// *pgconn.ParseConfigError becomes a *ParseError. Every error of
// pgconn.ParseConfig, pgx.ParseConfig or pgxpool.ParseConfig goes through
// Scrub before anyone sees it.
func Scrub(err error) error {
	var pe *pgconn.ParseConfigError
	if !errors.As(err, &pe) {
		return err
	}
	msg, inner := pe.Error(), pe.Unwrap()
	if inner != nil {
		msg = strings.TrimSuffix(msg, " ("+inner.Error()+")")
	}
	if i := strings.LastIndex(msg, "`: "); i >= 0 {
		msg = msg[i+3:]
	} else {
		msg = "unreadable"
	}
	// A URL's parse error quotes the URL; the others name a setting.
	var ue *url.Error
	if inner != nil && !errors.As(inner, &ue) {
		msg += ": " + inner.Error()
	}
	return &ParseError{DSN: Redact(pe.ConnString), Reason: msg}
}

// ErrDSNFile reports a DSN file (a setting @PATH) that cannot be read.
var ErrDSNFile = errors.New("cannot read the DSN file; give a readable file after @, holding the DSN alone")

// Load returns the DSN a setting gives: the setting itself, or, when it
// starts with @, the contents of the file it names with surrounding spaces
// and newlines removed. A DSN read from a file (mode 0600) is in neither a
// command line, which ps shows, nor a shell's history.
func Load(setting string) (string, error) {
	path, ok := strings.CutPrefix(setting, "@")
	if !ok {
		return setting, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrDSNFile, err)
	}
	dsn := strings.TrimSpace(string(b))
	if dsn == "" {
		return "", fmt.Errorf("%w: %s is empty", ErrDSNFile, path)
	}
	return dsn, nil
}
