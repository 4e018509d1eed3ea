"""Connections to the reference database, resolved the same way by every command.

Order: the --dsn option, then the DATABASE_URL environment variable, then libpq's own PG* variables
(PGHOST, PGPORT, PGDATABASE, PGUSER, PGPASSWORD, ...), which libpq applies to whatever the first two
leave unset. When none of these names a server or database, the default is the database `make db`
builds (MAKE_DB_DSN), not libpq's silent choice of a database named after the OS user. A DSN may be a URI
(postgresql://user@host:5432/gsqa) or a key=value string (host=localhost dbname=gsqa).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from gsqa_core.errors import DatabaseUnreachable, GsqaError

# The database `make db` builds, with its default port and password (docker-compose.yml).
MAKE_DB_DSN = "postgresql://postgres:gsqa@127.0.0.1:55432/gsqa"
_LIBPQ_TARGET = ("PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE")
DSN_HELP = (
    "PostgreSQL connection: a URI (postgresql://user@host:5432/gsqa) or key=value string. "
    "Defaults to $DATABASE_URL, then to libpq's PGHOST/PGPORT/PGDATABASE/PGUSER/PGPASSWORD, then to the "
    f"database of `make db` ({MAKE_DB_DSN})."
)


def resolve_dsn(dsn: str | None = None) -> str:
    """The DSN to use: the explicit one, else $DATABASE_URL, else "" when PG* variables name the target
    (libpq reads them), else the database of `make db`."""
    if dsn:
        return dsn
    if os.environ.get("DATABASE_URL"):
        return os.environ["DATABASE_URL"]
    return "" if any(os.environ.get(name) for name in _LIBPQ_TARGET) else MAKE_DB_DSN


def describe_target(dsn: str) -> str:
    """host, port and database that libpq will use for `dsn`, for error messages."""
    host, port, database = target_parts(dsn)
    return f"host={host} port={port} database={database}"


def target_parts(dsn: str) -> tuple[str, str, str]:
    """(host, port, database) that libpq will use for `dsn`."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as error:
        raise GsqaError(f"malformed connection string {dsn!r}: {error}") from None
    host = params.get("host") or os.environ.get("PGHOST") or "local socket"
    port = params.get("port") or os.environ.get("PGPORT") or "5432"
    user = params.get("user") or os.environ.get("PGUSER") or os.environ.get("USER", "")
    database = params.get("dbname") or os.environ.get("PGDATABASE") or user
    return host, str(port), database


def connect(dsn: str | None = None, **kwargs: Any) -> psycopg.Connection:
    """Open a connection; an unreachable server becomes one DatabaseUnreachable line."""
    resolved = resolve_dsn(dsn)
    target = describe_target(resolved)
    try:
        return psycopg.connect(resolved, **kwargs)
    except psycopg.OperationalError as error:
        cause = " ".join(str(error).split()) or type(error).__name__
        end = "" if cause.endswith((".", "?")) else "."
        raise DatabaseUnreachable(f"cannot connect to PostgreSQL ({target}): {cause}{end} {advice(cause)}") from None


def advice(cause: str) -> str:
    """What to do, by what libpq said."""
    lowered = cause.lower()
    if "does not exist" in lowered and "database" in lowered:
        return ("The server runs but has no such database: create it (createdb NAME), or run `make db`, which "
                "builds gsqa, or point --dsn / DATABASE_URL at the right database.")
    if "password authentication failed" in lowered or "no password supplied" in lowered:
        return ("Check the user and password (PGPASSWORD, or the one in --dsn / DATABASE_URL; make db's is "
                "POSTGRES_PASSWORD).")
    if "refused" in lowered or "no such file or directory" in lowered:
        return ("Nothing listens there: start the database (`make db`, or your server, e.g. `pg_ctlcluster 15 main "
                "start`) or point --dsn / DATABASE_URL at a running server.")
    return "Start the database with `make db` or point --dsn / DATABASE_URL at a running server."


def where(conn: psycopg.Connection) -> str:
    """host:port/database of an open connection, for messages that name the database they speak of."""
    return f"{conn.info.host}:{conn.info.port}/{conn.info.dbname}"


def relation_exists(conn: psycopg.Connection, qualified_name: str) -> bool:
    return conn.execute("SELECT to_regclass(%s)", [qualified_name]).fetchone()[0] is not None


def identifier(qualified_name: str) -> sql.Identifier:
    """`schema.table` as a quoted SQL identifier."""
    return sql.Identifier(*qualified_name.split("."))


def with_user(dsn: str | None, user: str, password: str | None) -> str:
    """The same server and database as `dsn`, logged in as another user, with `password` (never the one
    `dsn` has for its own user)."""
    params: dict[str, Any] = {key: value for key, value in conninfo_to_dict(resolve_dsn(dsn)).items()
                              if key not in ("user", "password")}
    return make_conninfo(**params, user=user, **({"password": password} if password else {}))


def run_together(tasks: list[Callable[[], None]], connections: list[psycopg.Connection], thread_name: str,
                 on_failure: Callable[[], None] = lambda: None) -> None:
    """Each task in its own thread (psycopg releases the GIL while the server works). At the first failure,
    or Ctrl-C, `on_failure()` runs and the statements in flight on `connections` are cancelled, so that the
    other tasks stop too; once they have, that failure is raised."""
    with ThreadPoolExecutor(len(tasks), thread_name_prefix=thread_name) as threads:
        futures = [threads.submit(task) for task in tasks]
        try:
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            for future in futures:
                if future in done and future.exception() is not None:
                    raise future.exception()
        except BaseException:
            on_failure()
            for conn in connections:
                conn.cancel_safe()
            raise
