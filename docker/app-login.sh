#!/bin/sh
# Run once by the postgres image when a server's data directory is new
# (/docker-entrypoint-initdb.d): creates the application's group role
# (shardkit_app, which provisioning grants the shards' privileges to) and
# the service's login, a member of it and nothing else.
set -eu
: "${PHOTOS_APP_PASSWORD:?set PHOTOS_APP_PASSWORD}"
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -v password="$PHOTOS_APP_PASSWORD" <<'SQL'
CREATE ROLE shardkit_app NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION;
CREATE ROLE photos_app LOGIN PASSWORD :'password' NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION IN ROLE shardkit_app;
SQL
