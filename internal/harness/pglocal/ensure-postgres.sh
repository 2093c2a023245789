#!/usr/bin/env bash
# Makes sure PostgreSQL server binaries (initdb, pg_ctl) and PgBouncer are
# installed; the tests start their own throwaway clusters from them, and run
# the differential test a second time through PgBouncer in transaction mode.
# Then build-pgbouncer.sh makes sure a PgBouncer 1.21 or later is there too
# (built from source when the packaged one is older), for the tests of
# prepared statements through a pooler.
set -euo pipefail
build_pgbouncer="$(dirname "$0")/../pgbouncer/build-pgbouncer.sh"
have_pg() {
  { [ -n "${SHARDKIT_PG_BIN:-}" ] && [ -x "$SHARDKIT_PG_BIN/initdb" ]; } ||
    ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1
}
have_pgbouncer() {
  { [ -n "${SHARDKIT_PGBOUNCER:-}" ] && [ -x "$SHARDKIT_PGBOUNCER" ]; } ||
    [ -x /usr/sbin/pgbouncer ] || command -v pgbouncer >/dev/null 2>&1
}
missing=()
have_pg || missing+=(postgresql)
have_pgbouncer || missing+=(pgbouncer)
[ ${#missing[@]} = 0 ] && exec "$build_pgbouncer"
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "shardkit: installing the missing Debian package(s): ${missing[*]}" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  exec "$build_pgbouncer"
fi
cat >&2 <<MSG
shardkit: the tests need PostgreSQL 15+ server binaries (initdb, pg_ctl) and PgBouncer; missing: ${missing[*]}.
  Debian/Ubuntu:  sudo apt-get install ${missing[*]}
  macOS:          brew install postgresql@16 pgbouncer
  or set SHARDKIT_PG_BIN to the directory that holds initdb and pg_ctl,
  and SHARDKIT_PGBOUNCER to the pgbouncer binary.
MSG
exit 1
