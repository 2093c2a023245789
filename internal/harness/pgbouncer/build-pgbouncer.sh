#!/usr/bin/env bash
# Makes sure a PgBouncer 1.21 or later is available: the first version that
# carries protocol-level prepared statements in transaction mode
# (max_prepared_statements), which the plugin's PreparedReadsAlways is for.
# Debian 12 packages 1.18, so unless a recent enough one is installed, this
# builds PgBouncer from Debian's source tarball (a release tarball: configure
# and libusual included) once per machine, into a cache directory that
# internal/harness/pgbouncer looks in:
#
#   as root:   /var/cache/shardkit/pgbouncer-$VERSION   (PgBouncer then runs as
#              the postgres user, who cannot enter /root)
#   otherwise: ${XDG_CACHE_HOME:-$HOME/.cache}/shardkit/pgbouncer-$VERSION
#
# The packaged PgBouncer stays: the tests of the fallback need one that does
# not carry prepared statements. SHARDKIT_PGBOUNCER_PREPARED=/path/to/pgbouncer
# names one instead; SHARDKIT_PGBOUNCER_PREPARED=none builds nothing (the tests
# through it then skip). Run by `make postgres` (ensure-postgres.sh).
set -euo pipefail

VERSION=1.24.1
URL=http://deb.debian.org/debian/pool/main/p/pgbouncer/pgbouncer_${VERSION}.orig.tar.gz
SHA256=da72a3aba13072876d055a3e58dd4aba4a5de4ed6148e73033185245598fd3e0
DEPS=(gcc make pkg-config libevent-dev libssl-dev libc-ares-dev)

if [ "$(id -u)" = 0 ]; then
  cache=/var/cache/shardkit
else
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/shardkit
fi
prefix=$cache/pgbouncer-$VERSION

# carries BIN: BIN is a PgBouncer 1.21 or later.
carries() {
  local v
  v=$("$1" --version 2>/dev/null | sed -n 's/^PgBouncer \([0-9]*\)\.\([0-9]*\).*/\1 \2/p' | head -n1)
  [ -n "$v" ] || return 1
  set -- $v
  [ "$1" -gt 1 ] || { [ "$1" = 1 ] && [ "$2" -ge 21 ]; }
}

case "${SHARDKIT_PGBOUNCER_PREPARED:-}" in
none) exit 0 ;;
"") ;;
*)
  carries "$SHARDKIT_PGBOUNCER_PREPARED" && exit 0
  echo "shardkit: SHARDKIT_PGBOUNCER_PREPARED=$SHARDKIT_PGBOUNCER_PREPARED is not a PgBouncer 1.21 or later" >&2
  exit 1
  ;;
esac
for bin in "$prefix/bin/pgbouncer" "${SHARDKIT_PGBOUNCER:-}" /usr/sbin/pgbouncer "$(command -v pgbouncer || true)"; do
  [ -n "$bin" ] && [ -x "$bin" ] && carries "$bin" && exit 0
done

fail() {
  cat >&2 <<MSG
shardkit: could not build PgBouncer $VERSION (the tests of prepared statements through a
pooler need PgBouncer 1.21 or later; Debian 12 packages 1.18): $1
  Build dependencies (Debian/Ubuntu): apt-get install ${DEPS[*]}
  Source: $URL (sha256 $SHA256)
  Or install PgBouncer 1.21+ yourself and set SHARDKIT_PGBOUNCER_PREPARED to its binary,
  or set SHARDKIT_PGBOUNCER_PREPARED=none to run the tests without it (those through it skip).
MSG
  exit 1
}

mkdir -p "$cache" || fail "cannot create $cache"
# One build at a time per machine (several worktrees may run make test at once).
exec 9>"$cache/pgbouncer-build.lock"
if command -v flock >/dev/null 2>&1; then
  flock 9
fi
[ -x "$prefix/bin/pgbouncer" ] && carries "$prefix/bin/pgbouncer" && exit 0

missing=()
for p in "${DEPS[@]}"; do
  if command -v dpkg-query >/dev/null 2>&1; then
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "shardkit: installing PgBouncer's build dependencies: ${missing[*]}" >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; } ||
      fail "apt-get install ${missing[*]} failed"
  else
    fail "missing build dependencies: ${missing[*]}"
  fi
fi

work=$(mktemp -d "$cache/build-XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "shardkit: building PgBouncer $VERSION into $prefix (once per machine; a few minutes)" >&2
tarball=$work/pgbouncer.tar.gz
if command -v curl >/dev/null 2>&1; then
  curl -fsSL --retry 3 -o "$tarball" "$URL" || fail "download of $URL failed (no network?)"
elif command -v wget >/dev/null 2>&1; then
  wget -q -O "$tarball" "$URL" || fail "download of $URL failed (no network?)"
else
  fail "neither curl nor wget is installed to download $URL"
fi
got=$(sha256sum "$tarball" | cut -d' ' -f1)
[ "$got" = "$SHA256" ] || fail "$URL has sha256 $got, want $SHA256"
tar -xzf "$tarball" -C "$work" || fail "cannot unpack $URL"
src=$work/pgbouncer-$VERSION
log=$work/build.log
# Installed into a staging directory and renamed into place, so that an
# interrupted build never leaves a half-installed PgBouncer behind.
if ! (cd "$src" && ./configure --prefix="$prefix" && make -j"$(nproc 2>/dev/null || echo 2)" &&
  make install DESTDIR="$work/stage") >"$log" 2>&1; then
  tail -n 20 "$log" >&2
  fail "configure/make failed (the log's end is above)"
fi
rm -rf "$prefix"
mv "$work/stage$prefix" "$prefix"
chmod -R a+rX "$prefix"
carries "$prefix/bin/pgbouncer" || fail "the built $prefix/bin/pgbouncer does not run"
echo "shardkit: built $("$prefix/bin/pgbouncer" --version | head -n1) at $prefix/bin/pgbouncer" >&2
