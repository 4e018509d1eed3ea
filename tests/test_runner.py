"""Benchmark SQL cannot change the database or outlive its timeout."""

from __future__ import annotations

import _thread
import resource
import threading
import time

import psycopg
import pytest

from gsqa_core.db import with_user
from gsqa_core.roles import AUDIT_APPLICATION, audit
from gsqa_core.sandbox import READER, ROLES
from reproduce.dataset import Record
from reproduce.runner import TERMINATE_AFTER_S, WATCHDOG_GRACE_S, Runner, SandboxConnection


@pytest.fixture(scope="module")
def reader(initialized_dsn: str) -> str:
    with psycopg.connect(initialized_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pois (geometry, poi_name) VALUES ('POINT(1 2)', 'seed')")
    return with_user(initialized_dsn, READER.name, None)


def running_sandbox_queries(dsn: str) -> list[str]:
    """The queries running as either sandbox role in this database (not a preflight's audit)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT query FROM pg_stat_activity WHERE usename = ANY(%s) AND state = 'active' "
                            "AND pid <> pg_backend_pid() AND datname = current_database() "
                            "AND application_name <> %s", [[role.name for role in ROLES], AUDIT_APPLICATION]).fetchall()
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
    session = SandboxConnection(reader, timeout=1.0)
    outcome = session.run(statement)
    assert outcome.kind == "timeout" and 0.9 <= outcome.seconds < 2.5
    assert running_sandbox_queries(initialized_dsn) == []
    # The next question still gets its own timeout: nothing leaked from the one before.
    assert session.run("SELECT pg_sleep(30)").kind == "timeout"
    assert session.run("SELECT current_setting('statement_timeout') AS t").rows == [{"t": "1s"}]
    session.close()


def test_watchdog_cancels_on_the_server(reader: str, initialized_dsn: str) -> None:
    session = SandboxConnection(reader, timeout=60.0)  # the server would wait a minute
    threading.Timer(0.5, session.cancel).start()
    start = time.perf_counter()
    outcome = session.run("SELECT pg_sleep(30)")
    assert outcome.kind == "timeout" and "client watchdog" in outcome.error
    assert time.perf_counter() - start < 3
    assert running_sandbox_queries(initialized_dsn) == []
    assert session.run("SELECT 1 AS one").rows == [{"one": 1}]
    session.close()


# Catches every cancel (statement_timeout's and the watchdog's) and sleeps on: only ending the backend stops it.
# A function the administrator defined: the sandbox runs no DO block, but calling a function needs no USAGE
# on its language, and C functions that never check for a cancel behave the same.
STUBBORN = "SELECT stubborn_sleep()"


@pytest.fixture(scope="module")
def stubborn(initialized_dsn: str) -> None:
    with psycopg.connect(initialized_dsn, autocommit=True) as conn:
        conn.execute("CREATE FUNCTION stubborn_sleep() RETURNS void LANGUAGE plpgsql AS $$ BEGIN FOR i IN 1..600 LOOP "
                     "BEGIN PERFORM pg_sleep(0.1); EXCEPTION WHEN query_canceled THEN NULL; END; END LOOP; END $$")


@pytest.mark.usefixtures("stubborn")
def test_a_question_that_catches_the_cancel_is_ended_by_the_watchdog(reader: str, initialized_dsn: str) -> None:
    session = SandboxConnection(reader, timeout=1.0, admin=initialized_dsn)  # the reader itself may not end backends
    outcome = session.run(STUBBORN)  # 60 s if nothing ended it
    assert outcome.kind == "timeout" and "client watchdog" in outcome.error
    assert outcome.seconds < 1.0 + WATCHDOG_GRACE_S + TERMINATE_AFTER_S + 2
    assert running_sandbox_queries(initialized_dsn) == []
    assert session.run("SELECT 1 AS one").rows == [{"one": 1}]  # the next question gets a new connection
    session.close()


@pytest.mark.usefixtures("stubborn")
def test_ctrl_c_ends_a_question_that_catches_the_cancel(reader: str, initialized_dsn: str) -> None:
    record = Record("raster_only/elevation+poi/0", "R1", "raster_only", "elevation+poi", "", STUBBORN, "", [], {})
    threading.Timer(1.0, _thread.interrupt_main).start()
    start = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        list(Runner(reader, timeout=60.0, workers=1, admin=initialized_dsn).run([record]))
    assert time.perf_counter() - start < 1.0 + TERMINATE_AFTER_S + 2
    assert running_sandbox_queries(initialized_dsn) == []


ONLY_A_QUERY = "only a query runs here (SELECT, WITH, VALUES, TABLE)"
HIDDEN_DELETE = "WITH gone AS (DELETE FROM pois RETURNING 1) SELECT count(*) FROM gone"
SEVERAL = f"refused: several statements in one; {ONLY_A_QUERY}, one statement at a time"
READ_ONLY = "SELECT current_setting('transaction_read_only') AS read_only"


@pytest.mark.parametrize("statement, refusal", [
    ("DROP TABLE pois", f"refused: `DROP` changes the database; {ONLY_A_QUERY}"),
    ("SELECT 1; DELETE FROM pois", SEVERAL),
    ("COMMIT; DELETE FROM pois", SEVERAL),
    ("SET TRANSACTION READ WRITE; DELETE FROM pois", SEVERAL),
    ("RESET ROLE; DELETE FROM pois", SEVERAL),
    ("--\rDELETE FROM pois", f"refused: `DELETE` writes or moves data; {ONLY_A_QUERY}"),
    (HIDDEN_DELETE, f"refused: `DELETE` inside the query writes data; {ONLY_A_QUERY}"),
    ("SELECT set_config('default_transaction_read_only', 'off', false)", None),
])
def test_sql_cannot_change_the_database(reader: str, initialized_dsn: str, statement: str,
                                        refusal: str | None) -> None:
    before = database_state(initialized_dsn)
    session = SandboxConnection(reader, timeout=2.0)
    outcome = session.run(statement)
    follow_up = session.run(READ_ONLY)  # whatever the statement did to the session, the client begins READ ONLY
    session.close()
    assert (outcome.kind, outcome.error) == (("error", refusal) if refusal else ("rows", ""))
    assert (follow_up.kind, follow_up.rows) == ("rows", [{"read_only": "on"}])
    assert database_state(initialized_dsn) == before == (1, True)


def test_values_come_back_as_in_the_stored_answers(reader: str) -> None:
    session = SandboxConnection(reader, timeout=2.0)
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


# --- untrusted SQL must not exhaust the client or spoil other questions (issue 12) ----------------------------


def test_a_huge_result_stops_at_the_row_cap_in_bounded_memory(reader: str) -> None:
    session = SandboxConnection(reader, timeout=60.0, max_rows=100_000)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    outcome = session.run("SELECT g::float AS elevation FROM generate_series(1, 20000000) g")
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert outcome.kind == "error" and "the result is too large: stopped after 100,001 rows" in outcome.error
    assert grown_mb < 300, grown_mb  # all 20 M rows held took 10 GB
    assert session.run("SELECT 1 AS one").rows == [{"one": 1}]  # the rest was cancelled, the session is usable
    session.close()


def test_many_values_stop_at_the_byte_cap(reader: str) -> None:
    session = SandboxConnection(reader, timeout=60.0, max_bytes=10 * 1024**2)
    outcome = session.run("SELECT repeat('x', 1000000) AS elevation FROM generate_series(1, 50)")
    assert outcome.kind == "error" and "the result is too large: stopped after 11 rows and 11.0 MB" in outcome.error
    session.close()


def test_one_huge_value_stops_on_the_server_before_the_client_holds_it(reader: str) -> None:
    session = SandboxConnection(reader, timeout=60.0)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # 300 MB: the server measures the row as text beside the value (about 3 times its size), within the memory
    # a backend may take on any machine (at least 1.5 GB: sandbox.BACKEND_MEMORY_FLOOR_MB)
    outcome = session.run("SELECT 1 AS id, repeat('x', 300000000) AS elevation")
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert outcome.kind == "error" and "one row is 300.0 MB as text, past the cap of 67 MB" in outcome.error
    assert grown_mb < 100, grown_mb  # holding it would take the client more than 1.5 GB
    assert session.run("SELECT 1 AS one").rows == [{"one": 1}]
    session.close()


@pytest.mark.parametrize("statement, expected", [
    ("SELECT g AS n FROM generate_series(1, 4) g ORDER BY g DESC;", [{"n": 4}, {"n": 3}, {"n": 2}, {"n": 1}]),
    ("SELECT 1 AS a, 2 AS a", [{"a": 2}]),  # as before: the later column of a name wins
    ("SELECT NULL AS gone, 'kept' AS \"odd \"\"name\"", [{'odd "name': "kept"}]),
    ("SELECT 5 AS x -- a comment at the end", [{"x": 5}]),
    ("WITH t AS (SELECT 7 AS y) SELECT y FROM t", [{"y": 7}]),
    ("SELECT current_setting('transaction_read_only') AS q", [{"q": "on"}]),  # named as the cap's own subquery was
    ("SELECT 1.5 AS elevation; -- the model's last word", [{"elevation": 1.5}]),
])
def test_the_value_cap_leaves_results_as_they_are(reader: str, statement: str, expected: list[dict]) -> None:
    session = SandboxConnection(reader, timeout=10.0)
    assert session.run(statement).rows == expected
    session.close()


def test_sql_that_does_not_parse_fails_with_its_own_message(reader: str) -> None:
    session = SandboxConnection(reader, timeout=10.0)
    outcome = session.run("SELEC 1 AS elevation")
    assert outcome.kind == "error" and outcome.error == 'syntax error at or near "SELEC"'
    session.close()


def test_a_question_past_the_temp_file_limit_is_an_error_naming_it(initialized_dsn: str) -> None:
    # A login of this test's own with a 1 MB limit, to keep the test small (a sandbox role that stored one
    # would be refused as not declared).
    with psycopg.connect(initialized_dsn, autocommit=True) as conn:
        conn.execute("CREATE ROLE small_temp_files LOGIN; ALTER ROLE small_temp_files SET temp_file_limit = '1MB'")
    try:
        session = SandboxConnection(with_user(initialized_dsn, "small_temp_files", None), timeout=60.0)
        outcome = session.run("SELECT count(*) AS n FROM (SELECT g FROM generate_series(1, 3000000) g "
                              "ORDER BY md5(g::text)) s")
        session.close()
        assert outcome.kind == "error" and "temp_file_limit" in outcome.error, outcome
    finally:
        with psycopg.connect(initialized_dsn, autocommit=True) as conn:
            conn.execute("DROP ROLE small_temp_files")


def test_one_question_cannot_end_another(reader: str) -> None:
    hostile = Record("vector/range+count/0", "V23", "vector", "range+count", "", "SELECT count(pg_terminate_backend("
                     "pid)) AS count FROM pg_stat_activity WHERE usename = current_user AND pid <> pg_backend_pid()",
                     "", [], {})
    innocent = Record("raster_only/elevation+poi/0", "R1", "raster_only", "elevation+poi", "",
                      "SELECT pg_sleep(2)::text AS nap, 1 AS elevation", "", [], {})
    outcomes = {record.id: outcome for record, outcome in Runner(reader, timeout=30.0, workers=2).run([innocent,
                                                                                                           hostile])}
    assert outcomes[hostile.id].kind == "error" and "permission denied" in outcomes[hostile.id].error
    assert outcomes[innocent.id].kind == "rows" and outcomes[innocent.id].rows == [{"nap": "", "elevation": 1}]


@pytest.mark.parametrize("function", ["pg_advisory_lock", "pg_advisory_xact_lock", "pg_try_advisory_xact_lock_shared"])
def test_no_advisory_lock_can_be_taken_so_none_outlives_its_question_or_stops_a_build(reader: str,
                                                                                      function: str) -> None:
    session = SandboxConnection(reader, timeout=10.0)
    outcome = session.run(f"SELECT {function}(hashtext('gsqa ingest all'))::text AS taken")
    session.close()
    assert (outcome.kind, outcome.error) == ("error", f"refused: permission denied for function {function} (the "
                                                      "sandbox role may only read the reference tables)")


def test_a_question_ended_from_outside_runs_once_more(reader: str, initialized_dsn: str) -> None:
    session = SandboxConnection(reader, timeout=30.0)

    def end_it() -> None:
        with psycopg.connect(initialized_dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'gsqa_reader' "
                         "AND query LIKE '%%pg_sleep(1.5)%%' AND datname = current_database()")

    threading.Timer(0.5, end_it).start()
    outcome = session.run("SELECT pg_sleep(1.5)::text AS nap")
    assert outcome.kind == "rows" and outcome.rows == [{"nap": ""}]
    assert "ended from outside" in outcome.retried
    session.close()


def test_check_fails_where_a_reader_limit_is_missing(reader: str, initialized_dsn: str) -> None:
    assert audit(reader, READER).problem is None
    database = psycopg.conninfo.conninfo_to_dict(initialized_dsn)["dbname"]
    with psycopg.connect(initialized_dsn, autocommit=True) as conn:
        conn.execute(f"ALTER ROLE gsqa_reader IN DATABASE \"{database}\" SET temp_file_limit = -1")
        try:
            assert f"it stores temp_file_limit=-1 for database {database}" in audit(reader, READER).problem
        finally:
            conn.execute(f"ALTER ROLE gsqa_reader IN DATABASE \"{database}\" RESET temp_file_limit")
        conn.execute("GRANT EXECUTE ON FUNCTION pg_catalog.pg_terminate_backend(integer, bigint) TO PUBLIC")
        try:
            assert "it may execute pg_terminate_backend(integer, bigint)" in audit(reader, READER).problem
        finally:
            conn.execute("REVOKE EXECUTE ON FUNCTION pg_catalog.pg_terminate_backend(integer, bigint) FROM PUBLIC")


def test_long_values_are_cut_in_reports() -> None:
    from reproduce.session import REPORTED_CHARACTERS, clipped

    value = clipped({"expected": ["x" * 5_000_000, 1.5], "actual": "short"})
    assert value["actual"] == "short" and value["expected"][1] == 1.5
    assert len(value["expected"][0]) < REPORTED_CHARACTERS + 60 and "5,000,000 characters" in value["expected"][0]


def test_arrays_records_and_other_types_come_back_as_json_and_count_against_the_byte_cap(reader: str) -> None:
    session = SandboxConnection(reader, timeout=5.0, max_bytes=1_000_000)
    try:
        typed = session.run("SELECT int4range(1, 5) AS r, ARRAY[1, 2] AS a, ROW(1, 'x') AS t, "
                            "'NaN'::float8 AS nan, '{\"k\": [1]}'::jsonb AS j")
        assert typed.rows == [{"r": "[1, 5)", "a": [1, 2], "t": ["1", "x"], "nan": "nan", "j": {"k": [1]}}]
        big = session.run("SELECT ARRAY[repeat('x', 400000)] AS a FROM generate_series(1, 5)")
        assert big.kind == "error" and big.error.startswith("the result is too large: stopped after 3 rows")
    finally:
        session.close()
