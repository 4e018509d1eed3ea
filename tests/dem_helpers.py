"""Shared by the DEM tests: synthetic ASTER files, raster2pgsql as the reference, and a table fingerprint."""

from __future__ import annotations

import subprocess
from pathlib import Path

import psycopg

from gsqa_core.dem_grid import ASTER_SIZE, TILE
from ingest.dem.synthetic import cheap_terrain, write_aster_tile

REFERENCE_FLAGS = ["-s", "4326", "-I", "-C", "-M", "-F", "-Y", "50", "-t", "256x256"]


def write_neighbours(folder: Path, size: int = ASTER_SIZE, lat: int = 40, lons: tuple[int, ...] = (-100, -99),
                     nodata: int | None = None) -> list[Path]:
    """West-to-east neighbours sharing their 1-pixel seam column, as ASTER tiles do."""
    folder.mkdir(parents=True, exist_ok=True)
    paths, previous = [], None
    for seed, lon in enumerate(lons):
        data = cheap_terrain(size, seed)
        if previous is not None:
            data[:, 0] = previous[:, -1]
        paths.append(write_aster_tile(folder, lat, lon, data, nodata=nodata, size=size))
        previous = data
    return paths


def with_nodata_tile(folder: Path, lat: int, lon: int, size: int = 600, nodata: int = -9999) -> Path:
    """A file with a NODATA tag whose second tile is entirely NODATA (raster2pgsql drops such tiles)."""
    data = cheap_terrain(size, lat + lon)
    data[0:TILE, TILE:2 * TILE] = nodata
    data[300, 300] = nodata  # a NODATA pixel inside a kept tile stays
    return write_aster_tile(folder, lat, lon, data, nodata=nodata, size=size)


def load_with_raster2pgsql(dsn: str, table: str, files: list[Path]) -> None:
    """The reference load, exactly as docs/REFERENCE-DB.md gives it (COPY mode), files sorted by name."""
    ordered = sorted(files, key=lambda path: path.name)
    dump = subprocess.run(["raster2pgsql", *REFERENCE_FLAGS, *map(str, ordered), table],
                          capture_output=True, check=True)
    subprocess.run(["psql", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn], input=dump.stdout, capture_output=True,
                   check=True)


def table_state(dsn: str, table: str) -> dict:
    """Everything the benchmark can observe of a raster table, with the table's own name taken out."""
    schema_name, name = table.split(".")
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(f"SELECT rid, md5(rast::bytea), filename FROM {table} ORDER BY rid").fetchall()
        physical = [rid for (rid,) in conn.execute(f"SELECT rid FROM {table} ORDER BY ctid")]
        constraints = sorted(conn.execute(
            "SELECT regexp_replace(conname, '^' || %s, 'T'), pg_get_constraintdef(oid), convalidated "
            "FROM pg_constraint WHERE conrelid = %s::regclass", [name, table]).fetchall())
        columns = conn.execute(
            "SELECT srid, scale_x, scale_y, blocksize_x, blocksize_y, same_alignment, regular_blocking, num_bands, "
            "pixel_types, nodata_values, out_db, extent::text, spatial_index FROM raster_columns "
            "WHERE r_table_schema = %s AND r_table_name = %s", [schema_name, name]).fetchall()
        indexes = sorted(definition.replace(name, "T") for (definition,) in conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND tablename = %s", [schema_name, name]))
        sequence = conn.execute(f"SELECT last_value FROM {table}_rid_seq").fetchone()[0]
        options = conn.execute("SELECT reloptions FROM pg_class WHERE oid = %s::regclass", [table]).fetchone()[0]
    return {"rows": rows, "physical_order": physical, "constraints": constraints, "raster_columns": columns,
            "indexes": indexes, "sequence": sequence, "table_options": options}


def tile_size_census(dsn: str, table: str) -> dict[tuple[int, int], int]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(f"SELECT ST_Width(rast), ST_Height(rast), count(*) FROM {table} GROUP BY 1, 2")
        return {(width, height): count for width, height, count in rows}
