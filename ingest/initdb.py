"""`ingest init`: create the extensions, the reference tables, the bookkeeping schema and the reader role.

Everything runs in one transaction, so a failure leaves the database as it was. Running it again on a
database that already has the schema changes nothing and says so; a table that exists with other columns
is a conflict that is reported, never altered.
"""

from __future__ import annotations

import functools
import os
import queue
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql

from gsqa_core import schema
from gsqa_core.db import connect, identifier, relation_exists, run_together, where
from gsqa_core.errors import GsqaError
from gsqa_core.reader import READER_PASSWORD_ENV
from gsqa_core.schema import MIN_POSTGIS, refuse_other_columns
from ingest import indexes


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

    @property
    def changed(self) -> bool:
        return bool(self.created)


def initialize(dsn: str | None) -> InitReport:
    with connect(dsn) as conn:
        report = InitReport(target=f"{conn.info.host}:{conn.info.port}/{conn.info.dbname}")
        try:
            with conn.transaction():
                _require_postgis(conn)
                before = _existing_objects(conn)
                _refuse_conflicting_tables(conn, before)
                _create_missing(conn, before)
                _apply_grants(conn)
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
        raise GsqaError(f"PostGIS {row[0]} is too old: the benchmark SQL needs >= 3.2 (ST_DumpSegments).")


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
    if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [schema.READER_ROLE]).fetchone():
        found.add(f"role {schema.READER_ROLE}")
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
    if f"role {schema.READER_ROLE}" not in existing:
        _create_reader_role(conn)


def _create_reader_role(conn: psycopg.Connection) -> None:
    statement = sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(schema.READER_ROLE))
    try:
        with conn.transaction():  # a savepoint: another session may create the cluster-wide role first
            conn.execute(statement)
            run_sql_file(conn, "20_reader_role.sql")
    except (psycopg.errors.DuplicateObject, psycopg.errors.UniqueViolation):
        pass


def _set_reader_password(conn: psycopg.Connection) -> None:
    """The reader's password, on every run: $GSQA_READER_PASSWORD, else the one this database keeps, else a new
    one; set on the role and kept in gsqa.reader_login, where `reproduce` finds it (gsqa_core/reader.py). The
    role is the cluster's: init on another database without GSQA_READER_PASSWORD gives it that database's."""
    kept = conn.execute(sql.SQL("SELECT password FROM {}").format(identifier(schema.reader_login.fullname))).fetchone()
    password = os.environ.get(READER_PASSWORD_ENV) or (kept[0] if kept else secrets.token_urlsafe(18))
    conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(schema.READER_ROLE), sql.Literal(password)))
    if not kept or kept[0] != password:
        conn.execute(sql.SQL("DELETE FROM {}").format(identifier(schema.reader_login.fullname)))
        conn.execute(sql.SQL("INSERT INTO {} VALUES (%s)").format(identifier(schema.reader_login.fullname)),
                     [password])


def _apply_grants(conn: psycopg.Connection) -> None:
    """The reader's password, resource limits and grants, on every run (a role made by an older version gets
    them too)."""
    _set_reader_password(conn)
    run_sql_file(conn, "25_reader_limits.sql")
    run_sql_file(conn, "30_reader_grants.sql")


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
