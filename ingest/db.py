"""Connections to the reference database, resolved the same way by every command.

Order: the --dsn option, then the DATABASE_URL environment variable, then libpq's own PG* variables
(PGHOST, PGPORT, PGDATABASE, PGUSER, PGPASSWORD, ...), which libpq applies to whatever the first two
leave unset. A DSN may be a URI (postgresql://user@host:5432/gsqa) or a key=value string
(host=localhost dbname=gsqa).
"""

from __future__ import annotations

import os
from typing import Annotated, Any

import psycopg
import typer
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ingest.errors import DatabaseUnreachable, GsqaError

DSN_HELP = (
    "PostgreSQL connection: a URI (postgresql://user@host:5432/gsqa) or key=value string. "
    "Defaults to $DATABASE_URL, then to libpq's PGHOST/PGPORT/PGDATABASE/PGUSER/PGPASSWORD."
)
DsnOption = Annotated[str | None, typer.Option("--dsn", help=DSN_HELP, show_default=False)]


def resolve_dsn(dsn: str | None = None) -> str:
    """The DSN to use: the explicit one, else $DATABASE_URL, else "" (libpq then reads PG*)."""
    if dsn:
        return dsn
    return os.environ.get("DATABASE_URL", "")


def describe_target(dsn: str) -> str:
    """host, port and database that libpq will use for `dsn`, for error messages."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as error:
        raise GsqaError(f"malformed connection string {dsn!r}: {error}") from None
    host = params.get("host") or os.environ.get("PGHOST") or "local socket"
    port = params.get("port") or os.environ.get("PGPORT") or "5432"
    user = params.get("user") or os.environ.get("PGUSER") or os.environ.get("USER", "")
    database = params.get("dbname") or os.environ.get("PGDATABASE") or user
    return f"host={host} port={port} database={database}"


def connect(dsn: str | None = None, **kwargs: Any) -> psycopg.Connection:
    """Open a connection; an unreachable server becomes one DatabaseUnreachable line."""
    resolved = resolve_dsn(dsn)
    target = describe_target(resolved)
    try:
        return psycopg.connect(resolved, **kwargs)
    except psycopg.OperationalError as error:
        cause = " ".join(str(error).split()) or type(error).__name__
        raise DatabaseUnreachable(
            f"cannot connect to PostgreSQL ({target}): {cause}. "
            "Start the database with `make db` or point --dsn / DATABASE_URL at a running server."
        ) from None


def relation_exists(conn: psycopg.Connection, qualified_name: str) -> bool:
    return conn.execute("SELECT to_regclass(%s)", [qualified_name]).fetchone()[0] is not None


def identifier(qualified_name: str) -> sql.Identifier:
    """`schema.table` as a quoted SQL identifier."""
    return sql.Identifier(*qualified_name.split("."))


def with_user(dsn: str | None, user: str, password: str | None) -> str:
    """The same server and database as `dsn`, logged in as another user."""
    overrides: dict[str, Any] = {"user": user}
    if password:
        overrides["password"] = password
    return make_conninfo(resolve_dsn(dsn), **overrides)
