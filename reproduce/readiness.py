"""Is a database ready for `reproduce`? PostGIS version, the reference tables, and the reader login.

This is the preflight of a verification run, and `reproduce check` on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from ingest import schema
from ingest.db import connect, identifier, relation_exists
from ingest.errors import GsqaError
from ingest.initdb import MIN_POSTGIS
from ingest.reader import reader_dsn, reader_problem


@dataclass
class Readiness:
    postgis_version: str
    row_estimates: dict[str, int | None] = field(default_factory=dict)  # None: table missing
    reader_problem: str | None = None

    @property
    def problems(self) -> list[str]:
        found = [f"table public.{name} is missing" for name, rows in self.row_estimates.items() if rows is None]
        found += [f"table public.{name} is empty" for name, rows in self.row_estimates.items() if rows == 0]
        if self.reader_problem:
            found.append(self.reader_problem)
        return found


def check(dsn: str | None, reader: str | None = None, tables: list[str] | None = None) -> Readiness:
    """PostGIS, the reference tables (or only `tables`, by name) and the reader login."""
    with connect(dsn, autocommit=True) as conn:
        readiness = Readiness(postgis_version=_postgis_version(conn))
        for table in schema.REFERENCE_TABLES:
            if tables is None or table.name in tables:
                readiness.row_estimates[table.name] = _row_estimate(conn, table.fullname)
    readiness.reader_problem = reader_problem(reader_dsn(dsn, reader))
    return readiness


def preflight(dsn: str | None, reader: str | None, tables: list[str]) -> Readiness:
    """check() for a run that needs `tables`: any problem stops the run before the first question."""
    readiness = check(dsn, reader, tables)
    if readiness.problems:
        raise GsqaError(
            "the database is not ready: " + "; ".join(readiness.problems)
            + ". Load the missing data (see `reproduce check`) or select other configs/templates."
        )
    return readiness


def database_facts(dsn: str | None) -> dict[str, object]:
    """What a run's results depend on: server and PostGIS versions, exact row counts (the fingerprint)."""
    with connect(dsn, autocommit=True) as conn:
        version, postgis = conn.execute("SELECT version(), postgis_full_version()").fetchone()
        counts = {}
        for table in schema.REFERENCE_TABLES:
            if relation_exists(conn, table.fullname):
                query = sql.SQL("SELECT count(*) FROM {}").format(identifier(table.fullname))
                counts[table.name] = conn.execute(query).fetchone()[0]
    return {"version": version, "postgis_full_version": postgis, "row_counts": counts}


def _postgis_version(conn: psycopg.Connection) -> str:
    try:
        version = conn.execute("SELECT postgis_lib_version()").fetchone()[0]
    except psycopg.errors.UndefinedFunction:
        raise GsqaError("PostGIS is not installed in this database: run `ingest init` first.") from None
    if tuple(int(part) for part in version.split(".")[:2]) < MIN_POSTGIS:
        raise GsqaError(f"PostGIS {version} is too old: the benchmark SQL needs >= 3.2.")
    return version


def _row_estimate(conn: psycopg.Connection, qualified_name: str) -> int | None:
    """Planner estimate of the row count (exact counts take minutes on roads); 0 only if really empty."""
    if not relation_exists(conn, qualified_name):
        return None
    if conn.execute(sql.SQL("SELECT NOT EXISTS (SELECT FROM {})").format(identifier(qualified_name))).fetchone()[0]:
        return 0
    estimate = conn.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass", [qualified_name])
    return max(estimate.fetchone()[0], 1)
