"""The raster constraints of `raster2pgsql -C`, written by PostGIS itself but without scanning dem_us.

AddRasterConstraints reads most values from the first row (srid, scale, alignment, bands, pixel types,
NODATA, out-db), the tile sizes from a GROUP BY over the whole table, and the extent from ST_Extent over
the whole table, then adds each constraint with its own validating scan (a good part of raster2pgsql's
time: every check detoasts whole tiles). We know all of those values from the tile grids we load, so
we run AddRasterConstraints on tiny proxy tables that have the same first row, the same ranking of tile
sizes and the same extreme tiles, and copy the definitions PostGIS wrote onto the real table. The copies
are added while the table is empty, or before new rows arrive, so PostgreSQL checks every loaded tile in
memory as it is inserted instead of re-reading 16 GB afterwards. The max-extent constraint is NOT VALID,
exactly as PostGIS adds it, and is added at the end (reconcile with extent=True).

The checks at insert are not free: PostGIS's ST_BandMetaData, behind the pixel-type, NODATA and out-db
constraints, detoasts the whole tile three times per tile (docs/PERFORMANCE.md, "Where the time goes"). They
cannot leave the insert without a validating scan afterwards, which would detoast every tile three times again
in one backend, or a direct write to the catalog.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql

from gsqa_core.dem_grid import SRID, Grid
from gsqa_core.schema import BOOKKEEPING_SCHEMA

COLUMN = "rast"
_EXTENT_TOLERANCE = 1e-9  # degrees; tiles this close to an extreme are all handed to PostGIS


@dataclass(frozen=True)
class TileGrid:
    """The tiles one source file contributes: its grid less the all-NODATA tiles that were skipped."""

    grid: Grid
    skipped: frozenset[int] = frozenset()

    @classmethod
    def from_log(cls, details: dict) -> TileGrid:
        """The tile grid a file's gsqa.load_log row records (its `details`, as `log_details` gives them)."""
        grid = Grid(details["width"], details["height"], tuple(details["geotransform"]), details["nodata"])
        return cls(grid, frozenset(details["skipped"]))

    def log_details(self) -> dict:
        return {"width": self.grid.width, "height": self.grid.height, "geotransform": list(self.geotransform),
                "nodata": self.grid.nodata, "skipped": sorted(self.skipped)}

    @property
    def geotransform(self) -> tuple[float, ...]:
        return self.grid.geotransform

    def written_tiles(self) -> Iterable[tuple[int, int, float, float]]:
        """(width, height, upper-left x, upper-left y) of each tile that is in the table."""
        for index, (col, row, width, height) in enumerate(self.grid.tiles()):
            if index not in self.skipped:
                yield width, height, *self.grid.tile_origin(col, row)


_FLAG_OF = {  # constraint name -> the AddRasterConstraints argument that makes it
    "enforce_srid_rast": "srid", "enforce_scalex_rast": "scale_x", "enforce_scaley_rast": "scale_y",
    "enforce_width_rast": "blocksize_x", "enforce_height_rast": "blocksize_y",
    "enforce_same_alignment_rast": "same_alignment", "enforce_num_bands_rast": "num_bands",
    "enforce_pixel_types_rast": "pixel_types", "enforce_nodata_values_rast": "nodata_values",
    "enforce_out_db_rast": "out_db", "enforce_max_extent_rast": "extent",
}
_EXTENT = "enforce_max_extent_rast"
_FIRST_ROW_FLAGS = {"srid", "scale_x", "scale_y", "same_alignment", "num_bands", "pixel_types", "nodata_values",
                    "out_db"}
_BLOCKSIZE_FLAGS = {"blocksize_x", "blocksize_y"}
_ALL_FLAGS = ["srid", "scale_x", "scale_y", "blocksize_x", "blocksize_y", "same_alignment", "regular_blocking",
              "num_bands", "pixel_types", "nodata_values", "out_db", "extent"]


def reconcile(conn: psycopg.Connection, schema_name: str, table: str, grids: Sequence[TileGrid], *,
              extent: bool) -> None:
    """Give the table the constraints AddRasterConstraints would give it if it held `grids` (without the
    max extent unless `extent`); on a loaded table, constraints that are already right are left alone.

    Definitions PostGIS writes are used as PostGIS wrote them: a definition read back from the catalog and
    added again can come out spelled differently (negative scale literals do), and raster_columns parses
    that spelling. So constraints are added by AddRasterConstraints itself: on the empty table through
    proxy rows that are removed again in the same transaction, or, rarely, on a loaded table whose files
    changed, by letting it scan. Only the max extent, whose definition survives the round trip, is copied.
    """
    ident = sql.Identifier(schema_name, table)
    if _is_empty(conn, ident):
        _remake_through_proxy_rows(conn, schema_name, table, grids)
        return
    existing = existing_definitions(conn, ident)
    desired = desired_definitions(conn, table, grids, extent=extent)
    changed = [name for name in sorted(set(existing) | set(desired)) if existing.get(name) != desired.get(name)]
    _drop(conn, ident, [name for name in changed if name in existing])
    flags = {_FLAG_OF[name] for name in changed if name != _EXTENT and name in desired}
    if flags:
        _add_raster_constraints(conn, schema_name, table, flags)
    if _EXTENT in changed and _EXTENT in desired:
        conn.execute(sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} ").format(ident, sql.Identifier(_EXTENT))
                     + sql.SQL(desired[_EXTENT]))


def _drop(conn: psycopg.Connection, table: sql.Identifier, names: list[str]) -> None:
    if names:
        conn.execute(sql.SQL("ALTER TABLE {} ").format(table) + sql.SQL(", ").join(
            sql.SQL("DROP CONSTRAINT {}").format(sql.Identifier(name)) for name in names))


def desired_definitions(conn: psycopg.Connection, table: str, grids: Sequence[TileGrid], *, extent: bool) -> dict:
    """{constraint name: definition} that AddRasterConstraints would give a table holding `grids` in order."""
    if not grids:
        return {}
    definitions = _proxy_definitions(conn, table, _first_row_proxies(grids), _FIRST_ROW_FLAGS)
    definitions |= _proxy_definitions(conn, table, _blocksize_proxies(grids), _BLOCKSIZE_FLAGS)
    if extent:
        definitions |= _proxy_definitions(conn, table, _extent_proxies(grids), {"extent"})
    return definitions


def _proxy_definitions(conn: psycopg.Connection, table: str, rows: list[tuple], flags: set[str]) -> dict:
    """Run AddRasterConstraints on a scratch table holding `rows`; return the definitions it added."""
    proxy_name = f"{table}__constraint_proxy"
    proxy = sql.Identifier(BOOKKEEPING_SCHEMA, proxy_name)
    with conn.transaction(force_rollback=True):  # the proxy never outlives this call
        conn.execute(sql.SQL("CREATE TABLE {} (rast raster)").format(proxy))
        _insert_rows(conn, proxy, rows)
        _add_raster_constraints(conn, BOOKKEEPING_SCHEMA, proxy_name, flags)
        return existing_definitions(conn, proxy)


def _remake_through_proxy_rows(conn: psycopg.Connection, schema_name: str, table: str,
                               grids: Sequence[TileGrid]) -> None:
    """On an empty table: every constraint but the extent (which describes rows, and there are none) made
    by AddRasterConstraints over proxy rows inserted into the table itself, then TRUNCATEd, all inside the
    caller's transaction. Nothing needs validating, so this costs no scan."""
    ident = sql.Identifier(schema_name, table)
    _drop(conn, ident, list(existing_definitions(conn, ident)))
    if not grids:
        return
    for rows, flags in ((_first_row_proxies(grids), _FIRST_ROW_FLAGS), (_blocksize_proxies(grids), _BLOCKSIZE_FLAGS)):
        _insert_rows(conn, ident, rows)
        _add_raster_constraints(conn, schema_name, table, flags)
        conn.execute(sql.SQL("TRUNCATE {}").format(ident))


def _insert_rows(conn: psycopg.Connection, table: sql.Identifier, rows: list[tuple]) -> None:
    # executemany keeps the order: AddRasterConstraints reads "the first row" with LIMIT 1.
    conn.cursor().executemany(
        sql.SQL(
            "INSERT INTO {} (rast) SELECT CASE WHEN %s THEN ST_AddBand(r, '16BSI'::text, 0, %s::float8) "
            "ELSE r END FROM ST_MakeEmptyRaster(%s, %s, %s, %s, %s, %s, %s, %s, %s) AS r"
        ).format(table),
        [[with_band, nodata, width, height, ulx, uly, gt[1], gt[5], gt[2], gt[4], SRID]
         for width, height, ulx, uly, gt, nodata, with_band in rows],
    )


def _add_raster_constraints(conn: psycopg.Connection, schema_name: str, table: str, flags: set[str]) -> None:
    arguments = ", ".join(f"{name} => {'true' if name in flags else 'false'}" for name in _ALL_FLAGS)
    conn.execute(f"SELECT AddRasterConstraints(%s, %s, %s, {arguments})", [schema_name, table, COLUMN])


def _is_empty(conn: psycopg.Connection, table: sql.Identifier) -> bool:
    return conn.execute(sql.SQL("SELECT NOT EXISTS (SELECT FROM {})").format(table)).fetchone()[0]


def existing_definitions(conn: psycopg.Connection, table: sql.Identifier) -> dict:
    """{name: definition} of the enforce_* check constraints on `table`."""
    rows = conn.execute(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE conrelid = %s::regclass AND contype = 'c' AND conname LIKE 'enforce\\_%%' ORDER BY conname",
        [table.as_string(conn)],
    )
    return dict(rows.fetchall())


def _first_row_proxies(grids: Sequence[TileGrid]) -> list[tuple]:
    """One 1x1 raster per file at the file's upper-left corner, first file first.

    A file's tiles share its SRID, scale, skew, band layout and NODATA, and lie on its grid, so the values
    AddRasterConstraints reads from the first row, and whether every row agrees with them, are the same.
    """
    return [(1, 1, grid.geotransform[0], grid.geotransform[3], grid.geotransform, grid.grid.nodata, True)
            for grid in grids]


def _blocksize_proxies(grids: Sequence[TileGrid]) -> list[tuple]:
    """Rows whose tile widths and heights rank as those of the real table (AddRasterConstraints lists
    them by descending count), with strictly different counts so the ranking is not left to chance."""
    width_counts, height_counts = Counter(), Counter()
    for grid in grids:
        for width, height, _, _ in grid.written_tiles():
            width_counts[width] += 1
            height_counts[height] += 1
    widths, heights = _ranked(width_counts), _ranked(height_counts)
    first = grids[0].grid
    rows = [(w, heights[0]) for rank, w in enumerate(widths) for _ in range((len(widths) - rank) * len(heights))]
    rows += [(widths[0], h) for rank, h in enumerate(heights[1:], start=1) for _ in range(len(heights) - rank)]
    # Modeled on the first file (origin, band, NODATA), so they satisfy its first-row constraints.
    gt = first.geotransform
    return [(w, h, gt[0], gt[3], gt, first.nodata, True) for w, h in rows]


def _ranked(counts: Counter) -> list[int]:
    return [value for value, _ in sorted(counts.items(), key=lambda item: (-item[1], -item[0]))]


def _extent_proxies(grids: Sequence[TileGrid]) -> list[tuple]:
    """The tiles that reach the table's westmost, southmost, eastmost and northmost edges. Two passes over
    the tiles rather than a list of all of them: 265,950 tiles for the whole DEM."""
    def tiles() -> Iterator[tuple]:
        for grid in grids:
            gt = grid.geotransform
            for width, height, ulx, uly in grid.written_tiles():
                yield (width, height, ulx, uly, gt), _envelope(width, height, ulx, uly, gt)

    bounds = [math.inf, math.inf, -math.inf, -math.inf]
    for _, envelope in tiles():
        bounds = [min(bounds[0], envelope[0]), min(bounds[1], envelope[1]),
                  max(bounds[2], envelope[2]), max(bounds[3], envelope[3])]
    return [(*tile, None, False) for tile, envelope in tiles()
            if any(abs(edge - bound) <= _EXTENT_TOLERANCE for edge, bound in zip(envelope, bounds, strict=True))]


def _envelope(width: int, height: int, ulx: float, uly: float, gt: Sequence[float]) -> tuple[float, ...]:
    xs = [ulx + col * gt[1] + row * gt[2] for col in (0, width) for row in (0, height)]
    ys = [uly + col * gt[4] + row * gt[5] for col in (0, width) for row in (0, height)]
    return min(xs), min(ys), max(xs), max(ys)
