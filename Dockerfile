# The loader: this project's CLIs (`ingest`, `reproduce`) with their wheels (rasterio and osmium ship
# GDAL and libosmium inside their manylinux wheels, so no system GIS libraries are needed).
FROM python:3.11-slim-bookworm

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1

WORKDIR /opt/gsqa-refdb
COPY pyproject.toml README.md ./
COPY ingest ./ingest
COPY reproduce ./reproduce
COPY sql ./sql
RUN pip install --no-cache-dir . \
    && useradd --create-home --uid 1000 gsqa
USER 1000
WORKDIR /data
ENTRYPOINT ["ingest"]
CMD ["--help"]
