"""The vector tables' GiST indexes and statistics (docs/REFERENCE-DB.md, Indexes and ANALYZE): loader 2's
index names and ANALYZE, which change plans, not results.

An index is built once its table's rows are in: maintaining a GiST index row by row costs more than building it
afterwards (`bench/osm_pbf.py`'s dense city: its roads inserted into an indexed table take 0.72-0.92 s, into a
bare one and then indexed 0.66-0.72 s). So `ingest osm` drops a table's index before it rewrites the table from
its first row, and makes each table ready as soon as its layer is loaded, while the other layers still load;
`ingest finalize` builds what is missing and analyzes every table. Indexing each table while the other lane
loads saves about 5 % of the whole (400 MB of bench/make_db.py's layers: `ingest osm DIR` 3.69-3.71 s against
`ingest osm DIR --no-index; ingest finalize` 3.83-3.90 s, fresh databases, interleaved; VM of 2026-12-03).

The index is on geography, and PostGIS has no sorted GiST build for it (`gist_geography_ops` has no
sortsupport function, unlike geometry's `gist_geometry_ops_2d`), so it is built tuple by tuple: on the dense
city's roads 0.48-0.55 s, the same rows as geometry 0.15 s; inserting in spatial order, `buffering` or a larger
maintenance_work_mem change nothing. The index work overlaps the loading of the other layers, but the tables
finish close together, so the load's tail is the roads index.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from gsqa_core import schema
from gsqa_core.db import identifier, relation_exists


def index_name(table: schema.Table) -> str:
    return f"{table.name}_geometry_gix"


def has_index(conn: psycopg.Connection, table: schema.Table) -> bool:
    return relation_exists(conn, f"{table.schema}.{index_name(table)}")


def is_analyzed(conn: psycopg.Connection, table: schema.Table) -> bool:
    return conn.execute("SELECT coalesce(last_analyze, last_autoanalyze) IS NOT NULL FROM pg_stat_user_tables "
                        "WHERE relid = %s::regclass", [table.fullname]).fetchone()[0]


def make_ready(conn: psycopg.Connection, table: schema.Table) -> None:
    """The table's GiST index if it is missing, then ANALYZE, which samples every column (pois has 48): on
    bench/osm_geojson.py's 285 MB and 1 GB both add 0.5-1.2 s to `ingest osm`, where ogr2ogr's GiST index and
    ANALYZE add 0.5-0.6 s. Each statement commits on its own: an interrupted build leaves no index, and a rerun
    builds it."""
    conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING GIST (geometry)").format(
        sql.Identifier(index_name(table)), identifier(table.fullname)))
    conn.execute(sql.SQL("ANALYZE {}").format(identifier(table.fullname)))


def drop_index(conn: psycopg.Connection, table: schema.Table) -> None:
    """Before the table is rewritten from its first row, in that transaction: if it rolls back, the index stays."""
    conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(identifier(f"{table.schema}.{index_name(table)}")))
