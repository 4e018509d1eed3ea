"""The vector tables' GiST indexes and statistics (docs/REFERENCE-DB.md, Indexes and ANALYZE): loader 2's
index names and ANALYZE, which change plans, not results.

An index is built once its table's rows are in: maintaining a GiST index row by row costs more than building it
afterwards. So `ingest osm` drops a table's index before it rewrites the table from its first row, and makes each
table ready as soon as its layer is loaded, while the other layers still load; `ingest finalize` builds what is
missing and analyzes every table. Indexing each table while the other lane
loads is faster than indexing them all afterwards (docs/PERFORMANCE.md, "Where the time goes").

The index is on geography, and PostGIS has no sorted GiST build for it (`gist_geography_ops` has no
sortsupport function, unlike geometry's `gist_geometry_ops_2d`), so it is built tuple by tuple, several times
slower than the same rows' index on geometry; inserting in spatial order, `buffering` or a larger
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
    """The table's GiST index if it is missing, then ANALYZE, which samples every column (pois has 48), so
    both cost more than ogr2ogr's index and ANALYZE (docs/PERFORMANCE.md, the `ingest osm DIR` rows). Each
    statement commits on its own: an interrupted build leaves no index, and a rerun builds it."""
    conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING GIST (geometry)").format(
        sql.Identifier(index_name(table)), identifier(table.fullname)))
    conn.execute(sql.SQL("ANALYZE {}").format(identifier(table.fullname)))


def drop_index(conn: psycopg.Connection, table: schema.Table) -> None:
    """Before the table is rewritten from its first row, in that transaction: if it rolls back, the index stays."""
    conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(identifier(f"{table.schema}.{index_name(table)}")))
