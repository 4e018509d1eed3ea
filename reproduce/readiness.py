"""Is a database ready for `reproduce`? PostGIS version, the reference tables, and the sandbox logins: each
role logs in and is as gsqa_core/sandbox.py declares it (gsqa_core/roles.py's audit).

This is the preflight of every run (for the roles it runs SQL as), and `reproduce check` on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from gsqa_core import sandbox, schema
from gsqa_core.db import connect, identifier, relation_exists, where
from gsqa_core.errors import GsqaError
from gsqa_core.roles import Audit, audit, login_dsn, memory_note
from gsqa_core.sandbox import Role

# Which roles a run logs in as, each with an explicit DSN (--reader-dsn) or None (the main DSN as that role).
Logins = Mapping[Role, str | None]
BOTH_ROLES: Logins = {role: None for role in sandbox.ROLES}


@dataclass
class Readiness:
    postgis_version: str
    row_estimates: dict[str, int | None] = field(default_factory=dict)  # None: table missing
    # How each count was had: "estimate" (the planner's, once analyzed), "exact", or "more than" (not analyzed
    # and above the exact-count limit).
    counted: dict[str, str] = field(default_factory=dict)
    audits: dict[str, Audit] = field(default_factory=dict)  # each role's, by name
    memory: str = ""  # what each backend of the server may take (roles.memory_note)

    @property
    def problems(self) -> list[str]:
        found = [f"table public.{name} is missing" for name, rows in self.row_estimates.items() if rows is None]
        found += [f"table public.{name} is empty" for name, rows in self.row_estimates.items() if rows == 0]
        found += [audited.problem for audited in self.audits.values() if audited.problem]
        return found + list(dict.fromkeys(item for audited in self.audits.values() for item in audited.server))

    @property
    def notes(self) -> list[str]:
        """What does not stop a run but an administrator should know: what a role owns in another database, the
        memory a backend may take."""
        return [note for audited in self.audits.values() for note in audited.elsewhere] + (
            [self.memory] if self.memory else [])


def check(dsn: str | None, logins: Logins = BOTH_ROLES, tables: list[str] | None = None) -> Readiness:
    """PostGIS, the reference tables (or only `tables`, by name) and the logins of `logins`."""
    with connect(dsn, autocommit=True) as conn:
        readiness = Readiness(postgis_version=_postgis_version(conn), memory=memory_note(conn))
        for table in schema.REFERENCE_TABLES:
            if tables is None or table.name in tables:
                rows, how = _row_estimate(conn, table.fullname)
                readiness.row_estimates[table.name] = rows
                readiness.counted[table.name] = how
    readiness.audits = {role.name: audit(login_dsn(dsn, role, explicit), role) for role, explicit in logins.items()}
    return readiness


def preflight(dsn: str | None, logins: Logins, tables: list[str]) -> Readiness:
    """check() for a run that needs `tables` and logs in as `logins`: any problem stops the run before the
    first question."""
    readiness = check(dsn, logins, tables)
    if refused := not_ready(readiness):
        raise GsqaError(refused)
    return readiness


def not_ready(readiness: Readiness) -> str:
    """Why a run cannot start on the database, in one line ("" when it can): each problem says what to do,
    and a missing or empty table is loaded by a build."""
    if not readiness.problems:
        return ""
    tables = any(rows in (None, 0) for rows in readiness.row_estimates.values())
    return ("the database is not ready: " + "; ".join(readiness.problems)
            + (". Load the missing data (`make db`, `ingest all`; `reproduce check` shows every table)" if tables
               else ""))


def database_facts(dsn: str | None) -> dict[str, object]:
    """What a run's results depend on: server and PostGIS versions, exact row counts (the fingerprint): one
    count(*) per reference table, seconds on the real database's 18 M roads."""
    with connect(dsn, autocommit=True) as conn:
        return table_facts(conn)


def table_facts(conn: psycopg.Connection) -> dict[str, object]:
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
        raise GsqaError(f"PostGIS is not installed in {where(conn)}: run `ingest init` first.") from None
    if tuple(int(part) for part in version.split(".")[:2]) < schema.MIN_POSTGIS:
        raise GsqaError(f"PostGIS {version} is too old: the benchmark SQL needs >= {schema.MIN_POSTGIS_TEXT}.")
    return version


EXACT_COUNT_LIMIT = 1_000_000


def _row_estimate(conn: psycopg.Connection, qualified_name: str) -> tuple[int | None, str]:
    """(rows, how counted): the planner's estimate once the table is analyzed (exact counts take minutes on
    roads); before that an exact count of up to a million rows; None for a missing table."""
    if not relation_exists(conn, qualified_name):
        return None, "exact"
    estimate = conn.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                            [qualified_name]).fetchone()[0]
    if estimate > 0:
        return estimate, "estimate"
    table = identifier(qualified_name)
    counted = conn.execute(sql.SQL("SELECT count(*) FROM (SELECT FROM {} LIMIT %s) s").format(table),
                           [EXACT_COUNT_LIMIT + 1]).fetchone()[0]
    return (counted, "exact") if counted <= EXACT_COUNT_LIMIT else (EXACT_COUNT_LIMIT, "more than")


def rows_text(rows: int | None, how: str) -> str:
    """A table's rows as `reproduce check` says them (`how`: Readiness.counted's)."""
    if rows is None:
        return "missing"
    if rows == 0:
        return "empty"
    return {"exact": f"{rows:,} rows", "estimate": f"~{rows:,} rows (planner estimate)",
            "more than": f"more than {rows:,} rows (not analyzed)"}[how]
