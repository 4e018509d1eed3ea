#!/bin/bash
# `make replicas N=2`: N hot standbys of the db service for `reproduce verify --replica`.
# The primary is built with wal_level = minimal (no WAL for bulk loads), which a standby cannot follow: this
# switches it to replica once (ALTER SYSTEM, one restart of db), lets the replication entry into pg_hba.conf
# of a volume made before it was there, then starts the standbys and prints their DSNs.
# Usage: docker/replicas.sh N   (COMPOSE, POSTGRES_PASSWORD from the Makefile)
set -euo pipefail
count=${1:?usage: replicas.sh N}
compose=${COMPOSE:-docker compose}
password=${POSTGRES_PASSWORD:-gsqa}
in_db() { $compose exec -T db "$@"; }

in_db bash -c 'grep -q "^host replication all all" "$PGDATA/pg_hba.conf" \
    || echo "host replication all all scram-sha-256" >> "$PGDATA/pg_hba.conf"'
if [ "$(in_db psql -qtA -U postgres -d gsqa -c 'SHOW wal_level')" != replica ]; then
    echo "replicas: switching db to wal_level = replica (one restart)" >&2
    in_db psql -q -v ON_ERROR_STOP=1 -U postgres -d gsqa \
        -c "ALTER SYSTEM SET wal_level = replica" -c "ALTER SYSTEM SET max_wal_senders = 10"
    $compose restart db
    $compose up --detach --wait db
else
    in_db psql -q -U postgres -d gsqa -c "SELECT pg_reload_conf()" >/dev/null
fi
$compose --profile replicas up --detach --wait --scale "replica=$count" replica
for container in $($compose --profile replicas ps --quiet replica); do
    port=$(docker port "$container" 5432/tcp | head -n 1 | sed 's/.*://')
    echo "replica:  postgresql://postgres:$password@127.0.0.1:$port/gsqa"
done
echo "verify:   reproduce verify --config raster_only --dsn <database> --replica <replica> ... (one --replica each)"
