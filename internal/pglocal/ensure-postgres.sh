#!/usr/bin/env bash
# Makes sure PostgreSQL server binaries (initdb, pg_ctl) are installed; the
# tests start their own throwaway clusters from them.
set -euo pipefail
if [ -n "${SHARDKIT_PG_BIN:-}" ] && [ -x "$SHARDKIT_PG_BIN/initdb" ]; then exit 0; fi
if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; then exit 0; fi
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "shardkit: PostgreSQL server binaries missing; installing the Debian package 'postgresql'" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  exit 0
fi
cat >&2 <<MSG
shardkit: the tests need PostgreSQL 15+ server binaries (initdb, pg_ctl) and found none.
  Debian/Ubuntu:  sudo apt-get install postgresql
  macOS:          brew install postgresql@16
  or set SHARDKIT_PG_BIN to the directory that holds initdb and pg_ctl.
MSG
exit 1
