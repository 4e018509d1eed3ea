"""A vector table as FlatGeobuf (`--format flatgeobuf`), for tools that read it (GDAL, QGIS, flatgeobuf's
readers): DIR/flatgeobuf/<table>.fgb, the same Arrow batches as the GeoParquet file's (vector.py) without the
bbox column, written by GDAL's driver through pyogrio (the `export` extra: its wheel carries a GDAL), which
builds the file's packed Hilbert R-tree. The layer's geometry type is Unknown (a table mixes types); CRS
EPSG:4326.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import psycopg
import pyarrow as pa

from gsqa_core import schema
from gsqa_core.dem_grid import SRID
from gsqa_core.errors import GsqaError
from ingest.export import vector

FOLDER = "flatgeobuf"


def write_table(conn: psycopg.Connection, table: schema.Table, path: Path, advance: Callable[[int], None]) -> int:
    """The table as FlatGeobuf at `path`; its rows."""
    try:
        import pyogrio
    except ImportError:
        raise GsqaError("--format flatgeobuf needs pyogrio: pip install 'gsqa-refdb[export]'") from None
    columns = [column.name for column in table.columns]
    target = vector.arrow_schema(table)
    written = 0

    def batches():
        nonlocal written
        for batch in vector.record_batches(conn, table, advance):
            written += len(batch)
            yield batch.select(columns)

    stream = pa.RecordBatchReader.from_batches(pa.schema([target.field(name) for name in columns]), batches())
    named = path.with_name(path.name + ".fgb")  # GDAL's driver makes a folder of a name without .fgb
    pyogrio.write_arrow(stream, str(named), driver="FlatGeobuf", geometry_name=vector.GEOMETRY,
                        geometry_type="Unknown", crs=f"EPSG:{SRID}")
    os.replace(named, path)
    return written
