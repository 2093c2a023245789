# PgBouncer in transaction mode in front of one shard server: the service's
# application DSN points here, its admin DSN (moves, migrations, backup,
# logical replication) at the server itself.
#   docker build -f docker/pgbouncer.Dockerfile -t shardkit-pgbouncer docker
# UPSTREAM names the server's host; PGBOUNCER_USER and PGBOUNCER_PASSWORD
# the role clients log in as (PgBouncer logs in to the server with the same
# role and password, by SCRAM).
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends pgbouncer \
 && rm -rf /var/lib/apt/lists/*
COPY pgbouncer-entrypoint.sh /usr/local/bin/pgbouncer-entrypoint.sh
USER postgres
EXPOSE 6432
ENTRYPOINT ["/bin/sh", "/usr/local/bin/pgbouncer-entrypoint.sh"]
