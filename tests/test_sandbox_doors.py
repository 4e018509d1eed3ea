"""Hostile SQL through every door we give a model, against the real server: `reproduce.baseline.engine()` in a
transaction and in autocommit, `reproduce score`'s SQL predictions, `reproduce serve`'s query tool (as a plain
callable and over MCP), and a raw psycopg connection as each sandbox role. At our doors each statement is
refused in one line beginning "refused: "; on the raw connection, after switching read-only mode off, the
server refuses it by privilege; through every door nothing outlives the statement: no role, setting, object,
lock, comment, prepared transaction or backend (sandbox_helpers.leftovers). What a login can always do to
itself in PostgreSQL 15 (ALTER ROLE on itself, its default privileges) is tests/test_roles.py's: named by the
audit, restored by `ingest init`."""

from __future__ import annotations

import asyncio
import json
import resource
from pathlib import Path

import psycopg
import pytest
import sqlalchemy
from mcp import Client
from sandbox_helpers import leftovers
from sqlalchemy import text

from gsqa_core.errors import GsqaError
from gsqa_core.roles import login_dsn
from gsqa_core.sandbox import MODEL, ROLES
from reproduce import configs, dataset, readiness
from reproduce.baseline import Refused, engine
from reproduce.score import ScoreRequest, score
from reproduce.serve.protocol import mcp_server
from reproduce.serve.tools import ServeRequest, ToolRefused, open_tools
from testkit import local_server

HOSTILE = {
    "large object": "SELECT lo_from_bytea(0, '\\x00'::bytea)",
    "large object by number": "SELECT lo_create(0)",
    "large object from a server file": "SELECT lo_import('/etc/hostname')",
    "large object written": "SELECT lo_put(1, 0, '\\x00'::bytea)",
    "session advisory lock": "SELECT pg_advisory_lock(42)",
    "notification": "SELECT pg_notify('gsqa', 'x')",
    "WAL message": "SELECT pg_logical_emit_message(false, 'gsqa', 'x')",
    "temporary table": "CREATE TEMP TABLE scratch (x int)",
    "temporary table from a query": "SELECT 1 AS x INTO TEMP scratch",
    "table": "CREATE TABLE public.intruder (x int)",
    "schema": "CREATE SCHEMA intruder",
    "extension": "CREATE EXTENSION pgcrypto",
    "sequence": "SELECT nextval('pois_id_seq')",
    "comment": "COMMENT ON TABLE pois IS 'mine'",
    "role comment": "COMMENT ON ROLE gsqa_model IS 'mine'",
    "membership": "GRANT gsqa_model TO gsqa_reader",
    "prepared transaction": "PREPARE TRANSACTION 'gsqa'",
    "procedural block": "DO $$ BEGIN PERFORM 1; END $$",
    "write": "DELETE FROM pois",
    "write in a query": "WITH gone AS (DELETE FROM pois RETURNING 1) SELECT count(*) FROM gone",
    "server file": "SELECT pg_read_file('/etc/hostname')",
    "kept passwords": "SELECT password FROM gsqa.role_login",
    "other backends": "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid()",
    "a role that sees every query": "SET ROLE pg_read_all_stats",
    "another session user": "SET SESSION AUTHORIZATION postgres",
    "the build's lock, for the transaction": "SELECT pg_advisory_xact_lock(hashtext('gsqa ingest all'))",
    "a shared transaction lock, tried": "SELECT pg_try_advisory_xact_lock_shared(1)",
    "row locks": "SELECT * FROM pois FOR UPDATE",
    "a PostGIS helper that runs its argument as SQL": "SELECT _add_raster_constraint('x', 'NOTIFY gsqa')",
}
# What the server allows any login but our doors refuse: transient, yet no business of a model's.
DOORS_ONLY = {
    "commit behind an empty statement": "; COMMIT",
    "notification behind a nested comment": "/* /* */ SELECT */ NOTIFY gsqa",
    "listening": "LISTEN gsqa",
    "a cursor kept across transactions": "DECLARE kept CURSOR WITH HOLD FOR SELECT 1",
    "a table lock": "LOCK TABLE pois IN ACCESS SHARE MODE",
    "a session setting": "SET work_mem = '4GB'",
    "a write behind a comment a carriage return ends": "--\rDELETE FROM pois",
    "its stored settings behind a carriage return": "--\rALTER ROLE CURRENT_USER SET work_mem = '1GB'",
    "its password behind a carriage return": "--\rALTER ROLE CURRENT_USER PASSWORD 'taken-over'",
    "its default privileges behind a carriage return": "--\rALTER DEFAULT PRIVILEGES GRANT ALL ON TABLES TO PUBLIC",
    "its settings in another database": "--\rALTER ROLE CURRENT_USER IN DATABASE postgres SET work_mem = '1GB'",
    "a notification behind a carriage return": "--\rNOTIFY gsqa, 'x'",
    "the British spelling": "ANALYSE pois",
    "a write explained, so run": "EXPLAIN ANALYZE DELETE FROM pois",
    "a NUL, past which the server reads nothing": "SELECT 7 AS x\0; DELETE FROM pois",
    "a notification in a Unicode escape's %": "NOTIFY gsqa, U&'x' UESCAPE '%'",
    "a cursor kept in a Unicode escape's %": "DECLARE c CURSOR WITH HOLD FOR SELECT U&'x' UESCAPE '%'",
    "a copy out in a Unicode escape's %": "COPY (SELECT U&'x' UESCAPE '%') TO STDOUT",
    "a lone surrogate": "SELECT '\ud800' AS x",
}
AT_OUR_DOORS = {**HOSTILE, **DOORS_ONLY}
READ_WRITE = "SELECT set_config('default_transaction_read_only', 'off', false)"  # a query: the gate lets it by


@pytest.fixture
def before(demo: tuple[str, Path]) -> dict:
    return leftovers(demo[0])


def assert_one_refusal(line: str) -> None:
    assert line.startswith("refused: ") and "\n" not in line, line


@pytest.mark.parametrize("isolation", ["transaction", "AUTOCOMMIT"])
@pytest.mark.parametrize("name", AT_OUR_DOORS)
def test_engine_refuses_in_one_line_and_nothing_stays(demo: tuple[str, Path], before: dict, name: str,
                                                      isolation: str) -> None:
    made = engine(demo[0], timeout=5)
    if isolation != "transaction":
        made = made.execution_options(isolation_level=isolation)
    try:
        with made.connect() as conn:
            conn.execute(text(READ_WRITE))
            conn.commit()
            with pytest.raises(Refused) as refused:
                conn.execute(text(AT_OUR_DOORS[name]))
    finally:
        made.dispose()
    assert_one_refusal(str(refused.value))
    assert leftovers(demo[0]) == before


def test_score_refuses_every_prediction_in_one_line_and_nothing_stays(demo: tuple[str, Path], before: dict,
                                                                      tmp_path: Path) -> None:
    ids = [record.id for record in dataset.load(demo[1], [configs.template("V5")]).records][:len(AT_OUR_DOORS) + 1]
    statements = [*AT_OUR_DOORS.values(), "SELECT current_user AS poi_name"]
    predictions = tmp_path / "hostile.jsonl"
    predictions.write_text("".join(json.dumps({"id": question, "sql": statement}) + "\n"
                                   for question, statement in zip(ids, statements, strict=True)))
    scored = score(ScoreRequest(predictions=[predictions], config="vector", templates=["V5"], ids=ids, data=demo[1],
                                dsn=demo[0], timeout=5, progress=False))
    by_id = {result.id: result for result in scored.results}
    for question in ids[:-1]:
        assert by_id[question].outcome == "sql_error"
        assert_one_refusal(by_id[question].detail["error"])
    assert by_id[ids[-1]].detail["rows"] == [{"poi_name": "gsqa_model"}]  # models' SQL runs as the model role
    assert leftovers(demo[0]) == before


def serving(demo: tuple[str, Path]):
    """reproduce serve's tools on the demo's R1 questions, with calls enough for every statement."""
    return open_tools(ServeRequest(config="raster_only", data=demo[1], dsn=demo[0], timeout=5, max_calls=1000))


@pytest.mark.parametrize("name", AT_OUR_DOORS)
def test_serve_query_refuses_in_one_line_and_nothing_stays(demo: tuple[str, Path], before: dict, name: str) -> None:
    with serving(demo) as tools:
        tools.query("raster_only/elevation+poi/0", READ_WRITE)
        with pytest.raises(ToolRefused) as refused:
            tools.query("raster_only/elevation+poi/0", AT_OUR_DOORS[name])
        assert tools.query("raster_only/elevation+poi/0", "SELECT current_user AS who")["rows"] == [
            {"who": "gsqa_model"}]
    assert_one_refusal(str(refused.value))
    assert leftovers(demo[0]) == before


def test_serve_over_mcp_refuses_every_statement_in_one_line_and_nothing_stays(demo: tuple[str, Path],
                                                                              before: dict) -> None:
    async def send_all(tools) -> list:
        async with Client(mcp_server(tools)) as client:
            return [await client.call_tool("query", {"question_id": "raster_only/elevation+poi/1", "sql": statement})
                    for statement in AT_OUR_DOORS.values()]

    with serving(demo) as tools:
        results = asyncio.run(send_all(tools))
    prefix = "Error executing tool query: "  # the MCP SDK's, before our line
    for result in results:
        assert result.is_error
        assert result.content[0].text.startswith(prefix)
        assert_one_refusal(result.content[0].text.removeprefix(prefix))
    assert leftovers(demo[0]) == before


@pytest.mark.parametrize("role", ROLES, ids=lambda role: role.name)
@pytest.mark.parametrize("name", HOSTILE)
def test_a_raw_connection_as_a_role_is_refused_by_the_server_and_nothing_stays(demo: tuple[str, Path], before: dict,
                                                                               name: str, role) -> None:
    with psycopg.connect(login_dsn(demo[0], role)) as conn:
        conn.execute("SET default_transaction_read_only = off")
        conn.commit()
        with pytest.raises(psycopg.Error) as refused:
            conn.execute(HOSTILE[name])
        conn.rollback()
    assert refused.value.sqlstate in ("42501", "55000", "0A000"), (refused.value.sqlstate, str(refused.value))
    assert leftovers(demo[0]) == before


def test_out_of_database_rasters_and_gdal_drivers_stay_off_whatever_a_session_sets(demo: tuple[str, Path]) -> None:
    """Set before PostGIS's raster library is loaded, the two settings are placeholders any session may set;
    loading the library refuses them to a role that is not a superuser, so no raster can read a server file."""
    with psycopg.connect(login_dsn(demo[0], ROLES[1]), autocommit=True) as conn:
        conn.execute("SET postgis.enable_outdb_rasters = true")
        conn.execute("SET postgis.gdal_enabled_drivers = 'ENABLE_ALL'")
        conn.execute("SELECT ST_Width(ST_MakeEmptyRaster(1, 1, 0, 0, 1))")
        assert conn.execute("SELECT current_setting('postgis.enable_outdb_rasters'), "
                            "current_setting('postgis.gdal_enabled_drivers')").fetchone() == ("off", "DISABLE_ALL")


def test_the_engine_lets_savepoints_of_a_nested_transaction_through(demo: tuple[str, Path]) -> None:
    made = engine(demo[0], timeout=5)
    try:
        with made.connect() as conn, conn.begin():
            with conn.begin_nested():
                assert conn.execute(text("SELECT count(*) FROM pois")).scalar() > 0
            with pytest.raises(sqlalchemy.exc.ProgrammingError), conn.begin_nested():
                conn.execute(text("SELECT no_such_column FROM pois"))
            assert conn.execute(text("SELECT 1")).scalar() == 1  # the rollback to the savepoint kept the transaction
    finally:
        made.dispose()


READ_ONLY = "SELECT current_setting('transaction_read_only') AS read_only, " \
            "current_setting('standard_conforming_strings') AS strings, current_setting('client_encoding') AS bytes"
LOOSEN = ["SELECT set_config('default_transaction_read_only', 'off', false)",
          "SELECT set_config('standard_conforming_strings', 'off', false)",
          "SELECT set_config('client_encoding', 'SJIS', false)"]


@pytest.mark.parametrize("isolation", ["transaction", "AUTOCOMMIT"])
def test_engine_begins_every_transaction_read_only_whatever_the_session_default(demo: tuple[str, Path], before: dict,
                                                                                isolation: str) -> None:
    """One held connection, as an agent loop keeps it: the session's defaults switched off and committed, each
    later statement still runs in a transaction the client began READ ONLY, with the gate's reading of strings."""
    made = engine(demo[0], timeout=5)
    if isolation != "transaction":
        made = made.execution_options(isolation_level=isolation)
    try:
        with made.connect() as conn:
            for statement in LOOSEN:
                conn.execute(text(statement))
                conn.commit()
            seen = [tuple(conn.execute(text(READ_ONLY)).one()) for _ in range(2)]
            conn.commit()
            with pytest.raises(sqlalchemy.exc.DBAPIError, match="read-write"):
                conn.execute(text("SELECT set_config('transaction_read_only', 'off', false)"))
    finally:
        made.dispose()
    assert seen == [("on", "on", "UTF8")] * 2
    assert leftovers(demo[0]) == before


def test_serve_and_score_sessions_begin_every_question_read_only(demo: tuple[str, Path], before: dict,
                                                                 tmp_path: Path) -> None:
    with serving(demo) as tools:
        for statement in LOOSEN:
            tools.query("raster_only/elevation+poi/0", statement)
        assert tools.query("raster_only/elevation+poi/0", READ_ONLY)["rows"] == [
            {"read_only": "on", "strings": "on", "bytes": "UTF8"}]
    ids = [record.id for record in dataset.load(demo[1], [configs.template("V5")]).records][:1]
    predictions = tmp_path / "read_only.jsonl"
    predictions.write_text(json.dumps({"id": ids[0], "sql": READ_ONLY}) + "\n")
    scored = score(ScoreRequest(predictions=[predictions], config="vector", templates=["V5"], ids=ids, data=demo[1],
                                dsn=demo[0], timeout=5, progress=False))
    assert scored.results[0].detail["rows"] == [{"read_only": "on", "strings": "on", "bytes": "UTF8"}]
    assert leftovers(demo[0]) == before


OUT_OF_MEMORY = "refused: out of memory (a statement may use only a bounded share of the server's memory)"


def memory_hog() -> str:
    """A statement whose backend needs 300 MB more than the memory a backend of the test server may take."""
    pieces = local_server.backend_memory_bytes() // 100_000_000 + 3
    return f"SELECT cardinality(array_agg(repeat('x', 100000000))) AS elevation FROM generate_series(1, {pieces})"


@pytest.mark.parametrize("door", ["engine", "score", "serve"])
def test_a_statement_past_its_backends_memory_fails_in_one_line_and_no_other_session_notices(
        demo: tuple[str, Path], before: dict, door: str, tmp_path: Path) -> None:
    with psycopg.connect(demo[0], autocommit=True) as bystander:
        started = bystander.execute("SELECT pg_postmaster_start_time()").fetchone()[0]
        if door == "engine":
            made = engine(demo[0], timeout=60)
            try:
                with made.connect() as conn, pytest.raises(Refused) as refused:
                    conn.execute(text(memory_hog()))
            finally:
                made.dispose()
            line = str(refused.value)
        elif door == "serve":
            with serving(demo) as tools, pytest.raises(ToolRefused) as refused:
                tools.query("raster_only/elevation+poi/0", memory_hog())
            line = str(refused.value).split(" [budget left")[0]
        else:
            question = "raster_only/elevation+poi/0"
            predictions = tmp_path / "hog.jsonl"
            predictions.write_text(json.dumps({"id": question, "sql": memory_hog()}) + "\n")
            scored = score(ScoreRequest(predictions=[predictions], config="raster_only", templates=["R1"],
                                        ids=[question], data=demo[1], dsn=demo[0], timeout=60, progress=False))
            assert scored.results[0].outcome == "sql_error"
            line = scored.results[0].detail["error"]
        assert line == OUT_OF_MEMORY
        assert bystander.execute("SELECT pg_postmaster_start_time()").fetchone()[0] == started  # no restart
    assert leftovers(demo[0]) == before


@pytest.mark.parametrize("statement, size", [
    ("SELECT 0::bit(83886080) AS b0, 0::bit(83886080) AS b1", "167.8"),
    ("SELECT array_fill(NULL::int, ARRAY[20000000]) AS a", "100.0"),
])
def test_a_row_larger_as_text_than_stored_stops_on_the_server_at_every_model_door(
        demo: tuple[str, Path], statement: str, size: str, tmp_path: Path) -> None:
    """A bit string is 8 times larger as text than stored, an array of NULLs 40 times: the cap counts what the
    client will receive, so no door's process grows by more than the cap."""
    expected = f"the result is too large: one row is {size} MB as text, past the cap of 67 MB (stopped on the server)"
    grown_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with serving(demo) as tools, pytest.raises(ToolRefused) as refused:
        tools.query("raster_only/elevation+poi/0", statement)
    assert str(refused.value).split(" [budget left")[0] == expected
    question = "raster_only/elevation+poi/1"
    predictions = tmp_path / "wide.jsonl"
    predictions.write_text(json.dumps({"id": question, "sql": statement}) + "\n")
    scored = score(ScoreRequest(predictions=[predictions], config="raster_only", templates=["R1"], ids=[question],
                                data=demo[1], dsn=demo[0], timeout=30, progress=False))
    assert scored.results[0].detail["error"] == expected
    made = engine(demo[0], timeout=30)
    try:
        with made.connect() as conn, pytest.raises(Refused) as by_engine:
            conn.execute(text(statement))
    finally:
        made.dispose()
    assert str(by_engine.value) == expected
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - grown_before) / 1024 < 100  # MB


def test_engine_stops_a_result_past_the_row_cap_on_the_server(demo: tuple[str, Path]) -> None:
    made = engine(demo[0], timeout=30)
    try:
        with made.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM generate_series(1, 1000000)")).scalar() == 1_000_000
            with pytest.raises(Refused) as refused:
                conn.execute(text("SELECT g FROM generate_series(1, 1000000) g"))
    finally:
        made.dispose()
    assert str(refused.value) == ("the result is too large: more than 100,000 rows (stopped on the server); "
                                  "aggregate, or add ORDER BY and LIMIT")


def test_a_tampered_model_role_is_named_as_such_at_every_door(demo: tuple[str, Path], tmp_path: Path) -> None:
    with psycopg.connect(demo[0], autocommit=True) as admin:
        admin.execute("ALTER ROLE gsqa_model SET work_mem = '1GB'")
        try:
            with pytest.raises(GsqaError) as by_engine:
                engine(demo[0])
            with pytest.raises(GsqaError) as by_serve:
                serving(demo)
            predictions = tmp_path / "one.jsonl"
            predictions.write_text(json.dumps({"id": "raster_only/elevation+poi/0", "sql": "SELECT 1"}) + "\n")
            with pytest.raises(GsqaError) as by_score:
                score(ScoreRequest(predictions=[predictions], config="raster_only", templates=["R1"], data=demo[1],
                                   dsn=demo[0], timeout=5, progress=False))
        finally:
            admin.execute("ALTER ROLE gsqa_model SET work_mem = '64MB'")
    tampered = ("gsqa_model is not as declared: it stores work_mem=1GB (declared 64MB) (`ingest init` restores what "
                "it can and names the rest)")
    assert str(by_engine.value) == f"no engine for baselines: {tampered}"
    assert str(by_serve.value) == str(by_score.value) == f"the database is not ready: {tampered}"


def test_check_says_how_much_memory_each_backend_may_take(demo: tuple[str, Path]) -> None:
    each = local_server.backend_memory_bytes() // 1024**2
    with open("/proc/meminfo") as meminfo:
        total = next(int(line.split()[1]) // 1024 for line in meminfo if line.startswith("MemTotal:"))
    with psycopg.connect(demo[0]) as conn:
        workers = int(conn.execute("SHOW max_parallel_workers").fetchone()[0])
    backends = MODEL.connection_limit + workers
    assert readiness.check(demo[0]).notes == [
        f"each backend of the server may take {each:,} MB of its own memory; gsqa_model's {MODEL.connection_limit} "
        f"connections and the server's {workers} parallel workers together {backends * each:,} MB, "
        f"{backends * each / total:.0%} of the server's {total:,} MB"]


def test_engine_refuses_what_would_commit_or_outlive_its_timeout_in_one_line(demo: tuple[str, Path],
                                                                             before: dict) -> None:
    made = engine(demo[0], timeout=5)
    try:
        with made.connect() as conn, pytest.raises(Refused) as two_phase:
            conn.begin_twophase()
        with made.connect() as conn, pytest.raises(Refused) as streamed:
            conn.execution_options(stream_results=True).execute(text("SELECT 1"))
    finally:
        made.dispose()
    assert str(two_phase.value) == ("refused: a two-phase transaction commits; the sandbox only reads, and never "
                                    "commits")
    assert str(streamed.value) == ("refused: a server-side cursor (stream_results) keeps a statement open past its "
                                   "timeout; fetch the result at once (it is capped at 100,000 rows)")
    assert leftovers(demo[0]) == before


def test_engine_begins_read_only_whatever_an_execution_option_says_and_a_savepoint_begins_it(
        demo: tuple[str, Path], before: dict) -> None:
    made = engine(demo[0], timeout=5)
    try:
        with made.connect() as conn:
            writable = conn.execution_options(postgresql_readonly=False)
            writable.exec_driver_sql("SAVEPOINT first")  # the statement that begins the transaction
            writable.exec_driver_sql("RELEASE first")
            seen = tuple(writable.execute(text(READ_ONLY)).one())
            writable.commit()
    finally:
        made.dispose()
    assert seen == ("on", "on", "UTF8")
    assert leftovers(demo[0]) == before


def test_engine_autocommit_does_not_outlive_its_checkout(demo: tuple[str, Path]) -> None:
    made = engine(demo[0], timeout=5, pool_size=1)
    try:
        with made.connect() as conn, pytest.raises(sqlalchemy.exc.ProgrammingError):
            conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("SELECT no_such_column FROM pois"))
        with made.connect() as conn:  # the same connection, by default in a transaction again
            first = conn.execute(text("SELECT now()")).scalar()
            assert conn.execute(text("SELECT now()")).scalar() == first
    finally:
        made.dispose()


def test_sql_nested_past_the_parsers_stack_is_read_and_sql_past_the_gates_length_refused(
        demo: tuple[str, Path], tmp_path: Path) -> None:
    """70,000 levels of `1+1+...` overflow an 8 MB stack in the parser: the gate reads long SQL on a larger one,
    and the server refuses the depth in one line; SQL longer than anything the gate reads is refused unread."""
    deep = "SELECT " + "+".join(["1"] * 70_000) + " AS elevation"
    long = "SELECT '" + "x" * 1_000_000 + "' AS elevation"
    ids = ["raster_only/elevation+poi/0", "raster_only/elevation+poi/1", "raster_only/elevation+poi/2"]
    predictions = tmp_path / "long.jsonl"
    predictions.write_text("".join(json.dumps({"id": question, "sql": statement}) + "\n" for question, statement in
                                   zip(ids, [deep, long, "SELECT 1.5 AS elevation; -- the model's last word"],
                                       strict=True)))
    scored = score(ScoreRequest(predictions=[predictions], config="raster_only", templates=["R1"], ids=ids,
                                data=demo[1], dsn=demo[0], timeout=30, progress=False))
    by_id = {result.id: result for result in scored.results}
    assert by_id[ids[0]].detail["error"] == "stack depth limit exceeded"
    assert by_id[ids[1]].detail["error"] == (
        "refused: the SQL has 1,000,022 characters, more than the 1,000,000 read here (the longest gold SQL has "
        "421,331); only a query runs here (SELECT, WITH, VALUES, TABLE)")
    assert by_id[ids[2]].detail["rows"] == [{"elevation": 1.5}]  # a trailing `;` and comment are not the query's


def test_engine_reads_what_the_driver_sends_when_sqlalchemy_sends_no_parameters(demo: tuple[str, Path],
                                                                                before: dict) -> None:
    """With no_parameters, SQLAlchemy calls the driver without any, so psycopg sends `%(` as it is: the gate must
    not read it as a placeholder (that would hide the SET in a comment)."""
    made = engine(demo[0], timeout=5)
    try:
        with made.connect() as conn, pytest.raises(Refused) as refused:
            conn.execution_options(no_parameters=True).exec_driver_sql(
                "/*%(*/ SET gsqa.x = 'set' --)s*/ SELECT 1")
    finally:
        made.dispose()
    assert str(refused.value) == ("refused: `SET` changes the session, whose settings the sandbox fixes; only a "
                                  "query runs here (SELECT, WITH, VALUES, TABLE)")
    assert leftovers(demo[0]) == before
