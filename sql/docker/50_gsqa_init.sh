#!/bin/bash
# Docker init script of the reference database (runs once, on an empty data volume, after the image's
# initdb-postgis.sh). It does only what must exist before the loader connects; the schema itself is
# created by `ingest init`, so that `make db-local` and `make db` build the same thing.
set -euo pipefail

# The gsqa server settings (docker/postgresql-gsqa.conf). They take effect when the entrypoint restarts
# the server after init, before the healthcheck on 127.0.0.1 turns green.
echo "include_if_exists = '/etc/postgresql/gsqa.conf'" >> "$PGDATA/postgresql.conf"

# The image enables postgis but not postgis_raster.
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" <<'SQL'
CREATE EXTENSION IF NOT EXISTS postgis;
CREATE EXTENSION IF NOT EXISTS postgis_raster;
SQL
