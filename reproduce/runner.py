"""Run SQL we did not write safely: as a sandbox role, one query, one transaction, bounded in time.

Each question runs on a worker connection logged in as a sandbox role (gold SQL as gsqa_reader, a model's as
gsqa_model: gsqa_core/sandbox.py), in its own transaction, which the client begins READ ONLY (so a statement
that switched the session's default off still cannot write), starts with SET LOCAL statement_timeout (so a
question that changes the setting cannot affect the next one) and always ends in ROLLBACK. A statement that
is not one query is refused without running, and the server's refusals are worded in one line (gate.py). The
SQL is sent with the extended protocol, which refuses more than one statement. A client watchdog
(`Watchdog`, which engine() uses too) cancels on the server if the server-side timeout did not fire
(statement_timeout acts only where the backend checks for interrupts), and ends the backend if the SQL catches
that cancel too. N workers pull from one queue; closing the iterator early (Ctrl-C) cancels whatever is still
running, the same way. The workers do not serialise: each has its own connection, and psycopg releases the GIL
while the server works (docs/PERFORMANCE.md, "2 workers").

Untrusted SQL must not exhaust the client or spoil other questions: rows are streamed and capped
(MAX_ROWS, MAX_BYTES: beyond them the question stops at once as an error saying how much was read), and
reading them counts against the timeout; the same caps hold on the server (`capped`: the rows' size as text,
what the client will receive, counted as they are made), since the client holds a whole row before it can
count it; after each question the
session is reset (DISCARD ALL: settings, temp state, prepared statements); the roles may not signal other
backends (ingest init revokes pg_cancel_backend/pg_terminate_backend from PUBLIC), so the watchdog ends a
runaway backend through the admin connection; a question whose connection was ended from outside is run once
more on a fresh connection, and says so. A backend's memory is bounded by the server (docs/SANDBOX.md): past
it the statement fails with "out of memory" and the session goes on.

Several servers (a primary and its hot standbys, `Server`) share one queue: each has its own workers, each
question runs on exactly one server and its outcome names it. A server that cannot be reached any more
(the fresh connection of the retry fails) gives its questions back to the front of the queue for the others
and stops taking new ones; if every server is gone, the run ends with AllServersLost after the outcomes it
has, so that a --resume file continues later.
"""

from __future__ import annotations

import collections
import datetime
import decimal
import math
import queue
import re
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import psycopg
from psycopg import sql

from gsqa_core.errors import EXIT_SOME_FAILED, GsqaError
from gsqa_core.roles import refuse_tampered
from reproduce import gate
from reproduce.dataset import Record

MIN_TIMEOUT_S = 0.1  # the shortest statement timeout a run or engine() accepts
DEFAULT_TIMEOUT_S = 120  # each statement's timeout unless the caller says otherwise (every command, engine())
MAX_TIMEOUT_S = 2_147_483.647  # the longest statement_timeout PostgreSQL takes (2^31 - 1 ms)
WATCHDOG_GRACE_S = 2.0  # the server's own timeout gets this long before the client cancels
CANCEL_WAIT_S = 5.0
# A statement can catch the cancel (a DO block with EXCEPTION WHEN query_canceled) and go on: if the same
# question still runs this long after the cancel, its backend is terminated.
TERMINATE_AFTER_S = 2.0
# The largest stored answer has 6,885 rows (a V25 record); a result past these stops as an error.
MAX_ROWS = 100_000
MAX_BYTES = 64 * 1024**2  # of values, as text; also the cap of one value (its size on the server)
VALUE_CAP_MARK = "gsqa value cap:"  # in the error the server raises for a value past the cap


@dataclass(frozen=True)
class Outcome:
    """What one SQL gave: its rows (NULL columns dropped, as in the stored answers), or why not."""

    kind: str  # rows, timeout or error
    seconds: float
    rows: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""
    retried: str = ""  # why the question ran a second time, if it did
    server: str = ""  # the name of the server that answered (Server.name)
    candidate: int = 0  # which of the question's statements gave this outcome (0: the first)
    truncated: bool = False  # more rows than max_rows came back and only the first max_rows were read (truncate)


class ResultTooLarge(Exception):
    """A result past the row or byte cap: reading stops at once."""


class LoadTimedOut(Exception):
    """The rows were still arriving (or being converted) after the statement's timeout."""


class ServerLost(GsqaError):
    """The reader cannot connect to a server (any more)."""


class AllServersLost(GsqaError):
    """Every server was lost during the run: the outcomes had so far were yielded, the rest never ran."""

    exit_code = EXIT_SOME_FAILED


@dataclass(frozen=True)
class Server:
    """A PostgreSQL server that answers questions: `login` is the sandbox role's DSN there, `admin` a DSN
    that may end the role's backends (the watchdog's last resort), `name` what reports call it."""

    name: str
    login: str
    admin: str | None = None


def json_value(value: Any) -> Any:
    """Database values as the answers store them, and as JSON can carry them: numerics as floats, geometry as
    hex EWKB text, arrays and records as lists, NaN and infinities and any other type (ranges, addresses,
    dates) as their text."""
    if isinstance(value, decimal.Decimal):
        value = float(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, str | int | float):  # bool is an int
        return value
    if isinstance(value, (bytes, memoryview)):
        return bytes(value).hex()
    if isinstance(value, list | tuple):
        return [json_value(item) for item in value]
    if isinstance(value, dict):  # json and jsonb
        return {str(key): json_value(item) for key, item in value.items()}
    return str(value)


def _size(value: Any) -> int:
    """What a value costs to hold, about: its characters, 8 for a number, the sum for a list or an object."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return 8 + sum(_size(item) for item in value)
    if isinstance(value, dict):
        return 8 + sum(len(key) + _size(item) for key, item in value.items())
    return 8


class Watchdog:
    """The client's backstop for one statement on `conn`: past its time plus WATCHDOG_GRACE_S it cancels the
    statement on the server (statement_timeout acts only where the backend checks for interrupts); if the same
    statement still runs TERMINATE_AFTER_S later (it caught the cancel) or the cancel cannot be delivered, it
    ends the backend through `admin` (the sandbox roles may not signal backends, not even their own). The
    runner's connections and engine() both use it."""

    def __init__(self, conn: psycopg.Connection, admin: str | None) -> None:
        self.conn, self.admin = conn, admin
        self.fired = False
        self._timer: threading.Timer | None = None
        self._watching = 0  # the number of the statement watched now, 0 for none
        self._statements = 0

    def start(self, seconds: float) -> None:
        self.stop()
        self.fired = False
        self._statements += 1
        self._watching = self._statements
        self._timer = threading.Timer(seconds + WATCHDOG_GRACE_S, self.cancel)
        self._timer.daemon = True
        self._timer.start()

    def stop(self) -> None:
        self._watching = 0
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def cancel(self) -> None:
        """Cancel the running statement on the server now (also when the run is interrupted)."""
        self.fired = True
        statement = self._watching
        try:
            self.conn.cancel_safe(timeout=CANCEL_WAIT_S)
        except (psycopg.Error, OSError):
            self._terminate()
            return
        if statement:
            check = threading.Timer(TERMINATE_AFTER_S, self._terminate_if_running, [statement])
            check.daemon = True
            check.start()

    def _terminate_if_running(self, statement: int) -> None:
        if self._watching == statement:
            self._terminate()

    def _terminate(self) -> None:
        pid = self.conn.info.backend_pid
        try:
            with psycopg.connect(self.admin or self.conn.info.dsn, autocommit=True, connect_timeout=5) as other:
                other.execute("SELECT pg_terminate_backend(%s)", [pid])
        except psycopg.Error:
            pass  # the server is gone too: nothing is left running there


class SandboxConnection:
    """One worker connection as a sandbox role; `admin` (a DSN that may end the role's backends) is used
    only to end a question that catches the cancel. With `truncate`, a result past max_rows gives its first
    max_rows rows, marked truncated, instead of an error (an agent's exploratory query)."""

    application_name = "gsqa-reproduce"  # what pg_stat_activity shows for the connection
    keep_nulls = False  # the stored answers leave NULL columns out, and so do the rows judged against them
    convert = staticmethod(json_value)  # a value as the rows keep it: as the stored answers hold theirs

    def __init__(self, dsn: str, timeout: float, admin: str | None = None, max_rows: int = MAX_ROWS,
                 max_bytes: int = MAX_BYTES, truncate: bool = False) -> None:
        self.dsn, self.timeout, self.admin = dsn, timeout, admin
        self.max_rows, self.max_bytes, self.truncate = max_rows, max_bytes, truncate
        self.conn = self._connect()
        self.watchdog = Watchdog(self.conn, admin)

    def _connect(self) -> psycopg.Connection:
        try:
            # No automatic prepared statements: DISCARD ALL after each question would drop them.
            conn = psycopg.connect(self.dsn, application_name=self.application_name, prepare_threshold=None,
                                   connect_timeout=10)
        except psycopg.OperationalError as error:
            raise ServerLost(f"the sandbox role cannot connect: {' '.join(str(error).split())}") from None
        try:
            refuse_tampered(conn)
        except GsqaError as error:
            conn.close()
            raise ServerLost(str(error)) from None
        conn.rollback()  # the check's transaction: each question begins its own
        # Every transaction begins READ ONLY (psycopg sends BEGIN READ ONLY), whatever the session's default
        # says: a statement may switch default_transaction_read_only off, but not the client's BEGIN.
        conn.read_only = True
        return conn

    def run_first(self, statements: Sequence[str]) -> Outcome:
        """Run the statements in order, each as `run` runs one, until one does not fail with an error: a
        model's text may hold several SQL blocks, and the first that runs is its answer. A timeout ends the
        attempts (the question's time is spent)."""
        outcome, spent = Outcome("error", 0.0, error="no SQL to run"), 0.0
        for number, statement in enumerate(statements):
            outcome = replace(self.run(statement), candidate=number)
            spent += outcome.seconds
            if outcome.kind != "error":
                break
        return replace(outcome, seconds=spent)

    def run(self, statement: str) -> Outcome:
        """Run one question's SQL and roll back, whatever it did; once more if its connection was ended from
        outside (not by our watchdog). A statement that is not a query is refused without running (gate.py)."""
        reading = gate.read(statement)
        if reading.refusal:
            return Outcome("error", 0.0, error=reading.refusal)
        sent = capped(reading.body, self.max_bytes, self.max_rows) if reading.reads_rows else statement
        outcome = self._run_once(sent)
        if outcome.kind == "error" and self.conn.closed and not self.watchdog.fired:
            again = self._run_once(sent)
            return replace(again, retried=f"the first run's connection was ended from outside ({outcome.error})")
        return outcome

    def _run_once(self, statement: str) -> Outcome:
        if self.conn.closed:
            self.conn = self._connect()
            self.watchdog = Watchdog(self.conn, self.admin)
        start = time.perf_counter()
        try:
            with self.conn.cursor() as cur:
                limit = sql.Literal(f"{round(self.timeout * 1000)}ms")
                cur.execute(sql.SQL("SET LOCAL statement_timeout = {}").format(limit))
                self.watchdog.start(self.timeout)
                rows, truncated = self._fetch(cur, statement, deadline=start + self.timeout)
            return Outcome("rows", time.perf_counter() - start, rows, truncated=truncated)
        except ResultTooLarge as error:
            return Outcome("error", time.perf_counter() - start, error=str(error))
        except LoadTimedOut as error:
            return Outcome("timeout", time.perf_counter() - start, error=str(error))
        except psycopg.Error as error:
            if refused := too_large(error, self.max_bytes):
                return Outcome("error", time.perf_counter() - start, error=refused)
            # A terminated backend surfaces as a lost connection: still the watchdog's timeout.
            if self.watchdog.fired or isinstance(error, psycopg.errors.QueryCanceled):
                who = "the client watchdog" if self.watchdog.fired else "statement_timeout"
                return Outcome("timeout", time.perf_counter() - start, error=f"cancelled by {who}: {_message(error)}")
            return Outcome("error", time.perf_counter() - start, error=self.describe(error, statement))
        finally:
            self.watchdog.stop()
            self._reset()

    def _fetch(self, cur: psycopg.Cursor, statement: str, deadline: float) -> tuple[list[dict[str, Any]], bool]:
        """The rows, streamed (the extended protocol: exactly one statement), and whether
        rows past max_rows were left unread (truncate); ResultTooLarge past the caps, LoadTimedOut past the
        deadline (reading and converting rows counts against the timeout), after which psycopg cancels the rest
        on the server."""
        rows: list[dict[str, Any]] = []
        size, names = 0, None
        for row in cur.stream(statement):
            if names is None:
                names = [column.name for column in cur.description]
            values = {name: self.convert(value) for name, value in zip(names, row, strict=True)
                      if value is not None or self.keep_nulls}
            if len(rows) == self.max_rows and self.truncate:
                return rows, True  # closing the stream cancels the rest on the server
            size += 8 + sum(_size(value) for value in values.values())  # a row of NULLs costs something too
            rows.append(values)
            if len(rows) > self.max_rows or size > self.max_bytes:
                raise ResultTooLarge(
                    f"the result is too large: stopped after {len(rows):,} rows and {size / 1e6:,.1f} MB of values "
                    f"(caps: {self.max_rows:,} rows, {self.max_bytes / 1e6:,.0f} MB; --max-rows raises the first)")
            if time.perf_counter() > deadline:
                raise LoadTimedOut(f"cancelled by the client: the rows were still arriving after the timeout of "
                                   f"{self.timeout:g} s ({len(rows):,} rows read)")
        return rows, False

    def describe(self, error: psycopg.Error, sent: str) -> str:
        """A failed statement's error in one line (`sent`: the SQL as sent; serve's connection says more)."""
        return _message(error)

    def _reset(self) -> None:
        """Roll back, then forget what the question left in the session (advisory locks, settings, temp
        objects, prepared statements)."""
        if self.conn.closed:
            return
        try:
            self.conn.rollback()
            self.conn.autocommit = True
            self.conn.execute("DISCARD ALL")
            self.conn.autocommit = False
        except psycopg.Error:
            self.conn.close()  # the next question reconnects

    def cancel(self) -> None:
        """Cancel the running query on the server (the run is interrupted)."""
        self.watchdog.cancel()

    def close(self) -> None:
        self.conn.close()


def capped(body: str, max_bytes: int, max_rows: int) -> str:
    """A SELECT (the body of a gate.Reading that reads_rows) as a query of the same columns, names and rows in the
    same order that the server stops with an error (too_large) once its rows are past max_bytes as text, what
    the client will receive (a bit string is 8 times larger as text than stored, an array of NULLs 40 times),
    and that stops after max_rows + 1 rows. The client never holds more.

    The SQL stays a subquery of its own behind OFFSET 0 (pulled up, its output expressions would be computed
    again for each use); each row is made one composite value once, whose text is measured once (a row over
    the cap stops before anything keeps it), counted by a running sum, and taken apart into its columns again,
    so no column name needs to be known; the checks see only the rows the SQL returns (nothing is pushed into
    it past the fence)."""
    # The aliases are names no query of the benchmark's uses: a column of the SQL named like the subquery's
    # alias would be taken for the whole row.
    row_over = f"('{VALUE_CAP_MARK} row ' || gsqa_s.gsqa_size)::int > 0"
    rows_over = f"('{VALUE_CAP_MARK} ' || gsqa_w.gsqa_n || ' ' || gsqa_w.gsqa_seen)::int > 0"
    return (f"SELECT (gsqa_w.gsqa_r).* FROM (SELECT gsqa_s.gsqa_r, sum(gsqa_s.gsqa_size) OVER so_far AS gsqa_seen, "
            f"count(*) OVER so_far AS gsqa_n FROM (SELECT gsqa_z.gsqa_r, octet_length(gsqa_z.gsqa_r::text) AS "
            f"gsqa_size FROM (SELECT gsqa_q AS gsqa_r FROM ({body}\n) AS gsqa_q OFFSET 0) AS gsqa_z OFFSET 0) "
            f"AS gsqa_s WHERE CASE WHEN gsqa_s.gsqa_size > {max_bytes} THEN {row_over} ELSE true END "
            f"WINDOW so_far AS (ROWS UNBOUNDED PRECEDING)) AS gsqa_w "
            f"WHERE CASE WHEN gsqa_w.gsqa_seen > {max_bytes} THEN {rows_over} ELSE true END LIMIT {max_rows + 1}")


def too_large(error: psycopg.Error, max_bytes: int) -> str | None:
    """The one line for the server's stop of a capped query (None for any other error)."""
    if not isinstance(error, psycopg.errors.InvalidTextRepresentation) or VALUE_CAP_MARK not in str(error):
        return None
    rows, size = re.search(re.escape(VALUE_CAP_MARK) + r" (row|\d+) (\d+)", str(error)).groups()
    cap = f"past the cap of {max_bytes / 1e6:,.0f} MB (stopped on the server)"
    if rows == "row":
        return f"the result is too large: one row is {int(size) / 1e6:,.1f} MB as text, {cap}"
    return f"the result is too large: stopped after {int(rows):,} rows and {int(size) / 1e6:,.1f} MB as text, {cap}"


def _message(error: psycopg.Error) -> str:
    """One line: the server's refusal as the gate words it, else its primary message."""
    primary = error.diag.message_primary if error.diag else None
    return gate.server_refusal(error) or " ".join((primary or str(error) or type(error).__name__).split())


class Runner:
    """`workers` connections per server pulling from one queue of questions, taken in the order given."""

    def __init__(self, dsn: str, timeout: float, workers: int, admin: str | None = None,
                 max_rows: int = MAX_ROWS, replicas: Sequence[Server] = (), name: str = "primary") -> None:
        self.servers = [Server(name, dsn, admin), *replicas]
        self.timeout, self.workers, self.max_rows = timeout, max(1, workers), max_rows
        self.lost: dict[str, str] = {}  # server name -> when and why it was lost

    def run(self, records: Iterable[Record]) -> Iterator[tuple[Record, Outcome]]:
        """(record, outcome) as questions finish. Closing the iterator early cancels running queries."""
        tasks = _Tasks(records)
        total = len(tasks)
        connections = [SandboxConnection(server.login, self.timeout, server.admin, self.max_rows)
                       for server in self.servers for _ in range(min(self.workers, total))]
        names = [server.name for server in self.servers for _ in range(min(self.workers, total))]
        results: queue.Queue[tuple[Record, Outcome]] = queue.Queue()
        stop = threading.Event()
        threads = [threading.Thread(target=self._work, args=(connection, name, tasks, results, stop), daemon=True)
                   for connection, name in zip(connections, names, strict=True)]
        for thread in threads:
            thread.start()
        try:
            for _ in range(total):
                yield _next_result(results, threads)
        finally:
            _shut_down(connections, threads, stop)

    def _work(self, connection: SandboxConnection, server: str, tasks: _Tasks, results: queue.Queue,
              stop: threading.Event) -> None:
        while not stop.is_set() and server not in self.lost:
            record = tasks.take(stop)
            if record is None:
                return
            try:
                outcome = replace(connection.run_first(record.statements), server=server)
            except ServerLost as error:
                self._lose(server, str(error))
                tasks.give_back(record)
                return
            except Exception as error:  # noqa: BLE001 - a dead worker would hang the run; report it per question
                outcome = Outcome("error", 0.0, error=f"{type(error).__name__}: {error}", server=server)
            if not stop.is_set():  # an interrupted question is not a result: a resumed run repeats it
                results.put((record, outcome))
            tasks.finished()

    def _lose(self, server: str, why: str) -> None:
        if server not in self.lost:
            when = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
            self.lost[server] = f"lost at {when}: {why}"
            others = len(self.servers) - len(self.lost)
            print(f"warning: server {server} {self.lost[server]}; its questions go to the other {others} "
                  f"server{'s' * (others != 1)}", file=sys.stderr)


class _Tasks:
    """The questions still to run, in order. One given back (its server was lost) goes first again; a worker
    waits while others still run questions, since one of those may be given back."""

    def __init__(self, records: Iterable[Record]) -> None:
        self._queue = collections.deque(records)
        self._running = 0
        self._changed = threading.Condition()

    def __len__(self) -> int:
        return len(self._queue)

    def take(self, stop: threading.Event) -> Record | None:
        """The next question, or None once there is none left to run (or the run stops)."""
        with self._changed:
            while not self._queue and self._running and not stop.is_set():
                self._changed.wait(0.2)
            if not self._queue or stop.is_set():
                return None
            self._running += 1
            return self._queue.popleft()

    def finished(self) -> None:
        with self._changed:
            self._running -= 1
            self._changed.notify_all()

    def give_back(self, record: Record) -> None:
        with self._changed:
            self._queue.appendleft(record)
            self._running -= 1
            self._changed.notify_all()


def _next_result(results: queue.Queue, threads: list[threading.Thread]) -> tuple[Record, Outcome]:
    while True:  # a short timeout keeps the main thread responsive to Ctrl-C
        try:
            return results.get(timeout=0.2)
        except queue.Empty:
            if not any(thread.is_alive() for thread in threads) and results.empty():
                raise AllServersLost("every server was lost before the run ended (warnings above); rerun with "
                                     "--resume FILE to run only the questions that have no result") from None


def _shut_down(connections: list[SandboxConnection], threads: list[threading.Thread],
               stop: threading.Event) -> None:
    stop.set()
    for connection, thread in zip(connections, threads, strict=True):
        if thread.is_alive():
            connection.cancel()
    for thread in threads:
        thread.join()
    for connection in connections:
        connection.close()
