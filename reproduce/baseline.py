"""A read-only SQLAlchemy engine on the reference database, for running text-to-SQL baselines and agents.

Most frameworks (LangChain's SQLDatabase, llama-index, CHESS, DB-GPT) take an SQLAlchemy engine and read the
schema through its inspector. `engine()` gives one that holds their SQL to the rules `reproduce` holds
benchmark SQL to (reproduce/runner.py):

- it logs in as the read-only role gsqa_reader, found as `reproduce` finds it (gsqa_core/reader.py), and
  refuses to start if that login is not locked down (`reproduce check`'s reader checks): read-only
  transactions, a temp_file_limit and work_mem from the role, no signalling of other backends;
- every statement goes through the extended protocol (psycopg prepares every query: prepare_threshold=0),
  which refuses a second statement, so "SELECT 1; DELETE ..." runs nothing;
- statement_timeout is set again before every statement, so a statement that switched it off cannot
  make the next one unbounded;
- a connection going back to the pool is rolled back and its session reset (DISCARD ALL: advisory locks,
  settings), as `reproduce` resets it after each question.

GeoAlchemy2 is imported with it, so that the inspector reports geography, geometry and raster columns as
Geography, Geometry and Raster instead of warning and giving NullType. Results are not capped here (the
framework fetches them); `reproduce score` holds its own runs to the runner's caps.

    from reproduce.baseline import engine
    from sqlalchemy import inspect, text
    db = engine()                                   # --dsn / DATABASE_URL / PG* resolution, as gsqa_reader
    print(inspect(db).get_columns("pois")[1])       # {'name': 'geometry', 'type': Geography(...), ...}
    with db.connect() as conn:
        print(conn.execute(text("SELECT count(*) FROM dem_us")).scalar())

Needs the `baseline` extra (pip install 'gsqa-refdb[baseline]'); the CLIs never import this module.
"""

from __future__ import annotations

from typing import Any

try:
    import geoalchemy2  # noqa: F401 - registers geometry, geography and raster with SQLAlchemy's PostgreSQL dialect
    import sqlalchemy
except ModuleNotFoundError as missing:
    raise ModuleNotFoundError(f"reproduce.baseline needs {missing.name}: pip install 'gsqa-refdb[baseline]'",
                              name=missing.name) from None
from psycopg.conninfo import conninfo_to_dict

from gsqa_core.errors import GsqaError
from gsqa_core.reader import reader_dsn, reader_problem

APPLICATION_NAME = "gsqa-baseline"  # what pg_stat_activity shows for the engine's connections


def engine(dsn: str | None = None, timeout: float = 120.0, reader: str | None = None,
           **engine_options: Any) -> sqlalchemy.Engine:
    """An SQLAlchemy engine logged in as gsqa_reader on the database `dsn` resolves to (--dsn, DATABASE_URL,
    PG*, then `make db`'s database), or on `reader` (a DSN of the read-only role itself); every statement
    gets `timeout` seconds on the server. `engine_options` go to sqlalchemy.create_engine (pool_size, echo).
    Raises GsqaError, saying why, when the reader cannot log in or is not locked down."""
    login = reader_dsn(dsn, reader)
    problem = reader_problem(login)
    if problem:
        raise GsqaError(f"no engine for baselines: {problem}")
    limit = f"{round(timeout * 1000)}ms"
    options = f"{conninfo_to_dict(login).get('options', '')} -c statement_timeout={limit}".strip()
    made = sqlalchemy.create_engine("postgresql+psycopg://", **engine_options)

    @sqlalchemy.event.listens_for(made, "do_connect")
    def _log_in(dialect: Any, record: Any, cargs: list, cparams: dict) -> None:
        # The DSN as a libpq string (a URL would have to carry a key=value DSN's password in its query).
        cargs[:] = [login]
        cparams.update(application_name=APPLICATION_NAME, options=options, prepare_threshold=0)

    @sqlalchemy.event.listens_for(made, "before_cursor_execute")
    def _timeout_again(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        cursor.connection.execute("SELECT set_config('statement_timeout', %s, false)", [limit])

    sqlalchemy.event.listen(made.pool, "reset", _discard_session)
    return made


def _discard_session(dbapi_connection: Any, record: Any, reset_state: Any) -> None:
    """Roll back, then forget what the statements left in the session (advisory locks, settings), as the
    runner does after each question. psycopg drops its prepared statements on DISCARD ALL."""
    dbapi_connection.rollback()
    autocommit = dbapi_connection.autocommit
    dbapi_connection.autocommit = True
    dbapi_connection.execute("DISCARD ALL")
    dbapi_connection.autocommit = autocommit
