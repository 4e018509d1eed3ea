"""A vector table as GeoJSON parts in the authors' layout (`--format geojson`), for agents written against it.

    DIR/geojson/<layer>/part-NNNNN.geojson   layer as the published source names it (regions: postal_codes)

Part N holds the rows whose id lies in [N * PART_ROWS + 1, (N + 1) * PART_ROWS], in id order (ids are dense:
each part is about PART_ROWS rows), so each part is written, and resumed, on its own. A part is a
FeatureCollection with one feature a line, as the published files and `ingest osm`'s fast path have them; each
feature's `properties` are the table's columns but the geometry, with NULL columns left out (as a stored answer
row leaves them out); the geometry is PostGIS's GeoJSON with 15 decimals, which gives back every coordinate
of magnitude 1 or more, all of the US, exactly. The server writes the features; Python only streams them.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
from psycopg import sql

from gsqa_core import schema
from gsqa_core.db import identifier
from ingest.osm.rules import LAYERS

FOLDER = "geojson"
PART_ROWS = 50_000
COORDINATE_DECIMALS = 15
_FETCH = 5_000
_HEAD = b'{"type": "FeatureCollection", "features": [\n'
_TAIL = b"\n]}\n"


def layer_folder(table: schema.Table) -> str:
    return LAYERS[table.name].folder


def part_ranges(conn: psycopg.Connection, table: schema.Table) -> list[tuple[int, int]]:
    """(first id, last id) of each part."""
    top = conn.execute(sql.SQL("SELECT coalesce(max(id), 0) FROM {}").format(identifier(table.fullname))).fetchone()[0]
    return [(start + 1, min(start + PART_ROWS, top)) for start in range(0, top, PART_ROWS)]


def part_name(index: int) -> str:
    return f"part-{index:05d}.geojson"


def _features(table: schema.Table) -> sql.Composed:
    properties = sql.SQL(", ").join(sql.SQL("{}, {}").format(sql.Literal(c.name), sql.Identifier(c.name))
                                    for c in table.columns if c.type is not schema.GEOGRAPHY)
    return sql.SQL("SELECT json_build_object('type', 'Feature', 'geometry', ST_AsGeoJSON(geometry, {digits})::json, "
                   "'properties', json_strip_nulls(json_build_object({properties})))::text FROM {table} "
                   "WHERE id BETWEEN %s AND %s ORDER BY id").format(
        digits=sql.Literal(COORDINATE_DECIMALS), properties=properties, table=identifier(table.fullname))


def write_part(conn: psycopg.Connection, table: schema.Table, ids: tuple[int, int], path: Path) -> int:
    """The rows of `ids` as a FeatureCollection at `path`; how many."""
    rows = 0
    with conn.transaction(), conn.cursor(name=f"export_geojson_{table.name}") as cursor, open(path, "wb") as out:
        cursor.itersize = _FETCH
        cursor.execute(_features(table), list(ids))
        out.write(_HEAD)
        while batch := cursor.fetchmany(_FETCH):
            out.write(b"" if not rows else b",\n")
            out.write(",\n".join(feature for feature, in batch).encode())
            rows += len(batch)
        out.write(_TAIL)
    return rows


def rows_in(conn: psycopg.Connection, table: schema.Table, ids: tuple[int, int]) -> int:
    return conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE id BETWEEN %s AND %s").format(
        identifier(table.fullname)), list(ids)).fetchone()[0]
