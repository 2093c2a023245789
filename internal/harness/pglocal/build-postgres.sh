#!/usr/bin/env bash
# Makes sure the PostgreSQL server versions the tests run on beside the packaged
# one are available: each version named in SHARDKIT_PG_VERSIONS (default "17 18")
# that no installed binary provides is built once per machine from Debian's
# source tarball (the upstream release, generated parser files included), into
# a cache directory that internal/harness/pglocal looks in:
#
#   as root:   /var/cache/shardkit/postgresql-$VERSION   (the clusters then run
#              as the postgres user, who cannot enter /root)
#   otherwise: ${XDG_CACHE_HOME:-$HOME/.cache}/shardkit/postgresql-$VERSION
#
# A version counts as provided by /usr/lib/postgresql/$MAJOR/bin (Debian's
# packages) or by the cache. SHARDKIT_PG_VERSIONS=none builds nothing (the
# tests that name those versions then skip, saying so). Each build takes a few
# minutes of two cores; a build is installed into a staging directory and renamed
# into place, so an interrupted one never leaves a half-installed server behind.
# Run by `make postgres` (ensure-postgres.sh).
set -euo pipefail

# Pinned releases: Debian's orig tarballs, checked by sha256.
declare -A RELEASE=([17]=17.11 [18]=18.6)
declare -A SHA256=(
  [17]=dd27f2b3c59e73ed14aa3324901242bf69a032a6347805f274e6260322d42979
  [18]=555610c24d53e4316da5b7d3fc25c279d96856d5e0e23ee308c328c5fa881d9f
)
# Release tarballs carry no generated parser files since 17: bison and flex too.
DEPS=(gcc make pkg-config bison flex libicu-dev zlib1g-dev libssl-dev)

versions=${SHARDKIT_PG_VERSIONS:-17 18}
[ "$versions" = none ] && exit 0

if [ "$(id -u)" = 0 ]; then
  cache=/var/cache/shardkit
else
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/shardkit
fi

fail() {
  cat >&2 <<MSG
shardkit: could not build PostgreSQL $1: $2
  Build dependencies (Debian/Ubuntu): apt-get install ${DEPS[*]}
  Or install PostgreSQL $1's server yourself (Debian: postgresql-$1 from apt.postgresql.org)
  so that /usr/lib/postgresql/$1/bin/initdb exists, or set SHARDKIT_PG_VERSIONS to the
  versions you have (e.g. SHARDKIT_PG_VERSIONS=15; none builds nothing and the tests on
  other versions skip).
MSG
  exit 1
}

# provided MAJOR: a server of that major version is installed or cached.
provided() {
  local d
  for d in "/usr/lib/postgresql/$1/bin" "$cache/postgresql-$1/bin"; do
    [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && "$d/postgres" --version 2>/dev/null | grep -q " $1\." && return 0
  done
  return 1
}

deps_checked=
check_deps() {
  [ -n "$deps_checked" ] && return 0
  local missing=() p
  for p in "${DEPS[@]}"; do
    if command -v dpkg-query >/dev/null 2>&1; then
      dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    fi
  done
  if [ ${#missing[@]} -gt 0 ]; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
      echo "shardkit: installing PostgreSQL's build dependencies: ${missing[*]}" >&2
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; } ||
        fail "$1" "apt-get install ${missing[*]} failed"
    else
      fail "$1" "missing build dependencies: ${missing[*]}"
    fi
  fi
  deps_checked=1
}

build() {
  local major=$1 release=${RELEASE[$1]:-}
  [ -n "$release" ] || fail "$major" "no pinned release for version $major (known: ${!RELEASE[*]})"
  local url=http://deb.debian.org/debian/pool/main/p/postgresql-$major/postgresql-${major}_$release.orig.tar.bz2
  local prefix=$cache/postgresql-$major
  check_deps "$major"
  local work
  work=$(mktemp -d "$cache/build-pg$major-XXXXXX")
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" EXIT
  echo "shardkit: building PostgreSQL $release into $prefix (once per machine; about 5 minutes on two cores)" >&2
  local tarball=$work/postgresql.tar.bz2
  if command -v curl >/dev/null 2>&1; then
    curl -fsSL --retry 3 -o "$tarball" "$url" || fail "$major" "download of $url failed (no network?)"
  elif command -v wget >/dev/null 2>&1; then
    wget -q -O "$tarball" "$url" || fail "$major" "download of $url failed (no network?)"
  else
    fail "$major" "neither curl nor wget is installed to download $url"
  fi
  local got
  got=$(sha256sum "$tarball" | cut -d' ' -f1)
  [ "$got" = "${SHA256[$major]}" ] || fail "$major" "$url has sha256 $got, want ${SHA256[$major]}"
  tar -xjf "$tarball" -C "$work" || fail "$major" "cannot unpack $url"
  local src=$work/postgresql-$release log=$work/build.log
  local jobs
  jobs=$(nproc 2>/dev/null || echo 2)
  # The server, its client programs (pg_dump, psql, pg_basebackup) and the contrib
  # modules the tests use (citext); ICU for ICU collations, OpenSSL for TLS.
  # Progress: one line per stage, the full log only on failure.
  local stage
  for stage in configure build contrib install; do
    echo "shardkit: PostgreSQL $release: $stage" >&2
    if ! (
      cd "$src"
      # Run as from a shell even under `make test`: PostgreSQL's makefiles
      # generate their headers (utils/errcodes.h, …) only at MAKELEVEL 0.
      unset MAKELEVEL MAKEFLAGS MFLAGS
      case $stage in
      configure) ./configure --prefix="$prefix" --with-icu --with-openssl --without-readline ;;
      build) make -j"$jobs" -s ;;
      contrib) make -j"$jobs" -s -C contrib/citext ;;
      install) make -s install DESTDIR="$work/stage" && make -s -C contrib/citext install DESTDIR="$work/stage" ;;
      esac
    ) >>"$log" 2>&1; then
      tail -n 30 "$log" >&2
      fail "$major" "$stage failed (the log's end is above)"
    fi
  done
  rm -rf "$prefix"
  mv "$work/stage$prefix" "$prefix"
  chmod -R a+rX "$prefix"
  provided "$major" || fail "$major" "the built $prefix/bin/postgres does not run"
  echo "shardkit: built $("$prefix/bin/postgres" --version) at $prefix/bin" >&2
  rm -rf "$work"
  trap - EXIT
}

mkdir -p "$cache" || fail "$versions" "cannot create $cache"
# One build at a time per machine (several worktrees may run make test at once).
exec 9>"$cache/postgresql-build.lock"
if command -v flock >/dev/null 2>&1; then
  flock 9
fi
for v in $versions; do
  case $v in
  '' | *[!0-9]*) fail "$v" "SHARDKIT_PG_VERSIONS lists '$v'; want major versions such as '17 18'" ;;
  esac
  provided "$v" && continue
  build "$v"
done
