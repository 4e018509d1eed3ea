"""`ingest init`: create the extensions, the reference tables, the bookkeeping schema and the sandbox roles.

Everything runs in one transaction, so a failure leaves the database as it was. Running it again on a
database that already has the schema changes nothing and says so; a table that exists with other columns
is a conflict that is reported, never altered; a sandbox role that differs from its declaration is repaired,
and what was repaired is reported (ingest/roles.py).
"""

from __future__ import annotations

import functools
import os
import queue
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from gsqa_core import sandbox, schema
from gsqa_core.db import connect, relation_exists, resolve_dsn, run_together, where
from gsqa_core.errors import GsqaError
from gsqa_core.schema import MIN_POSTGIS, refuse_other_columns
from ingest import indexes, roles


def sql_dir() -> Path:
    """The sql/ folder: inside the installed package (wheel), else at the repository root (checkout)."""
    packaged = Path(__file__).parent / "sql"
    return packaged if packaged.is_dir() else Path(__file__).parent.parent / "sql"


def run_sql_file(conn: psycopg.Connection, name: str) -> None:
    conn.execute((sql_dir() / name).read_text())


@dataclass
class InitReport:
    target: str
    created: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)  # how a sandbox role differed before, now restored
    left: list[str] = field(default_factory=list)  # how one still differs: what init cannot repair

    @property
    def changed(self) -> bool:
        return bool(self.created or self.repaired)


def initialize(dsn: str | None) -> InitReport:
    with connect(dsn) as conn:
        report = InitReport(target=f"{conn.info.host}:{conn.info.port}/{conn.info.dbname}")
        try:
            with conn.transaction():
                _require_postgis(conn)
                before = _existing_objects(conn)
                _refuse_conflicting_tables(conn, before)
                _create_missing(conn, before)
                report.repaired, report.left = roles.apply(conn, resolve_dsn(dsn),
                                                           f"schema {schema.BOOKKEEPING_SCHEMA}" in before)
                report.created = sorted(_existing_objects(conn) - before)
        except psycopg.errors.InsufficientPrivilege as error:
            raise GsqaError(
                f"permission denied on {report.target}: {error.diag.message_primary}. `ingest init` needs a "
                "role that may create extensions and roles (a superuser such as postgres)."
            ) from None
    return report


def _require_postgis(conn: psycopg.Connection) -> None:
    row = conn.execute(
        "SELECT coalesce(e.extversion, a.default_version) FROM pg_available_extensions a "
        "LEFT JOIN pg_extension e ON e.extname = a.name WHERE a.name = 'postgis'"
    ).fetchone()
    if row is None:
        raise GsqaError(
            "PostGIS is not installed on this server: install postgresql-15-postgis-3 (Debian) "
            "or use the Docker database (`make db`)."
        )
    version = tuple(int(part) for part in row[0].split(".")[:2])
    if version < MIN_POSTGIS:
        raise GsqaError(f"PostGIS {row[0]} is too old: the benchmark SQL needs >= {schema.MIN_POSTGIS_TEXT} "
                        "(ST_DumpSegments).")


def _existing_objects(conn: psycopg.Connection) -> set[str]:
    """What init creates that is already there, as 'kind name' labels."""
    found = {
        f"extension {name}"
        for (name,) in conn.execute(
            "SELECT extname FROM pg_extension WHERE extname IN ('postgis', 'postgis_raster')"
        )
    }
    for table in schema.ALL_TABLES:
        if relation_exists(conn, table.fullname):
            found.add(f"table {table.fullname}")
    if conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [schema.BOOKKEEPING_SCHEMA]).fetchone():
        found.add(f"schema {schema.BOOKKEEPING_SCHEMA}")
    found |= {f"role {name}" for (name,) in conn.execute("SELECT rolname FROM pg_roles WHERE rolname = ANY(%s)",
                                                         [[role.name for role in sandbox.ROLES]])}
    return found


def _refuse_conflicting_tables(conn: psycopg.Connection, existing: set[str]) -> None:
    for table in schema.ALL_TABLES:
        if f"table {table.fullname}" in existing:
            refuse_other_columns(conn, table, "Drop or rename it, then rerun `ingest init`.")


def _create_missing(conn: psycopg.Connection, existing: set[str]) -> None:
    run_sql_file(conn, "00_extensions.sql")
    run_sql_file(conn, "10_bookkeeping_schema.sql")
    for table in schema.ALL_TABLES:
        if f"table {table.fullname}" not in existing:
            conn.execute(table.create_sql())


def finalize(dsn: str | None, workers: int | None = None) -> None:
    """Post-load work on the vector tables (indexes.py): each table's GiST index if it is missing, then
    ANALYZE; the tables largest first, each on the next free of `workers` connections (default: one per core)."""
    with connect(dsn, autocommit=True) as conn:
        missing = [table.fullname for table in schema.REFERENCE_TABLES if not relation_exists(conn, table.fullname)]
        if missing:
            raise GsqaError(f"table {missing[0]} does not exist in {where(conn)}: run `ingest init` first, "
                            "then the load stages")
        size = {table: conn.execute("SELECT pg_table_size(%s::regclass)", [table.fullname]).fetchone()[0]
                for table in schema.VECTOR_TABLES}
    pending: queue.SimpleQueue[schema.Table] = queue.SimpleQueue()
    for table in sorted(schema.VECTOR_TABLES, key=lambda table: -size[table]):
        pending.put(table)
    count = min(len(size), workers or os.cpu_count() or 1)
    connections = [connect(dsn, autocommit=True) for _ in range(count)]
    try:
        run_together([functools.partial(_run_pending, conn, pending) for conn in connections], connections,
                     "ingest-finalize")
    finally:
        for conn in connections:
            conn.close()


def _run_pending(conn: psycopg.Connection, pending: queue.SimpleQueue[schema.Table]) -> None:
    while True:
        try:
            table = pending.get_nowait()
        except queue.Empty:
            return
        indexes.make_ready(conn, table)
