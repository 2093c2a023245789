#!/bin/sh
# Writes PgBouncer's configuration from the environment and runs it.
set -eu
: "${UPSTREAM:?set UPSTREAM to the shard server's host}"
: "${PGBOUNCER_USER:=postgres}"
: "${PGBOUNCER_PASSWORD:?set PGBOUNCER_PASSWORD}"
dir=/tmp/pgbouncer
mkdir -p "$dir"
printf '"%s" "%s"\n' "$PGBOUNCER_USER" "$PGBOUNCER_PASSWORD" > "$dir/userlist.txt"
cat > "$dir/pgbouncer.ini" <<INI
[databases]
* = host=${UPSTREAM} port=${UPSTREAM_PORT:-5432}

[pgbouncer]
listen_addr = 0.0.0.0
listen_port = 6432
unix_socket_dir =
auth_type = scram-sha-256
auth_file = ${dir}/userlist.txt
; transaction mode: a server connection serves one client transaction at a
; time, so thousands of app connections share a few server backends.
pool_mode = transaction
max_client_conn = ${MAX_CLIENT_CONN:-4000}
default_pool_size = ${DEFAULT_POOL_SIZE:-20}
; nothing to reset between transactions: shardkit keeps no session state
server_reset_query =
INI
exec pgbouncer "$dir/pgbouncer.ini"
