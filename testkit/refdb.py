"""Small reference databases built from real benchmark records, for running the real SQL.

- `load_stored_answers`: for R1-R4 and VR1-VR3, a dem_us of 1x1-pixel tiles on the ASTER grid whose
  pixels at the question points carry the stored elevations, and the pois rows of the stored answers
  (VR3 counts get that many POIs at the anchor). The stored answers must then come back.
- `load_ramp_dem` / `load_answer_features`: for the other templates, a DEM covering every geometry in the
  SQL (values a fixed function of the global pixel position, so overlapping tiles agree) and the
  pois/parks/lakes/roads rows found in the stored answers. Answers are then computed on this fixture.
"""

from __future__ import annotations

import math
import re
from typing import Any

import psycopg
import shapely
from psycopg import sql

from gsqa_core.dem_grid import PIXEL, PIXELS_PER_DEGREE
from reproduce.dataset import Record

_POINT = re.compile(r"POINT \((-?[\d.]+) (-?[\d.]+)\)")
_GEOM_LITERAL = re.compile(r"ST_GeomFromText\('([^']+)'")


def grid_index(lon: float, lat: float) -> tuple[int, int]:
    """The ASTER pixel holding a point: its centre in whole arc-seconds."""
    return round(lon * PIXELS_PER_DEGREE), round(lat * PIXELS_PER_DEGREE)


def insert_raster(conn: psycopg.Connection, i0: int, j0: int, values: list[list[float]]) -> None:
    """A 16BSI tile whose upper-left pixel is (i0, j0) (column east, row north) with values[row][col]."""
    height, width = len(values), len(values[0])
    conn.execute(
        "INSERT INTO dem_us (rast, filename) VALUES (ST_SetValues(ST_AddBand("
        "ST_MakeEmptyRaster(%s, %s, %s, %s, %s, %s, 0, 0, 4326), '16BSI'::text, 0, NULL), 1, 1, 1, "
        "%s::double precision[][]), 'fixture')",
        [width, height, (i0 - 0.5) * PIXEL, (j0 + 0.5) * PIXEL, PIXEL, -PIXEL, values],
    )


def points_in(sql_text: str) -> list[tuple[float, float]]:
    """POINT literals of a SQL in order of first appearance."""
    seen = dict.fromkeys((float(x), float(y)) for x, y in _POINT.findall(sql_text))
    return list(seen)


# --- stored answers hold --------------------------------------------------------------------------------


def stored_pixels(record: Record) -> dict[tuple[int, int], float]:
    """The pixel values the stored answer of an R1-R4 / VR1-VR2 record implies."""
    answer = record.answers[0] if record.answers else {}
    points = points_in(record.sql)
    keys = {"R1": ["elevation"], "R2": ["poi1_elevation_m", "poi2_elevation_m"],
            "R3": ["poi1_elevation_m", "poi2_elevation_m"], "R4": ["elevation_m"]}.get(record.template_id)
    if keys:
        return {grid_index(*point): answer[key] for point, key in zip(points, keys, strict=True)}
    return {grid_index(*points_in(row["geometry"])[0]): row["elevation"] for row in record.answers}


def vr3_pois(record: Record) -> tuple[list[dict[str, Any]], float]:
    """`count` POIs at the anchor, of the asked category, and an elevation meeting the condition."""
    (lon, lat), = points_in(record.sql)
    column, value = re.search(r"p\.(\w+) = '([^']+)'", record.sql).groups()
    op, bound = re.search(r"WHERE z (<=|>=|<|>) (\d+)", record.sql).groups()
    elevation = float(bound) + {"<=": -1, "<": -1, ">=": 1, ">": 1}[op]
    row = {"geometry": f"POINT ({lon} {lat})", "poi_name": "fixture poi", column: value}
    return [row] * int(record.answers[0]["count"]), elevation


def load_stored_answers(conn: psycopg.Connection, records: list[Record]) -> None:
    pixels: dict[tuple[int, int], float] = {}
    pois: dict[Any, dict[str, Any]] = {}
    for record in records:
        implied = stored_pixels(record) if record.template_id != "VR3" else {}
        if record.template_id == "VR3" and record.answers[0]["count"]:
            rows, elevation = vr3_pois(record)
            implied = {grid_index(*points_in(rows[0]["geometry"])[0]): elevation}
            first = 9_000_000 + len(pois)  # ids no real POI has
            pois.update({first + n: {"id": first + n, **row} for n, row in enumerate(rows)})
        if record.template_id in ("VR1", "VR2"):
            pois.update({row["id"]: {k: v for k, v in row.items() if k != "elevation"} for row in record.answers})
        for index, value in implied.items():
            assert pixels.setdefault(index, value) == value, f"{record.id}: pixel {index} needs two values"
    for (i, j), value in pixels.items():
        insert_raster(conn, i, j, [[value]])
    insert_rows(conn, "pois", list(pois.values()))


def insert_rows(conn: psycopg.Connection, table: str, rows: list[dict[str, Any]]) -> None:
    """Answer rows back into their table with COPY (the serial id kept when given; WKT for geography)."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    if not rows:
        return
    names = sql.SQL(", ").join(map(sql.Identifier, columns))
    with conn.cursor().copy(sql.SQL("COPY {} ({}) FROM STDIN").format(sql.Identifier(table), names)) as copy:
        for row in rows:
            copy.write_row([None if row.get(c) is None else str(row[c]) for c in columns])


# --- answers computed on a fixture ----------------------------------------------------------------------


def ramp_value(i: int, j: int) -> int:
    """Elevation of global pixel (i, j): varied enough for slopes, aspects and thresholds of 20-2000 m."""
    return (37 * i + 23 * j) % 2500


def load_ramp_dem(conn: psycopg.Connection, records: list[Record], pad_deg: float = 0.004) -> None:
    """One tile per geometry literal of each SQL, covering it with `pad_deg` around."""
    for record in records:
        for wkt in _GEOM_LITERAL.findall(record.sql):
            minx, miny, maxx, maxy = shapely.from_wkt(wkt).bounds
            i0, i1 = math.floor((minx - pad_deg) * PIXELS_PER_DEGREE), math.ceil((maxx + pad_deg) * PIXELS_PER_DEGREE)
            j0, j1 = math.floor((miny - pad_deg) * PIXELS_PER_DEGREE), math.ceil((maxy + pad_deg) * PIXELS_PER_DEGREE)
            values = [[ramp_value(i, j) for i in range(i0, i1 + 1)] for j in range(j1, j0 - 1, -1)]
            insert_raster(conn, i0, j1, values)


def features_of_answers(records: list[Record]) -> dict[str, dict[Any, dict[str, Any]]]:
    """Rows of the stored answers by table (recognised by their name column), deduplicated by serial id."""
    tables = {"poi_name": "pois", "park_name": "parks", "lake_name": "lakes", "road_name": "roads"}
    found: dict[str, dict[Any, dict[str, Any]]] = {table: {} for table in tables.values()}
    for record in records:
        for row in record.answers:
            table = next((tables[key] for key in tables if key in row), None)
            if table and "id" in row and "geometry" in row:
                columns = _columns_of(table)
                found[table][row["id"]] = {k: v for k, v in row.items() if k in columns}
    return found


def _columns_of(table: str) -> set[str]:
    from gsqa_core import schema

    return {column.name for column in getattr(schema, table).columns}


def vr5_road(record: Record, n: int) -> dict[str, Any]:
    """A short road of the asked class and the stored name, 100-250 m from the anchor."""
    (lon, lat), = points_in(record.sql)
    highway = re.search(r"r\.highway = '([^']+)'", record.sql).group(1)
    line = f"LINESTRING ({lon + 0.001} {lat}, {lon + 0.002} {lat + 0.0005}, {lon + 0.0025} {lat + 0.001})"
    return {"id": 9_500_000 + n, "geometry": line, "road_name": record.answers[0]["road_name"], "highway": highway}


def load_computed_fixture(conn: psycopg.Connection, records: list[Record]) -> None:
    """The DEM ramp around every SQL geometry, the answer features, and a road per VR5 question."""
    load_ramp_dem(conn, [record for record in records if "dem_us" in record.sql])
    for table, rows in features_of_answers(records).items():
        insert_rows(conn, table, list(rows.values()))
    insert_rows(conn, "roads", [vr5_road(r, n) for n, r in enumerate(records) if r.template_id == "VR5"])
    for table in ("pois", "parks", "lakes", "roads"):
        conn.execute(sql.SQL("CREATE INDEX ON {} USING GIST (geometry)").format(sql.Identifier(table)))
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))
