"""Benchmark SQL cannot change the database or outlive its timeout."""

from __future__ import annotations

import _thread
import threading
import time

import psycopg
import pytest

from ingest.db import with_user
from ingest.schema import READER_ROLE
from reproduce.dataset import Record
from reproduce.runner import TERMINATE_AFTER_S, WATCHDOG_GRACE_S, Runner, Session


@pytest.fixture(scope="module")
def reader(initialized_dsn: str) -> str:
    with psycopg.connect(initialized_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pois (geometry, poi_name) VALUES ('POINT(1 2)', 'seed')")
    return with_user(initialized_dsn, READER_ROLE, None)


def running_reader_queries(dsn: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT query FROM pg_stat_activity WHERE usename = %s AND state = 'active' "
                            "AND pid <> pg_backend_pid() AND datname = current_database()", [READER_ROLE]).fetchall()
    return [row[0] for row in rows]


def database_state(dsn: str) -> tuple[int, bool]:
    with psycopg.connect(dsn) as conn:
        count = conn.execute("SELECT count(*) FROM pois").fetchone()[0]
        exists = conn.execute("SELECT to_regclass('public.pois') IS NOT NULL").fetchone()[0]
    return count, exists


@pytest.mark.parametrize("statement", [
    "SELECT pg_sleep(30)",
    "SELECT set_config('statement_timeout', '0', false), pg_sleep(30)",
])
def test_timeout_is_enforced_on_the_server(reader: str, initialized_dsn: str, statement: str) -> None:
    session = Session(reader, timeout=1.0)
    outcome = session.run(statement)
    assert outcome.kind == "timeout" and 0.9 <= outcome.seconds < 2.5
    assert running_reader_queries(initialized_dsn) == []
    # The next question still gets its own timeout: nothing leaked from the one before.
    assert session.run("SELECT pg_sleep(30)").kind == "timeout"
    assert session.run("SELECT current_setting('statement_timeout') AS t").rows == [{"t": "1s"}]
    session.close()


def test_watchdog_cancels_on_the_server(reader: str, initialized_dsn: str) -> None:
    session = Session(reader, timeout=60.0)  # the server would wait a minute
    threading.Timer(0.5, session.cancel).start()
    start = time.perf_counter()
    outcome = session.run("SELECT pg_sleep(30)")
    assert outcome.kind == "timeout" and "client watchdog" in outcome.error
    assert time.perf_counter() - start < 3
    assert running_reader_queries(initialized_dsn) == []
    assert session.run("SELECT 1 AS one").rows == [{"one": 1}]
    session.close()


# Catches every cancel (statement_timeout's and the watchdog's) and sleeps on: only ending the backend stops it.
STUBBORN = ("DO $$ BEGIN FOR i IN 1..600 LOOP BEGIN PERFORM pg_sleep(0.1); EXCEPTION WHEN query_canceled THEN "
            "NULL; END; END LOOP; END $$")


def test_a_question_that_catches_the_cancel_is_ended_by_the_watchdog(reader: str, initialized_dsn: str) -> None:
    session = Session(reader, timeout=1.0)
    outcome = session.run(STUBBORN)  # 60 s if nothing ended it
    assert outcome.kind == "timeout" and "client watchdog" in outcome.error
    assert outcome.seconds < 1.0 + WATCHDOG_GRACE_S + TERMINATE_AFTER_S + 2
    assert running_reader_queries(initialized_dsn) == []
    assert session.run("SELECT 1 AS one").rows == [{"one": 1}]  # the next question gets a new connection
    session.close()


def test_ctrl_c_ends_a_question_that_catches_the_cancel(reader: str, initialized_dsn: str) -> None:
    record = Record("raster_only/elevation+poi/0", "R1", "raster_only", "elevation+poi", "", STUBBORN, "", [], {})
    threading.Timer(1.0, _thread.interrupt_main).start()
    start = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        list(Runner(reader, timeout=60.0, workers=1).run([record]))
    assert time.perf_counter() - start < 1.0 + TERMINATE_AFTER_S + 2
    assert running_reader_queries(initialized_dsn) == []


@pytest.mark.parametrize("statement", [
    "DROP TABLE pois",
    "SELECT 1; DELETE FROM pois",
    "COMMIT; DELETE FROM pois",
    "SET TRANSACTION READ WRITE; DELETE FROM pois",
    "RESET ROLE; DELETE FROM pois",
    "RESET ROLE",
    "WITH gone AS (DELETE FROM pois RETURNING 1) SELECT count(*) FROM gone",
    "SET default_transaction_read_only = off",
])
def test_sql_cannot_change_the_database(reader: str, initialized_dsn: str, statement: str) -> None:
    before = database_state(initialized_dsn)
    session = Session(reader, timeout=2.0)
    outcome = session.run(statement)
    follow_up = session.run("DELETE FROM pois")  # whatever the statement did to the session, writes still fail
    session.close()
    assert outcome.kind in ("error", "rows") and follow_up.kind == "error"
    if ";" in statement:
        assert "multiple commands" in outcome.error
    assert database_state(initialized_dsn) == before == (1, True)


def test_values_come_back_as_in_the_stored_answers(reader: str) -> None:
    session = Session(reader, timeout=2.0)
    outcome = session.run("SELECT 2.5::numeric AS n, NULL AS gone, geometry, 'a%b' LIKE '%b' AS percent FROM pois")
    session.close()
    assert outcome.rows == [{"n": 2.5, "geometry": "0101000020E6100000000000000000F03F0000000000000040",
                             "percent": True}]


def test_workers_share_one_queue(reader: str) -> None:
    statement = "SELECT {} AS elevation, pg_backend_pid() AS pid, pg_sleep(0.05)"
    records = [Record(f"raster_only/elevation+poi/{n}", "R1", "raster_only", "elevation+poi", "",
                      statement.format(n), "", [], {}) for n in range(12)]
    results = list(Runner(reader, timeout=2.0, workers=3).run(records))
    assert sorted(outcome.rows[0]["elevation"] for _, outcome in results) == list(range(12))
    assert len({outcome.rows[0]["pid"] for _, outcome in results}) == 3
