"""A read-only SQLAlchemy engine on the reference database, for running text-to-SQL baselines and agents.

Most frameworks (LangChain's SQLDatabase, llama-index, CHESS, DB-GPT) take an SQLAlchemy engine and read the
schema through its inspector. `engine()` gives one that holds their SQL to the rules `reproduce` holds a
model's SQL to (reproduce/runner.py), in the same sandbox (gsqa_core/sandbox.py):

- it logs in as the model role gsqa_model, found as `reproduce` finds it (gsqa_core/roles.py), which may
  only read the reference tables and cannot see the query text of gold runs; it refuses to start if that
  login is not as declared (`reproduce check`'s audit);
- a statement that is not a query is refused before it is sent, and the server's refusals are raised as one
  line (reproduce/gate.py), as `Refused`, a DBAPIError, so that frameworks that catch SQLAlchemy's errors
  hand the line to the model;
- every statement goes through the extended protocol (psycopg prepares every query: prepare_threshold=0),
  which refuses a second statement, so "SELECT 1; DELETE ..." runs nothing;
- the declared session settings and statement_timeout are set again before every statement, so a statement
  that switched one off cannot make the next one unbounded;
- a connection going back to the pool is rolled back and its session reset (DISCARD ALL: advisory locks,
  settings), as `reproduce` resets it after each question.

GeoAlchemy2 is imported with it, so that the inspector reports geography, geometry and raster columns as
Geography, Geometry and Raster instead of warning and giving NullType. Results are not capped here (the
framework fetches them); `reproduce score` holds its own runs to the runner's caps.

    from reproduce.baseline import engine
    from sqlalchemy import inspect, text
    db = engine()                                   # --dsn / DATABASE_URL / PG* resolution, as gsqa_model
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
import psycopg
from psycopg.conninfo import conninfo_to_dict

from gsqa_core import sandbox
from gsqa_core.errors import GsqaError
from gsqa_core.roles import audit, login_dsn, refuse_tampered
from reproduce import gate
from reproduce.runner import MAX_TIMEOUT_S, MIN_TIMEOUT_S

APPLICATION_NAME = "gsqa-baseline"  # what pg_stat_activity shows for the engine's connections


class Refused(sqlalchemy.exc.DBAPIError):
    """A statement the sandbox refused, as one line (`str()`); `orig` is the server's error, if it answered."""

    def __init__(self, line: str, statement: str | None, parameters: Any, orig: BaseException | None) -> None:
        super().__init__(statement, parameters, orig or psycopg.errors.InsufficientPrivilege(line))
        self.line = line

    def __str__(self) -> str:
        return self.line


def engine(dsn: str | None = None, timeout: float = 120.0, login: str | None = None,
           **engine_options: Any) -> sqlalchemy.Engine:
    """An SQLAlchemy engine logged in as gsqa_model on the database `dsn` resolves to (--dsn, DATABASE_URL,
    PG*, then `make db`'s database), or on `login` (a DSN of the model role itself); every statement gets
    `timeout` seconds (at least 0.1) on the server. `engine_options` go to sqlalchemy.create_engine
    (pool_size, echo). Raises GsqaError, saying why in one line, for a timeout below 0.1 s, and when the role
    cannot log in (with the advice the CLIs give) or is not as declared."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not (
            MIN_TIMEOUT_S <= timeout <= MAX_TIMEOUT_S):  # NaN fails the comparison too
        raise GsqaError(f"timeout={timeout!r}: give seconds from {MIN_TIMEOUT_S} to {MAX_TIMEOUT_S:,}, the "
                        "server-side limit of each statement")
    login = login_dsn(dsn, sandbox.MODEL, login)  # the explicit one, or the main DSN as gsqa_model
    found = audit(login, sandbox.MODEL)
    if found.problems:
        raise GsqaError(f"no engine for baselines: {'; '.join(found.problems)}")
    limit = f"{round(timeout * 1000)}ms"
    options = f"{conninfo_to_dict(login).get('options', '')} -c statement_timeout={limit}".strip()
    settings = {**{name: value for name, value in sandbox.SETTINGS.items() if name not in sandbox.SUPERUSER_ONLY},
                "statement_timeout": limit}
    again = "SELECT " + ", ".join(["set_config(%s, %s, false)"] * len(settings))
    made = sqlalchemy.create_engine("postgresql+psycopg://", **engine_options)

    @sqlalchemy.event.listens_for(made, "do_connect")
    def _log_in(dialect: Any, record: Any, cargs: list, cparams: dict) -> None:
        # The DSN as a libpq string (a URL would have to carry a key=value DSN's password in its query).
        cargs[:] = [login]
        cparams.update(application_name=APPLICATION_NAME, options=options, prepare_threshold=0)

    @sqlalchemy.event.listens_for(made, "connect")
    def _check_role(dbapi_connection: Any, record: Any) -> None:
        # The role may have stored a setting for itself since the audit: refuse a connection it would reach.
        refuse_tampered(dbapi_connection)
        dbapi_connection.rollback()

    @sqlalchemy.event.listens_for(made, "before_cursor_execute")
    def _gate_then_settings(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
                            many: bool) -> None:
        if gate.first_word(statement) in gate.SAVEPOINTS:
            return  # a nested transaction's own statement, which must also run in an aborted transaction
        if refused := gate.refusal(statement):
            raise Refused(refused, statement, parameters, None)
        cursor.connection.execute(again, [part for pair in settings.items() for part in pair])

    @sqlalchemy.event.listens_for(made, "handle_error")
    def _one_line(context: Any) -> None:
        error = context.original_exception
        if isinstance(error, psycopg.Error) and (refused := gate.server_refusal(error)):
            raise Refused(refused, context.statement, context.parameters, error)

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
