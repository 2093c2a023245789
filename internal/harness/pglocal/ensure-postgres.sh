#!/usr/bin/env bash
# Makes sure PostgreSQL server binaries (initdb, pg_ctl) and PgBouncer are
# installed; the tests start their own throwaway clusters from them, and run
# the differential test a second time through PgBouncer in transaction mode.
# Then build-pgbouncer.sh makes sure a PgBouncer 1.21 or later is there too
# (built from source when the packaged one is older), for the tests of
# prepared statements through a pooler, and build-postgres.sh that the other
# server versions the tests run on (SHARDKIT_PG_VERSIONS, default 17 18) are
# installed or built.
set -euo pipefail
build_pgbouncer="$(dirname "$0")/../pgbouncer/build-pgbouncer.sh"
build_postgres="$(dirname "$0")/build-postgres.sh"
builds() { "$build_pgbouncer" && "$build_postgres"; }
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
if [ ${#missing[@]} = 0 ]; then builds; exit; fi
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "shardkit: installing the missing Debian package(s): ${missing[*]}" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  builds; exit
fi
cat >&2 <<MSG
shardkit: the tests need PostgreSQL 15+ server binaries (initdb, pg_ctl) and PgBouncer; missing: ${missing[*]}.
  Debian/Ubuntu:  sudo apt-get install ${missing[*]}
  macOS:          brew install postgresql@16 pgbouncer
  or set SHARDKIT_PG_BIN to the directory that holds initdb and pg_ctl,
  and SHARDKIT_PGBOUNCER to the pgbouncer binary.
MSG
exit 1
