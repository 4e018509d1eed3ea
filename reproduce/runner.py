"""Run benchmark SQL safely: as gsqa_reader, one statement, one transaction, bounded in time.

Each question runs on a worker connection logged in as the read-only role, in its own transaction that
starts with SET LOCAL statement_timeout (so a question that changes the setting cannot affect the next
one) and always ends in ROLLBACK. The SQL is sent with the extended protocol (a prepared statement), which
refuses more than one statement, so "COMMIT; DELETE ..." is an error and nothing of it runs. A client
watchdog cancels on the server if the server-side timeout did not fire (statement_timeout acts only where
the backend checks for interrupts), and ends the backend if the SQL catches that cancel too. N workers pull
from one queue; closing the iterator early (Ctrl-C) cancels whatever is still running, the same way.
"""

from __future__ import annotations

import datetime
import decimal
import queue
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from ingest.errors import GsqaError
from reproduce.dataset import Record

WATCHDOG_GRACE_S = 2.0  # the server's own timeout gets this long before the client cancels
CANCEL_WAIT_S = 5.0
# A statement can catch the cancel (a DO block with EXCEPTION WHEN query_canceled) and go on: if the same
# question still runs this long after the cancel, its backend is terminated.
TERMINATE_AFTER_S = 2.0


@dataclass(frozen=True)
class Outcome:
    """What one SQL gave: its rows (NULL columns dropped, as in the stored answers), or why not."""

    kind: str  # rows, timeout or error
    seconds: float
    rows: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""


def _json_value(value: Any) -> Any:
    """Database values as the answers store them: numerics as floats, geometry as hex EWKB text."""
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, (bytes, memoryview)):
        return bytes(value).hex()
    if isinstance(value, (datetime.date, datetime.time, datetime.timedelta, uuid.UUID)):
        return str(value)
    return value


class Session:
    """One worker connection as the reader role."""

    def __init__(self, dsn: str, timeout: float) -> None:
        self.dsn, self.timeout = dsn, timeout
        self.conn = self._connect()
        self.watchdog_fired = False
        self.running: int | None = None  # the number of the question on the server now, if any
        self._questions = 0

    def _connect(self) -> psycopg.Connection:
        try:
            return psycopg.connect(self.dsn, application_name="gsqa-reproduce")
        except psycopg.OperationalError as error:
            raise GsqaError(f"the reader role cannot connect: {' '.join(str(error).split())}") from None

    def run(self, statement: str) -> Outcome:
        """Run one question's SQL and roll back, whatever it did."""
        if self.conn.closed:
            self.conn = self._connect()
        start = time.perf_counter()
        self.watchdog_fired = False
        self._questions += 1
        self.running = self._questions
        watchdog = threading.Timer(self.timeout + WATCHDOG_GRACE_S, self.cancel)
        try:
            with self.conn.cursor() as cur:
                limit = sql.Literal(f"{round(self.timeout * 1000)}ms")
                cur.execute(sql.SQL("SET LOCAL statement_timeout = {}").format(limit))
                watchdog.start()
                cur.execute(statement, prepare=True)  # extended protocol: exactly one statement
                rows = self._fetch(cur)
            return Outcome("rows", time.perf_counter() - start, rows)
        except psycopg.Error as error:
            # A terminated backend surfaces as a lost connection: still the watchdog's timeout.
            if self.watchdog_fired or isinstance(error, psycopg.errors.QueryCanceled):
                who = "the client watchdog" if self.watchdog_fired else "statement_timeout"
                return Outcome("timeout", time.perf_counter() - start, error=f"cancelled by {who}: {_message(error)}")
            return Outcome("error", time.perf_counter() - start, error=_message(error))
        finally:
            self.running = None
            watchdog.cancel()
            self._rollback()

    @staticmethod
    def _fetch(cur: psycopg.Cursor) -> list[dict[str, Any]]:
        if cur.description is None:  # not a query (e.g. a lone SET or COMMIT): no result rows
            return []
        names = [column.name for column in cur.description]
        return [{name: _json_value(value) for name, value in zip(names, row, strict=True) if value is not None}
                for row in cur.fetchall()]

    def _rollback(self) -> None:
        if self.conn.closed:
            return
        try:
            self.conn.rollback()
        except psycopg.OperationalError:
            self.conn.close()  # the next question reconnects

    def cancel(self) -> None:
        """Cancel the running query on the server; end the backend if the cancel cannot be delivered, or if
        the same question is still running TERMINATE_AFTER_S later (it caught the cancel)."""
        self.watchdog_fired = True
        question = self.running
        try:
            self.conn.cancel_safe(timeout=CANCEL_WAIT_S)
        except (psycopg.Error, OSError):
            self._terminate()
            return
        if question is not None:
            check = threading.Timer(TERMINATE_AFTER_S, self._terminate_if_running, [question])
            check.daemon = True
            check.start()

    def _terminate_if_running(self, question: int) -> None:
        if self.running == question:
            self._terminate()

    def _terminate(self) -> None:
        pid = self.conn.info.backend_pid
        try:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as other:
                other.execute("SELECT pg_terminate_backend(%s)", [pid])  # allowed on one's own role's backends
        except psycopg.Error:
            pass  # the server is gone too: nothing is left running there

    def close(self) -> None:
        self.conn.close()


def _message(error: psycopg.Error) -> str:
    primary = error.diag.message_primary if error.diag else None
    return " ".join((primary or str(error) or type(error).__name__).split())


class Runner:
    """N sessions pulling from one queue of questions."""

    def __init__(self, dsn: str, timeout: float, workers: int) -> None:
        self.dsn, self.timeout, self.workers = dsn, timeout, max(1, workers)

    def run(self, records: Iterable[Record]) -> Iterator[tuple[Record, Outcome]]:
        """(record, outcome) as questions finish. Closing the iterator early cancels running queries."""
        tasks: queue.Queue[Record] = queue.Queue()
        for record in records:
            tasks.put(record)
        total = tasks.qsize()
        sessions = [Session(self.dsn, self.timeout) for _ in range(min(self.workers, total))]
        results: queue.Queue[tuple[Record, Outcome]] = queue.Queue()
        stop = threading.Event()
        threads = [threading.Thread(target=_work, args=(s, tasks, results, stop), daemon=True) for s in sessions]
        for thread in threads:
            thread.start()
        try:
            for _ in range(total):
                yield _next_result(results)
        finally:
            _shut_down(sessions, threads, stop)


def _next_result(results: queue.Queue) -> tuple[Record, Outcome]:
    while True:  # a short timeout keeps the main thread responsive to Ctrl-C
        try:
            return results.get(timeout=0.2)
        except queue.Empty:
            continue


def _work(session: Session, tasks: queue.Queue, results: queue.Queue, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            record = tasks.get_nowait()
        except queue.Empty:
            return
        try:
            outcome = session.run(record.sql)
        except Exception as error:  # noqa: BLE001 - a dead worker would hang the run; report it per question
            outcome = Outcome("error", 0.0, error=f"{type(error).__name__}: {error}")
        if not stop.is_set():  # an interrupted question is not a result: a resumed run repeats it
            results.put((record, outcome))


def _shut_down(sessions: list[Session], threads: list[threading.Thread], stop: threading.Event) -> None:
    stop.set()
    for session, thread in zip(sessions, threads, strict=True):
        if thread.is_alive():
            session.cancel()
    for thread in threads:
        thread.join()
    for session in sessions:
        session.close()
