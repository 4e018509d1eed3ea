"""`ingest check`: is the loaded database what the load log (and, with --reference, the publication) says?

DEM (public.dem_us): tiles = the load log's count, per file and in all; the tile-size census and the extent
of the logged grids; heap order = rid order; the raster constraints of `raster2pgsql -C` as PostGIS would
write them for the logged grids; the raster_columns row; the GiST index. Vector tables: rows = the load
log's count, the GiST index, ANALYZE done. The files `ingest all` set out to load (gsqa.stage_log) are all
in the load log. The reader role logs in read-only and may read every reference table. With `reference`,
also the published totals: 265,950 tiles and their census, the documented extent, and the lower bounds of
the vector row counts (docs/REFERENCE-DB.md, Tables).

Everything is read-only: the constraint definitions PostGIS would write are made on proxy tables inside a
transaction that is rolled back. Counting roads (18 M rows) takes the better part of a minute.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from gsqa_core import sandbox, schema
from gsqa_core.db import connect, identifier, relation_exists, where
from gsqa_core.dem_grid import ASTER_SIZE, SRID, TILE, tile_sizes, tiles_across
from gsqa_core.roles import audit, login_dsn
from ingest import indexes
from ingest.dem.constraints import TileGrid, desired_definitions, existing_definitions

# The published reference (docs/REFERENCE-DB.md, Tables, 2.3 and 6): its files are all ASTER-sized.
REFERENCE_TILES = schema.REFERENCE_DEM_TILES
REFERENCE_CENSUS = {size: tiles * schema.REFERENCE_DEM_FILES
                    for size, tiles in tile_sizes(ASTER_SIZE, ASTER_SIZE).items()}
REFERENCE_EXTENT = (-126.000138888889, 23.99986111111112, -65.99986111111112, 50.0001388888889)
REFERENCE_MIN_ROWS = {"pois": 267_609, "roads": 18_491_387, "lakes": 7_919_489, "parks": 5_816_803,
                      "regions": 38_955}
EXTENT_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str

    def as_json(self) -> dict[str, Any]:
        return {"check": self.name, "ok": self.ok, "detail": self.detail}


def run_checks(dsn: str | None, reference: bool = False) -> list[Check]:
    with connect(dsn, autocommit=True) as conn:
        missing = [table.fullname for table in schema.REFERENCE_TABLES if not relation_exists(conn, table.fullname)]
        if missing:
            return [Check("schema", False, f"missing tables in {where(conn)}: {', '.join(missing)}; run `ingest init` "
                                           "first")]
        checks = _dem_checks(conn, reference)
        for table in schema.VECTOR_TABLES:
            checks += _vector_checks(conn, table, reference)
        checks += _expected_files(conn)
    checks.append(_roles_check(dsn))
    return checks


def _logged(conn: psycopg.Connection, target: str) -> dict[str, tuple[int, Any]]:
    rows = conn.execute("SELECT source_name, rows_written, details FROM gsqa.load_log WHERE target_table = %s",
                        [target])
    return {name: (written, details) for name, written, details in rows}


def _count(conn: psycopg.Connection, qualified: str) -> int:
    return conn.execute(sql.SQL("SELECT count(*) FROM {}").format(identifier(qualified))).fetchone()[0]


def _dem_checks(conn: psycopg.Connection, reference: bool) -> list[Check]:
    table = schema.dem_us.fullname
    logged = _logged(conn, table)
    tiles = _count(conn, table)
    checks = [Check("dem.tiles", tiles == sum(rows for rows, _ in logged.values()),
                    f"{tiles:,} tiles; the load log accounts for {sum(rows for rows, _ in logged.values()):,} "
                    f"from {len(logged):,} files")]
    if reference:
        checks.append(Check("dem.reference_tiles", tiles == REFERENCE_TILES,
                            f"{tiles:,} tiles; the reference has {REFERENCE_TILES:,}"))
    if not tiles:
        return checks
    grids = logged_grids(logged)
    checks += [_tiles_per_file(conn, logged), _census(conn, grids, reference), _extent(conn, grids, reference),
               _heap_order(conn), _constraints(conn, grids), _raster_columns(conn), _dem_index(conn)]
    return checks


def logged_grids(logged: dict[str, tuple[int, Any]]) -> list[TileGrid]:
    """The tile grids of the DEM files in the load log (_logged), in file name order."""
    return [TileGrid.from_log(details) for _, (_, details) in sorted(logged.items())]


def dem_grids(conn: psycopg.Connection) -> list[TileGrid]:
    return logged_grids(_logged(conn, schema.dem_us.fullname))


def _tiles_per_file(conn: psycopg.Connection, logged: dict[str, tuple[int, Any]]) -> Check:
    counts = dict(conn.execute("SELECT filename, count(*) FROM public.dem_us GROUP BY filename").fetchall())
    wrong = sorted(name for name in set(counts) | set(logged) if counts.get(name) != logged.get(name, (None,))[0])
    grid_tiles = {name: tiles_across(d["width"]) * tiles_across(d["height"]) - len(d["skipped"])
                  for name, (_, d) in logged.items()}
    wrong += sorted(name for name, (rows, _) in logged.items() if rows != grid_tiles[name] and name not in wrong)
    per_file = Counter(counts.values())
    detail = ", ".join(f"{files:,} files with {count} tiles" for count, files in sorted(per_file.items()))
    if wrong:
        first = wrong[0]
        detail += f"; {len(wrong)} files differ from their load log or grid (first: {first}: {counts.get(first, 0)} "
        detail += f"tiles, logged {logged.get(first, (0,))[0]}, grid {grid_tiles.get(first, 0)})"
    return Check("dem.tiles_per_file", not wrong, detail)


def _census(conn: psycopg.Connection, grids: list[TileGrid], reference: bool) -> Check:
    actual = Counter({(w, h): n for w, h, n in conn.execute(
        "SELECT ST_Width(rast), ST_Height(rast), count(*) FROM public.dem_us GROUP BY 1, 2")})
    expected = Counter((w, h) for grid in grids for w, h, _, _ in grid.written_tiles())
    wanted = Counter(REFERENCE_CENSUS) if reference else expected
    spelled = ", ".join(f"{w}x{h}: {n:,}" for (w, h), n in sorted(actual.items(), key=lambda item: -item[1]))
    return Check("dem.census", actual == wanted, f"{spelled}{'' if actual == wanted else f'; expected {dict(wanted)}'}")


def _extent(conn: psycopg.Connection, grids: list[TileGrid], reference: bool) -> Check:
    row = conn.execute("SELECT ST_XMin(e), ST_YMin(e), ST_XMax(e), ST_YMax(e) "
                       "FROM (SELECT ST_Extent(ST_Envelope(rast)) AS e FROM public.dem_us) s").fetchone()
    expected = REFERENCE_EXTENT if reference else _grids_extent(grids)
    ok = all(abs(a - b) <= EXTENT_TOLERANCE for a, b in zip(row, expected, strict=True))
    return Check("dem.extent", ok, f"{_box(row)}{'' if ok else f'; expected {_box(expected)}'}")


def _grids_extent(grids: list[TileGrid]) -> tuple[float, ...]:
    boxes = []
    for tile_grid in grids:
        ulx, sx, _, uly, _, sy = tile_grid.geotransform
        grid = tile_grid.grid
        xs, ys = (ulx, ulx + grid.width * sx), (uly, uly + grid.height * sy)
        boxes.append((min(xs), min(ys), max(xs), max(ys)))
    return (min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes))


def _box(values: tuple[float, ...]) -> str:
    return "(" + ", ".join(f"{value:.12f}" for value in values) + ")"


def _heap_order(conn: psycopg.Connection) -> Check:
    back = conn.execute("SELECT count(*) FROM (SELECT ctid < lag(ctid) OVER (ORDER BY rid) AS back "
                        "FROM public.dem_us) s WHERE back").fetchone()[0]
    return Check("dem.heap_order", back == 0, "tiles stored in rid order" if back == 0
                 else f"{back:,} tiles out of rid order: rerun `ingest dem` on the same files to restore it")


def _constraints(conn: psycopg.Connection, grids: list[TileGrid]) -> Check:
    existing = existing_definitions(conn, identifier(schema.dem_us.fullname))
    with conn.transaction(force_rollback=True):  # the proxies AddRasterConstraints runs on
        desired = desired_definitions(conn, schema.dem_us.name, grids, extent=True)
    differ = sorted(name for name in set(existing) | set(desired) if existing.get(name) != desired.get(name))
    return Check("dem.constraints", not differ, f"{len(existing)} raster constraints as raster2pgsql -C makes them"
                 if not differ else f"constraints differ from raster2pgsql -C's: {', '.join(differ)}")


def _raster_columns(conn: psycopg.Connection) -> Check:
    row = conn.execute(
        "SELECT srid, blocksize_x, blocksize_y, same_alignment, num_bands, pixel_types::text, nodata_values::text, "
        "out_db::text, spatial_index FROM raster_columns WHERE r_table_schema = 'public' AND r_table_name = 'dem_us'"
    ).fetchone()
    if row is None:
        return Check("dem.raster_columns", False, "no raster_columns row for public.dem_us")
    facts = dict(zip(["srid", "blocksize_x", "blocksize_y", "same_alignment", "num_bands", "pixel_types",
                      "nodata_values", "out_db", "spatial_index"], row, strict=True))
    wanted = {"srid": SRID, "blocksize_x": TILE, "blocksize_y": TILE, "same_alignment": True, "num_bands": 1,
              "pixel_types": "{16BSI}", "out_db": "{f}", "spatial_index": True}
    differ = {key: facts[key] for key in wanted if facts[key] != wanted[key]}
    return Check("dem.raster_columns", not differ, f"differs from the reference: {differ}" if differ else str(facts))


def _dem_index(conn: psycopg.Connection) -> Check:
    present = relation_exists(conn, "public.dem_us_st_convexhull_idx")
    return Check("dem.index", present, "dem_us_st_convexhull_idx present" if present
                 else "dem_us_st_convexhull_idx is missing: rerun `ingest dem`")


def _vector_checks(conn: psycopg.Connection, table: schema.Table, reference: bool) -> list[Check]:
    name, qualified = table.name, table.fullname
    logged = sum(rows for rows, _ in _logged(conn, qualified).values())
    rows = _count(conn, qualified)
    checks = [Check(f"{name}.rows", rows == logged, f"{rows:,} rows; the load log accounts for {logged:,}")]
    if reference:
        bound = REFERENCE_MIN_ROWS[name]
        checks.append(Check(f"{name}.reference_rows", rows >= bound, f"{rows:,} rows; the reference has at least "
                            f"{bound:,} (the largest id in any stored answer)"))
    if rows:
        index = indexes.has_index(conn, table)
        checks.append(Check(f"{name}.index", index, f"{indexes.index_name(table)} present" if index
                            else f"{indexes.index_name(table)} is missing: run `ingest finalize`"))
        analyzed = indexes.is_analyzed(conn, table)
        checks.append(Check(f"{name}.analyzed", analyzed, "analyzed" if analyzed
                            else "never analyzed: run `ingest finalize`"))
    return checks


def _expected_files(conn: psycopg.Connection) -> list[Check]:
    """Files `ingest all` set out to load (gsqa.stage_log) against the files in the load log."""
    checks = []
    rows = conn.execute("SELECT stage, expected FROM gsqa.stage_log WHERE stage IN ('dem', 'osm') "
                        "AND expected IS NOT NULL ORDER BY stage").fetchall()
    for stage, expected in rows:
        targets = [schema.dem_us.fullname] if stage == "dem" else [table.fullname for table in schema.VECTOR_TABLES]
        loaded = conn.execute("SELECT count(*) FROM gsqa.load_log WHERE target_table = ANY(%s)",
                              [targets]).fetchone()[0]
        checks.append(Check(f"{stage}.files", loaded == expected["files"],
                            f"{loaded:,} of the {expected['files']:,} files of the last `ingest all` are loaded"))
    return checks


def _roles_check(dsn: str | None) -> Check:
    """Both sandbox roles log in and are as declared (gsqa_core/roles.py: they read every reference table, own
    and may create nothing, store exactly their declared settings); the server allows what the sandbox needs."""
    audits = [audit(login_dsn(dsn, role), role) for role in sandbox.ROLES]
    problems = list(dict.fromkeys(problem for found in audits for problem in found.problems))
    return Check("roles", not problems, "; ".join(problems) or
                 f"{' and '.join(role.name for role in sandbox.ROLES)} log in, read every table, as declared")
