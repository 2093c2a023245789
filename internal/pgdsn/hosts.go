package pgdsn

import (
	"fmt"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// HostPort is one host a DSN names, with its port.
type HostPort struct {
	Host string
	Port uint16
}

func (h HostPort) String() string { return h.Host + ":" + strconv.Itoa(int(h.Port)) }

// Hosts lists the hosts cfg names, in order, each once: a DSN of an HA
// deployment names the primary and its standbys
// (host=a,b port=5432,5432), and pgx keeps all but the first as
// fallbacks, beside the plain-text retries of sslmode=prefer, which name
// a host again.
func Hosts(cfg *pgconn.Config) []HostPort {
	out := []HostPort{{cfg.Host, cfg.Port}}
	for _, f := range cfg.Fallbacks {
		if h := (HostPort{f.Host, f.Port}); !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

// HostList renders hosts as libpq's comma-separated host and port lists
// (the host and port keywords, PGHOST and PGPORT).
func HostList(hosts []HostPort) (host, port string) {
	hs := make([]string, len(hosts))
	ps := make([]string, len(hosts))
	for i, h := range hosts {
		hs[i], ps[i] = h.Host, strconv.Itoa(int(h.Port))
	}
	return strings.Join(hs, ","), strings.Join(ps, ",")
}

// SharesHost reports whether two DSNs name a host in common: the same
// PostgreSQL server, or servers of one HA group, whose slots and workers
// the two sides then may share.
func SharesHost(a, b *pgconn.Config) bool {
	hb := Hosts(b)
	for _, h := range Hosts(a) {
		if slices.Contains(hb, h) {
			return true
		}
	}
	return false
}

// targetSessionAttrs maps pgx's checks back to libpq's
// target_session_attrs values: pgx keeps the setting only as the check.
var targetSessionAttrs = map[uintptr]string{
	funcPtr(pgconn.ValidateConnectTargetSessionAttrsReadWrite):     "read-write",
	funcPtr(pgconn.ValidateConnectTargetSessionAttrsReadOnly):      "read-only",
	funcPtr(pgconn.ValidateConnectTargetSessionAttrsPrimary):       "primary",
	funcPtr(pgconn.ValidateConnectTargetSessionAttrsStandby):       "standby",
	funcPtr(pgconn.ValidateConnectTargetSessionAttrsPreferStandby): "prefer-standby",
}

func funcPtr(f pgconn.ValidateConnectFunc) uintptr { return reflect.ValueOf(f).Pointer() }

// TargetSessionAttrs returns the target_session_attrs cfg was parsed with,
// "" for any (libpq's default).
func TargetSessionAttrs(cfg *pgconn.Config) string {
	if cfg.ValidateConnect == nil {
		return ""
	}
	return targetSessionAttrs[funcPtr(cfg.ValidateConnect)]
}

// HostAt returns the host of hosts that addr, the remote address of a
// connection made with them, is: the one whose port matches and whose
// host is addr's IP or resolves to it (a Unix socket matches by its
// directory's socket path). A client tool pinned to that host reaches the
// server the connection did, whatever else the DSN names.
func HostAt(hosts []HostPort, addr net.Addr) (HostPort, bool) {
	if addr == nil {
		return HostPort{}, false
	}
	if u, ok := addr.(*net.UnixAddr); ok {
		for _, h := range hosts {
			if strings.HasPrefix(h.Host, "/") && u.Name == fmt.Sprintf("%s/.s.PGSQL.%d", h.Host, h.Port) {
				return h, true
			}
		}
		return HostPort{}, false
	}
	ip, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return HostPort{}, false
	}
	for _, h := range hosts {
		if strconv.Itoa(int(h.Port)) != port {
			continue
		}
		if h.Host == ip {
			return h, true
		}
		if addrs, err := net.LookupHost(h.Host); err == nil && slices.Contains(addrs, ip) {
			return h, true
		}
	}
	return HostPort{}, false
}
