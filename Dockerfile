# The loader: this project's CLIs (`ingest`, `reproduce`) on Debian 12's Python 3.11, in a venv with their
# wheels (rasterio and osmium ship GDAL and libosmium inside their manylinux wheels). Two stages: the first
# has g++, python3-dev and libosmium's headers (setup/system-packages.txt, native) to build the native PBF
# reader (ingest/osm/pbf/_osmread.cpp) and GeoJSON lines encoder (ingest/osm/_lines.cpp) while the project is
# installed; the image keeps only its venv, whose compiled modules need libstdc++ and zlib (both in the base
# image) and libsimdjson14 (installed below); one stage with the compiler and headers: 1.26 GB; this: 737 MB.
# The base image is built locally by `make base-image` where no registry is reachable.
FROM debian:bookworm-slim AS build

# The venv and native groups of setup/system-packages.txt: python3-venv, the compiler and headers.
COPY setup/ /tmp/setup/
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates python3 \
    && bash /tmp/setup/system-packages venv native \
    && rm -rf /var/lib/apt/lists/*
# Certificates of a TLS-intercepting proxy, if any (docker/ca-certificates/README.md); Python's HTTP clients
# are pointed at the system store, which then holds them.
COPY docker/ca-certificates/ /usr/local/share/ca-certificates/gsqa/
RUN update-ca-certificates >/dev/null
ENV PATH=/opt/venv/bin:$PATH \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt
WORKDIR /opt/gsqa-refdb
COPY pyproject.toml README.md hatch_build.py ./
COPY gsqa_core ./gsqa_core
COPY ingest ./ingest
COPY reproduce ./reproduce
COPY sql ./sql
# The install goes on without the native reader where it cannot build it; here it must be there.
RUN python3 -m venv /opt/venv && pip install --no-cache-dir . \
    && python3 -I -c "import ingest.osm.pbf._osmread, ingest.osm._lines"

FROM debian:bookworm-slim

# postgresql-client-15: pg_dump, pg_restore and vacuumdb for `ingest snapshot` (make db FROM=...); zstd: a
# physical snapshot's parts (make snapshot, make db FROM=); libsimdjson14: the native GeoJSON lines encoder's.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates python3 postgresql-client-15 zstd libsimdjson14 \
    && rm -rf /var/lib/apt/lists/*
COPY docker/ca-certificates/ /usr/local/share/ca-certificates/gsqa/
RUN update-ca-certificates >/dev/null && useradd --create-home --uid 1000 gsqa
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt \
    PYTHONUNBUFFERED=1
# `make db` runs the container as the invoking user (GSQA_UID), so that fetched files belong to them.
USER 1000
WORKDIR /data
ENTRYPOINT ["ingest"]
CMD ["--help"]
