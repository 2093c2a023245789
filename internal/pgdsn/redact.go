package pgdsn

import (
	"net/url"
	"regexp"
	"strings"
)

// redacted stands for a password in a DSN shown to people.
const redacted = "xxxxx"

// kvPassword matches the password of a keyword/value DSN: a quoted value
// (with backslash escapes) or a bare one.
var kvPassword = regexp.MustCompile(`(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)`)

// Redact returns dsn with its passwords replaced by xxxxx, for status
// output and logs: in a URL the userinfo password and a password query
// parameter, in keyword/value form the password keyword. A URL that does
// not parse is redacted as keyword/value text, and its userinfo dropped.
func Redact(dsn string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			scheme, rest, _ := strings.Cut(dsn, "://")
			if at := strings.LastIndex(rest, "@"); at >= 0 {
				rest = redacted + "@" + rest[at+1:]
			}
			return scheme + "://" + kvPassword.ReplaceAllString(rest, "${1}"+redacted)
		}
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), redacted)
		}
		q := u.Query()
		if q.Has("password") {
			q.Set("password", redacted)
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	return kvPassword.ReplaceAllString(dsn, "${1}"+redacted)
}
