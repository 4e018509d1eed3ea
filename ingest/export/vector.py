"""A vector table as one GeoParquet 1.1 file, streamed, and the order-independent checksum of its rows.

Every column of the table with its type (INTEGER int32, BIGINT int64, VARCHAR/TEXT string; the geography as
WKB, GeoParquet's `geometry` column), plus `bbox`, the covering column of GeoParquet 1.1 (xmin, ymin, xmax,
ymax per row). Rows come in spatial order (PostGIS's geometry sort: the Hilbert curve of their boxes' centres,
then id) from a server-side cursor, about FETCH_BYTES at a time into Arrow record batches, which are written as
a row group of at most ROW_GROUP_ROWS rows or ROW_GROUP_BYTES: memory holds one fetch and one row group however
big the table and its rows, and a reader that filters on `bbox` skips the row groups whose statistics lie
outside its box. The `geo` metadata (CRS as PROJJSON, the geometry types, the extent found, the edges) is added
to the footer when the last row is written.

The checksum: each row as one string, every column `N` (NULL) or `V<length>:<value>` (integers in decimal,
the geometry's WKB in hex), md5 of it, the first 64 bits summed modulo 2**64. The server computes it from the
table in SQL (`table_checksum`), and Python from a file's rows (`file_checksum`): equal sums, equal rows.
"""

from __future__ import annotations

import binascii
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from psycopg import sql

from gsqa_core import schema
from gsqa_core.db import identifier
from ingest.heap import release_free_heap

GEOPARQUET_VERSION = "1.1.0"
GEOMETRY = "geometry"
BBOX = "bbox"
# A row group ends at whichever comes first: a bbox read touches few, memory holds one (and one fetch of rows
# as Python objects: roads' geometries run to kilobytes).
ROW_GROUP_ROWS = 100_000
ROW_GROUP_BYTES = 8 * 2**20  # Arrow's in-memory size
# A fetch from the cursor holds its rows as Python objects, then as Arrow: at most FETCH_ROWS rows and about
# FETCH_BYTES, its rows counted from the last fetch's size (a region's polygon can run to megabytes, a POI is a
# few hundred bytes); the first fetch is small, as nothing is known yet.
FETCH_ROWS = 2_000
FETCH_BYTES = 2 * 2**20
FIRST_FETCH_ROWS = 16
SORT_MEMORY = "256MB"  # work_mem of the export's sort on the server (fewer merge passes than the default 4 MB)
ARROW_TYPES = {schema.INTEGER: pa.int32(), schema.BIGINT: pa.int64(), schema.VARCHAR_255: pa.string(),
               schema.TEXT: pa.string(), schema.GEOGRAPHY: pa.binary()}
NUMPY_TYPES = {pa.int32(): np.int32, pa.int64(): np.int64, pa.float64(): np.float64}
BBOX_TYPE = pa.struct([(name, pa.float64()) for name in ("xmin", "ymin", "xmax", "ymax")])
POINT_TYPES = {"Point", "MultiPoint"}  # geometries without edges
# ISO WKB type codes of 2D geometries, as GeoParquet names them.
WKB_TYPES = {1: "Point", 2: "LineString", 3: "Polygon", 4: "MultiPoint", 5: "MultiLineString", 6: "MultiPolygon",
             7: "GeometryCollection"}
_MOD = 2**64
PROJJSON = Path(__file__).with_name("epsg4326.projjson")


@dataclass
class VectorFile:
    """What writing a table gave: its rows, the geometry types and the extent of their boxes."""

    rows: int = 0
    geometry_types: set[str] = field(default_factory=set)
    extent: list[float] | None = None

    def add(self, batch: pa.RecordBatch) -> None:
        self.rows += batch.num_rows
        self.geometry_types |= _geometry_types(batch.column(GEOMETRY))
        boxes = batch.column(BBOX)
        found = [pc.min_max(boxes.field(name)).as_py() for name in ("xmin", "ymin", "xmax", "ymax")]
        if found[0]["min"] is None:
            return
        low = [found[0]["min"], found[1]["min"]]
        high = [found[2]["max"], found[3]["max"]]
        if self.extent:
            low = [min(a, b) for a, b in zip(low, self.extent[:2], strict=True)]
            high = [max(a, b) for a, b in zip(high, self.extent[2:], strict=True)]
        self.extent = low + high


def arrow_schema(table: schema.Table) -> pa.Schema:
    fields = [pa.field(column.name, ARROW_TYPES[column.type], nullable=column.nullable) for column in table.columns]
    return pa.schema([*fields, pa.field(BBOX, BBOX_TYPE)])


def crs() -> dict:
    """The tables' CRS, EPSG:4326 (gsqa_core.dem_grid.SRID), as PROJJSON: PROJ's, kept beside this module so that
    a vector export loads no GDAL (tests/test_export.py holds it equal to what rasterio's GDAL says)."""
    return json.loads(PROJJSON.read_text())


def geo_metadata(found: VectorFile, crs: dict) -> dict:
    """GeoParquet 1.1's `geo` metadata. The tables are geography, whose edges are great-circle arcs: `edges:
    spherical` wherever there are edges, since reading them on the plane draws other lines (docs/REFERENCE-DB.md,
    "The export"); a table of points alone has none, so its file leaves `edges` at its default and geopandas,
    which warns on every read of a spherical file, reads it quietly."""
    column = {"encoding": "WKB", "geometry_types": sorted(found.geometry_types), "crs": crs,
              "covering": {BBOX: {name: [BBOX, name] for name in ("xmin", "ymin", "xmax", "ymax")}}}
    if found.geometry_types - POINT_TYPES:
        column["edges"] = "spherical"
    if found.extent:
        column[BBOX] = found.extent
    return {"version": GEOPARQUET_VERSION, "primary_column": GEOMETRY, "columns": {GEOMETRY: column}}


def _select(table: schema.Table) -> sql.Composed:
    """The table's columns in order (the geometry as WKB), its boxes, in spatial order."""
    columns = [sql.SQL("ST_AsBinary({0})").format(sql.Identifier(c.name)) if c.type is schema.GEOGRAPHY
               else sql.Identifier(c.name) for c in table.columns]
    return sql.SQL("SELECT {columns}, ST_XMin(b), ST_YMin(b), ST_XMax(b), ST_YMax(b) "
                   "FROM (SELECT *, Box2D({geometry}::geometry) AS b FROM {table}) t "
                   "ORDER BY {geometry}::geometry, {id}").format(
        columns=sql.SQL(", ").join(columns), geometry=sql.Identifier(GEOMETRY), table=identifier(table.fullname),
        id=sql.Identifier(table.columns[0].name))


def record_batches(conn: psycopg.Connection, table: schema.Table, advance: Callable[[int], None],
                   rows: int = FETCH_ROWS) -> Iterator[pa.RecordBatch]:
    """The table's rows in spatial order as Arrow record batches (arrow_schema's columns) of at most `rows` rows
    and about FETCH_BYTES, `advance(rows)` after each; one server-side cursor in its own transaction."""
    target = arrow_schema(table)
    with conn.transaction(), conn.cursor(name=f"export_{table.name}", binary=True) as cursor:
        conn.execute(sql.SQL("SET LOCAL work_mem = {}").format(sql.Literal(SORT_MEMORY)))
        cursor.execute(_select(table))
        size = min(rows, FIRST_FETCH_ROWS)
        while batch := _batch(cursor.fetchmany(size), target):
            size = max(1, min(rows, FETCH_BYTES * batch.num_rows // max(1, batch.nbytes)))
            yield batch
            advance(batch.num_rows)


def write_table(conn: psycopg.Connection, table: schema.Table, path: Path, crs: dict,
                advance: Callable[[int], None]) -> VectorFile:
    """The table into a GeoParquet file at `path` (created or overwritten), `advance(rows)` after each fetch;
    what was written."""
    found = VectorFile()
    target = arrow_schema(table)
    # Dictionaries for the text columns only: a column chunk's pages wait in memory for its dictionary until
    # the chunk ends, and WKB and boxes are unique values, for which a dictionary is tried and dropped.
    texts = [column.name for column in table.columns if pa.types.is_string(target.field(column.name).type)]
    with pq.ParquetWriter(path, target, compression="zstd", write_statistics=True, store_schema=False,
                          use_dictionary=texts) as writer:
        group: list[pa.RecordBatch] = []
        for batch in record_batches(conn, table, advance, min(FETCH_ROWS, ROW_GROUP_ROWS)):
            found.add(batch)
            while batch.num_rows:  # a batch past the group's rows is cut where the group ends (no copy)
                room = ROW_GROUP_ROWS - sum(map(len, group))
                group.append(batch.slice(0, room))
                batch = batch.slice(room)
                if sum(map(len, group)) >= ROW_GROUP_ROWS or sum(b.nbytes for b in group) >= ROW_GROUP_BYTES:
                    _write_group(writer, group)
        _write_group(writer, group)
        writer.add_key_value_metadata({"geo": json.dumps(geo_metadata(found, crs))})
    return found


def _write_group(writer: pq.ParquetWriter, group: list[pa.RecordBatch]) -> None:
    """The batches as one row group; the list emptied, and the C heap's free pages given back (ingest/heap.py:
    each thread's fetches are freed in its own malloc arena, which would otherwise keep them)."""
    if group:
        writer.write_table(pa.Table.from_batches(group), row_group_size=sum(map(len, group)))
        group.clear()
        release_free_heap()


def _batch(rows: list[tuple], target: pa.Schema) -> pa.RecordBatch | None:
    """The rows as a record batch of `target`; None for no rows."""
    if not rows:
        return None
    columns = list(zip(*rows, strict=True))
    width = len(target) - 1
    arrays = [_array(values, target.field(i).type) for i, values in enumerate(columns[:width])]
    boxes = pa.StructArray.from_arrays([_array(values, pa.float64()) for values in columns[width:]],
                                       fields=list(BBOX_TYPE))
    return pa.RecordBatch.from_arrays([*arrays, boxes], schema=target)


def _array(values: tuple, kind: pa.DataType) -> pa.Array:
    """Python values (None for NULL) as an Arrow array of `kind`, made from its buffers: pyarrow.array() would
    import pandas wherever it is installed, which holds as much memory as all of the export's work."""
    valid = np.fromiter((value is not None for value in values), bool, len(values))
    nulls = len(values) - int(np.count_nonzero(valid))
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    if kind in NUMPY_TYPES:
        numbers = np.fromiter((0 if value is None else value for value in values), NUMPY_TYPES[kind], len(values))
        return pa.Array.from_buffers(kind, len(values), [validity, pa.py_buffer(numbers)], null_count=nulls)
    data = [b"" if value is None else value.encode() if isinstance(value, str) else value for value in values]
    offsets = np.zeros(len(data) + 1, np.int32)
    np.cumsum(np.fromiter(map(len, data), np.int64, len(data)), out=offsets[1:])
    return pa.Array.from_buffers(kind, len(values), [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))],
                                 null_count=nulls)


def _geometry_types(wkb: pa.Array) -> set[str]:
    """The types of the WKB values, read from their headers (byte order, then the type code) without parsing."""
    if not len(wkb):
        return set()
    valid = wkb.drop_null() if wkb.null_count else wkb
    offsets = np.frombuffer(valid.buffers()[1], dtype=np.int32, count=len(valid) + 1, offset=valid.offset * 4)
    data = np.frombuffer(valid.buffers()[2], dtype=np.uint8)
    starts = offsets[:-1]
    little = data[starts] == 1
    codes = np.where(little, data[starts + 1], data[starts + 4])  # 2D ISO codes are under 256
    return {WKB_TYPES.get(int(code), f"unknown {code}") for code in np.unique(codes)}


# --- the checksum of a table's rows ------------------------------------------------------------------------


def _sql_piece(column: schema.Column) -> sql.Composable:
    """One column of the row string in SQL: N, or V<length>:<value>."""
    name = sql.Identifier(column.name)
    if column.type is schema.GEOGRAPHY:
        text = sql.SQL("encode(ST_AsBinary({}), 'hex')").format(name)
    elif column.type in (schema.INTEGER, schema.BIGINT):
        text = sql.SQL("{}::text").format(name)
    else:
        text = name
    return sql.SQL("CASE WHEN {name} IS NULL THEN 'N' ELSE 'V' || length({text}) || ':' || {text} END").format(
        name=name, text=text)


def table_checksum(conn: psycopg.Connection, table: schema.Table) -> tuple[int, str]:
    """(rows, checksum) of the table, computed by the server."""
    row = sql.SQL(" || ").join(_sql_piece(column) for column in table.columns)
    rows, total = conn.execute(sql.SQL("SELECT count(*), coalesce(sum(('x' || left(md5({row}), 16))::bit(64)::bigint), "
                                       "0) FROM {table}").format(row=row, table=identifier(table.fullname))).fetchone()
    return rows, _spelled(int(total))


def file_checksum(path: Path, table: schema.Table, advance: Callable[[int], None] = lambda rows: None
                  ) -> tuple[int, str]:
    """(rows, checksum) of the rows of a GeoParquet file written for `table`, one row group at a time."""
    rows = total = 0
    names = [column.name for column in table.columns]
    with pq.ParquetFile(path) as parquet:
        for index in range(parquet.num_row_groups):
            group = parquet.read_row_group(index, columns=names)
            pieces = [_arrow_piece(group.column(column.name).combine_chunks(), column) for column in table.columns]
            for line in pc.binary_join_element_wise(*pieces, "").to_pylist():
                total += int.from_bytes(hashlib.md5(line.encode()).digest()[:8], "big", signed=True)
            rows += group.num_rows
            advance(group.num_rows)
    return rows, _spelled(total)


def _arrow_piece(values: pa.Array, column: schema.Column) -> pa.Array:
    """One column of the row string, as _sql_piece spells it."""
    if column.type is schema.GEOGRAPHY:
        text = _hex(values)
    elif column.type in (schema.INTEGER, schema.BIGINT):
        text = pc.cast(values, pa.string())
    else:
        text = values
    spelled = pc.binary_join_element_wise("V", pc.cast(pc.utf8_length(text), pa.string()), ":", text, "")
    return pc.fill_null(spelled, "N")


def _hex(values: pa.Array) -> pa.Array:
    """Binary values as lowercase hex strings (nulls kept), all at once: the data buffer hexed in one call."""
    if not len(values):
        return pa.array([], pa.string())
    if values.offset:  # a slice: its validity bits start mid-byte; a copy starts at 0 like its offsets below
        values = pa.concat_arrays([values])
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32, count=len(values) + 1)
    data = values.buffers()[2]
    start, end = int(offsets[0]), int(offsets[-1])
    hexed = binascii.hexlify(memoryview(data)[start:end]) if data is not None else b""
    new_offsets = ((offsets - start) * 2).astype(np.int32)
    return pa.StringArray.from_buffers(len(values), pa.py_buffer(new_offsets.tobytes()), pa.py_buffer(hexed),
                                       values.buffers()[0], values.null_count, 0)


def _spelled(total: int) -> str:
    """The sum modulo 2**64 as 16 hex digits."""
    return f"{total % _MOD:016x}"
