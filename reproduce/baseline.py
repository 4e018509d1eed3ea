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
- every transaction begins READ ONLY by the client (psycopg's read_only: `BEGIN READ ONLY`), whatever the
  session's defaults or an execution option (postgresql_readonly) say; under `isolation_level="AUTOCOMMIT"`
  each statement still runs in a transaction of its own that begins READ ONLY (emulated: the client begins
  it and ends it after the statement); a framework's COMMIT is a ROLLBACK, so nothing a statement did (a
  NOTIFY) is ever committed, and a two-phase transaction, whose commit is the driver's, is refused; so is a
  server-side cursor (stream_results), whose fetches would run past the statement's timeout;
- the declared session settings and statement_timeout are set again before every statement, so a statement
  that switched one off cannot make the next one unbounded; the runner's watchdog (reproduce/runner.py)
  cancels a statement the server's timeout missed, and ends its backend if it catches the cancel;
- a connection going back to the pool is rolled back and its session reset (DISCARD ALL: settings),
  as `reproduce` resets it after each question.

- a query's result is capped on the server as the runner caps it (reproduce/runner.py, `capped`): past
  100,000 rows or 64 MB as text it stops with one line, so neither the server nor the framework's process
  holds more.

GeoAlchemy2 is imported with it, so that the inspector reports geography, geometry and raster columns as
Geography, Geometry and Raster instead of warning and giving NullType.

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
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict

from gsqa_core import sandbox
from gsqa_core.db import resolve_dsn
from gsqa_core.errors import GsqaError
from gsqa_core.roles import audit, login_dsn, refuse_tampered
from reproduce import gate
from reproduce.runner import (
    DEFAULT_TIMEOUT_S,
    MAX_BYTES,
    MAX_ROWS,
    MAX_TIMEOUT_S,
    MIN_TIMEOUT_S,
    Watchdog,
    capped,
    too_large,
)

APPLICATION_NAME = "gsqa-baseline"  # what pg_stat_activity shows for the engine's connections


class Refused(sqlalchemy.exc.DBAPIError):
    """A statement the sandbox refused, as one line (`str()`); `orig` is the server's error, if it answered."""

    def __init__(self, line: str, statement: str | None, parameters: Any, orig: BaseException | None) -> None:
        super().__init__(statement, parameters, orig or psycopg.errors.InsufficientPrivilege(line))
        self.line = line

    def __str__(self) -> str:
        return self.line


def engine(dsn: str | None = None, timeout: float = DEFAULT_TIMEOUT_S, login: str | None = None,
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
    admin = None if login else resolve_dsn(dsn)  # the watchdog ends a backend that catches its cancel through it
    login = login_dsn(dsn, sandbox.MODEL, login)  # the explicit one, or the main DSN as gsqa_model
    found = audit(login, sandbox.MODEL)
    if found.problems:
        raise GsqaError(f"no engine for baselines: {'; '.join(found.problems)}")
    made = sqlalchemy.create_engine("postgresql+psycopg://", **engine_options)
    doors = _Doors(login, admin, timeout)
    for event in ("do_connect", "connect", "after_cursor_execute", "handle_error", "begin_twophase"):
        sqlalchemy.event.listen(made, event, getattr(doors, event))
    sqlalchemy.event.listen(made, "before_cursor_execute", doors.before_cursor_execute, retval=True)
    made.dialect.do_commit = _never_commit  # this engine's own dialect (create_engine makes one per engine)
    sqlalchemy.event.listen(made.pool, "reset", _discard_session)
    return made


_WATCHDOG = "gsqa_watchdog"  # the connection's Watchdog, in its pool record's info
_EMULATED = "gsqa_emulated"  # True while a transaction engine() began for an AUTOCOMMIT statement is open


class _Doors:
    """engine()'s listeners: the login, the gate, a READ ONLY transaction for every statement, the settings and
    the watchdog before it, the caps, one-line refusals, no commit."""

    def __init__(self, login: str, admin: str | None, timeout: float) -> None:
        self.login, self.admin, self.timeout = login, admin, timeout
        limit = f"{round(timeout * 1000)}ms"
        self.options = f"{conninfo_to_dict(login).get('options', '')} -c statement_timeout={limit}".strip()
        settings = {**sandbox.session_settings(sandbox.MODEL), "statement_timeout": limit}
        self.again = "SELECT " + ", ".join(["set_config(%s, %s, false)"] * len(settings))
        self.values = [part for pair in settings.items() for part in pair]

    def do_connect(self, dialect: Any, record: Any, cargs: list, cparams: dict) -> None:
        # The DSN as a libpq string (a URL would have to carry a key=value DSN's password in its query).
        cargs[:] = [self.login]
        cparams.update(application_name=APPLICATION_NAME, options=self.options, prepare_threshold=0)

    def connect(self, dbapi_connection: Any, record: Any) -> None:
        # The role may have stored a setting for itself since the audit: refuse a connection it would reach.
        refuse_tampered(dbapi_connection)
        dbapi_connection.rollback()
        dbapi_connection.read_only = True  # psycopg begins every transaction with BEGIN READ ONLY
        record.info[_WATCHDOG] = Watchdog(dbapi_connection, self.admin)

    def before_cursor_execute(self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
                              many: bool) -> tuple[str, Any]:
        if getattr(cursor, "name", None):
            raise Refused(f"refused: a server-side cursor (stream_results) keeps a statement open past its timeout; "
                          f"fetch the result at once (it is capped at {MAX_ROWS:,} rows)", statement, parameters,
                          None)
        # What psycopg sends: a statement with parameters (an empty set too) has its placeholders and %% replaced;
        # SQLAlchemy's no_parameters option calls the driver without any, whatever it shows here.
        sent_as_is = parameters is None or (not parameters and getattr(context, "no_parameters", False))
        reading = gate.read(statement, placeholders=not sent_as_is)
        if reading.refusal and not reading.savepoint:
            raise Refused(reading.refusal, statement, parameters, None)
        dbapi_connection = cursor.connection
        if dbapi_connection.info.transaction_status == pq.TransactionStatus.IDLE:
            dbapi_connection.read_only = True  # whatever an execution option (postgresql_readonly) set
        if reading.savepoint:
            return statement, parameters  # a nested transaction's own, which must also run when it is aborted
        if dbapi_connection.autocommit:  # AUTOCOMMIT: this statement gets a transaction of its own, ended after
            dbapi_connection.autocommit = False  # idle, so read_only was set above
            conn.info[_EMULATED] = True
        dbapi_connection.execute(self.again, self.values)
        conn.info[_WATCHDOG].start(self.timeout)
        sent = capped(reading.body_of(statement), MAX_BYTES, MAX_ROWS) if reading.reads_rows else statement
        return sent, parameters

    def after_cursor_execute(self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
                             many: bool) -> None:
        conn.info[_WATCHDOG].stop()
        if conn.info.get(_EMULATED):  # the client cursor holds its rows: the transaction can end
            _end_emulated(cursor.connection, conn.info)
        if cursor.rowcount > MAX_ROWS:
            raise Refused(f"the result is too large: more than {MAX_ROWS:,} rows (stopped on the server); "
                          "aggregate, or add ORDER BY and LIMIT", statement, parameters, None)

    def handle_error(self, context: Any) -> None:
        if context.connection is not None and _WATCHDOG in context.connection.info:
            context.connection.info[_WATCHDOG].stop()
            if context.connection.info.get(_EMULATED):
                _end_emulated(context.connection.connection.dbapi_connection, context.connection.info)
        error = context.original_exception
        if isinstance(error, psycopg.Error) and (
                refused := gate.server_refusal(error) or too_large(error, MAX_BYTES)):
            raise Refused(refused, context.statement, context.parameters, error)

    def begin_twophase(self, conn: Any, xid: Any) -> None:
        # Its COMMIT is the driver's own, past the rollback that stands for every COMMIT here.
        raise Refused("refused: a two-phase transaction commits; the sandbox only reads, and never commits", None,
                      None, None)


def _end_emulated(dbapi_connection: psycopg.Connection, info: dict) -> None:
    """End the transaction begun for an AUTOCOMMIT statement, and give the connection its AUTOCOMMIT back."""
    info[_EMULATED] = False
    dbapi_connection.rollback()
    dbapi_connection.autocommit = True


def _never_commit(dbapi_connection: psycopg.Connection) -> None:
    """The dialect's COMMIT: a model's transaction only reads; rolled back, not even a NOTIFY that got past the
    gate goes out."""
    dbapi_connection.rollback()


def _discard_session(dbapi_connection: Any, record: Any, reset_state: Any) -> None:
    """Roll back, then forget what the statements left in the session (advisory locks, settings), as the
    runner does after each question. psycopg drops its prepared statements on DISCARD ALL."""
    dbapi_connection.rollback()
    if record.info.pop(_EMULATED, False):  # a statement that failed before its emulated transaction ended
        dbapi_connection.autocommit = True
    autocommit = dbapi_connection.autocommit
    dbapi_connection.autocommit = True
    dbapi_connection.execute("DISCARD ALL")
    dbapi_connection.autocommit = autocommit
    dbapi_connection.read_only = True
