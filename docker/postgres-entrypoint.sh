#!/bin/bash
# Entrypoint of the gsqa PostGIS image (Dockerfile.postgis). On the first start it creates the cluster in
# the data volume with the superuser password from POSTGRES_PASSWORD, runs /docker-entrypoint-initdb.d/*
# against a server that listens on the Unix socket only, and moves the finished cluster into place; then
# (and on every later start) it runs the server on all interfaces. A start killed during init leaves only
# a scratch folder, which the next start deletes and builds again.
# With GSQA_STANDBY_OF=HOST (the `replica` service) the first start copies HOST's cluster instead, with
# pg_basebackup -R, and the server runs as its hot standby (streaming replication); the reader role, the
# data and the settings come along.
# Every backend may take at most GSQA_BACKEND_MEMORY_MB of its own memory (RLIMIT_DATA; default: as
# backend-memory.sh sizes it for this container), so that one statement cannot take the server's memory.
# Environment: POSTGRES_PASSWORD (required on first start), POSTGRES_USER (postgres), POSTGRES_DB (gsqa),
# GSQA_STANDBY_OF, GSQA_BACKEND_MEMORY_MB.
set -euo pipefail
: "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=gsqa}" "${PGDATA:=/var/lib/postgresql/data/pgdata}"
export POSTGRES_USER POSTGRES_DB PGDATA

if [ "$(id -u)" = 0 ]; then
    install -d -o postgres -g postgres -m 700 "$(dirname "$PGDATA")"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

if [ -n "${GSQA_STANDBY_OF:-}" ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
    scratch="$PGDATA.init"
    rm -rf "$scratch"
    until pg_isready -q -h "$GSQA_STANDBY_OF" -U "$POSTGRES_USER"; do sleep 1; done
    echo "init: copying $GSQA_STANDBY_OF with pg_basebackup (the whole database: minutes for a full build)" >&2
    PGPASSWORD="$POSTGRES_PASSWORD" pg_basebackup --host="$GSQA_STANDBY_OF" --username="$POSTGRES_USER" \
        --pgdata="$scratch" --write-recovery-conf --wal-method=stream --checkpoint=fast
    mv "$scratch" "$PGDATA"
    echo "init: hot standby of $GSQA_STANDBY_OF ready" >&2
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    if [ -z "${POSTGRES_PASSWORD:-}" ]; then
        echo "error: the database is not initialised yet and POSTGRES_PASSWORD is empty: set it (docker-compose.yml does)" >&2
        exit 2
    fi
    scratch="$PGDATA.init"
    rm -rf "$scratch"
    initdb --pgdata="$scratch" --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") \
        --encoding=UTF8 --locale=en_US.UTF-8 --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    # The sandbox roles (gsqa_core/sandbox.py) log in to the reference database only: in another one (postgres,
    # template1) a login of theirs could leave large objects behind (docs/SANDBOX.md). First lines win.
    sandbox="gsqa_reader,gsqa_model"
    { printf 'local %s %s trust\nhost %s %s all scram-sha-256\n' "$POSTGRES_DB" "$sandbox" "$POSTGRES_DB" "$sandbox"
      printf 'local all %s reject\nhost all %s all reject\n' "$sandbox" "$sandbox"
      cat "$scratch/pg_hba.conf"; } > "$scratch/pg_hba.first" && mv "$scratch/pg_hba.first" "$scratch/pg_hba.conf"
    # Other containers (the loader, reproduce) log in over the compose network with the password.
    echo "host all all all scram-sha-256" >> "$scratch/pg_hba.conf"
    # Hot standbys (`make replicas`) copy and follow the primary over the same network.
    echo "host replication all all scram-sha-256" >> "$scratch/pg_hba.conf"
    pg_ctl --pgdata="$scratch" --options="-c listen_addresses=''" --wait --silent start
    if [ "$POSTGRES_DB" != postgres ]; then
        psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres -qc "CREATE DATABASE \"$POSTGRES_DB\""
    fi
    for script in /docker-entrypoint-initdb.d/*; do
        case "$script" in
            *.sh) echo "init: $script" >&2; PGDATA="$scratch" bash "$script" ;;
            *.sql) echo "init: $script" >&2; psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" -f "$script" ;;
        esac
    done
    pg_ctl --pgdata="$scratch" --mode=fast --wait --silent stop
    mv "$scratch" "$PGDATA"
    echo "init: database $POSTGRES_DB ready" >&2
fi

# A statement past its backend's memory fails with "out of memory", and every other session goes on
# (docs/SANDBOX.md, "Memory").
ulimit -d $(( ${GSQA_BACKEND_MEMORY_MB:-$(backend-memory.sh)} * 1024 ))
exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
