"""reproduce.baseline.engine(): an SQLAlchemy engine on the demo database that reads as gsqa_reader, knows the
PostGIS types, and refuses what `reproduce` refuses to benchmark SQL."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy
from geoalchemy2 import Geography, Raster
from sqlalchemy import inspect, text

from gsqa_core import schema
from gsqa_core.db import with_user
from gsqa_core.errors import GsqaError
from gsqa_core.roles import login_dsn
from gsqa_core.sandbox import MODEL
from reproduce.baseline import APPLICATION_NAME, Refused, engine
from reproduce.runner import SandboxConnection

TIMEOUT = 1.0
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def db(demo_dsn: str) -> Iterator[sqlalchemy.Engine]:
    made = engine(demo_dsn, timeout=TIMEOUT)
    yield made
    made.dispose()


def admin_count(dsn: str, table: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_the_inspector_lists_the_reference_tables_with_their_types_and_no_warning(db: sqlalchemy.Engine) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Did not recognize type 'geography'" would fail the test
        inspector = inspect(db)
        names = inspector.get_table_names()
        columns = {table.name: inspector.get_columns(table.name) for table in schema.REFERENCE_TABLES}
    assert sorted(names) == sorted([table.name for table in schema.REFERENCE_TABLES] + ["spatial_ref_sys"])
    for table in schema.REFERENCE_TABLES:
        assert [column["name"] for column in columns[table.name]] == [column.name for column in table.columns]
    for table in schema.VECTOR_TABLES:
        geometry = columns[table.name][1]["type"]
        assert isinstance(geometry, Geography) and (geometry.geometry_type, geometry.srid) == ("GEOMETRY", 4326)
        assert all(isinstance(column["type"], sqlalchemy.VARCHAR) and column["type"].length == 255
                   for column in columns[table.name][2:] if column["name"] != "osm_id")
    assert [type(column["type"]) for column in columns["dem_us"]] == [sqlalchemy.INTEGER, Raster, sqlalchemy.TEXT]


def test_a_text_query_runs_as_the_model_role_with_its_limits(db: sqlalchemy.Engine, demo_dsn: str) -> None:
    with db.connect() as conn:
        row = conn.execute(text(
            "SELECT current_user, current_setting('application_name'), current_setting('statement_timeout'), "
            "current_setting('transaction_read_only'), current_setting('temp_file_limit'), "
            "current_setting('work_mem'), (SELECT count(*) FROM dem_us), "
            "(SELECT count(*) FROM pois WHERE tourism = :kind)"), {"kind": "museum"}).one()
    with psycopg.connect(demo_dsn) as conn:
        museums = conn.execute("SELECT count(*) FROM pois WHERE tourism = 'museum'").fetchone()[0]
    assert tuple(row) == (MODEL.name, APPLICATION_NAME, "1s", "on", "2GB", "64MB",
                          admin_count(demo_dsn, "dem_us"), museums)
    assert museums > 0


ONLY_A_QUERY = "only a query runs here (SELECT, WITH, VALUES, TABLE)"
REFUSED = [
    ("DELETE FROM pois", f"refused: `DELETE` writes or moves data; {ONLY_A_QUERY}"),
    ("SELECT 1; DELETE FROM pois", f"refused: several statements in one; {ONLY_A_QUERY}, one statement at a time"),
    ("COMMIT; DELETE FROM pois", f"refused: several statements in one; {ONLY_A_QUERY}, one statement at a time"),
    ("--\rALTER ROLE CURRENT_USER SET work_mem = '1GB'", f"refused: `ALTER` changes the database; {ONLY_A_QUERY}"),
    ("SET ROLE postgres", f"refused: `SET` changes the session, whose settings the sandbox fixes; {ONLY_A_QUERY}"),
    ("/* a comment first */ DO $$ BEGIN END $$", f"refused: `DO` runs procedural code; {ONLY_A_QUERY}"),
    ("WITH gone AS (DELETE FROM pois RETURNING 1) SELECT count(*) FROM gone",
     f"refused: `DELETE` inside the query writes data; {ONLY_A_QUERY}"),
    ("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid()",
     "refused: permission denied for function pg_terminate_backend (the sandbox role may only read the reference "
     "tables)"),
]


@pytest.mark.parametrize("statement, refusal", REFUSED)
def test_what_reproduce_refuses_the_engine_refuses_in_the_same_line(db: sqlalchemy.Engine, demo_dsn: str,
                                                                    statement: str, refusal: str) -> None:
    before = admin_count(demo_dsn, "pois")
    with db.connect() as conn, pytest.raises(Refused) as raised:
        conn.execute(text(statement))
    assert str(raised.value) == refusal and isinstance(raised.value, sqlalchemy.exc.DBAPIError)
    session = SandboxConnection(login_dsn(demo_dsn, MODEL), timeout=TIMEOUT)
    outcome = session.run(statement)
    session.close()
    assert (outcome.kind, outcome.error) == ("error", refusal)
    assert admin_count(demo_dsn, "pois") == before > 0


def test_a_statement_past_the_timeout_is_cancelled_on_the_server(db: sqlalchemy.Engine) -> None:
    with db.connect() as conn, pytest.raises(sqlalchemy.exc.OperationalError) as raised:
        conn.execute(text("SELECT pg_sleep(30)"))
    assert type(raised.value.orig) is psycopg.errors.QueryCanceled


def test_a_statement_cannot_lift_the_timeout_of_the_next(db: sqlalchemy.Engine) -> None:
    with db.connect() as conn:
        conn.execute(text("SELECT set_config('statement_timeout', '0', false)"))
        conn.commit()
        with pytest.raises(sqlalchemy.exc.OperationalError) as raised:
            conn.execute(text("SELECT pg_sleep(30)"))
    assert type(raised.value.orig) is psycopg.errors.QueryCanceled


def test_a_connection_goes_back_to_the_pool_with_its_session_reset(demo_dsn: str) -> None:
    made = engine(demo_dsn, pool_size=1, max_overflow=0)
    try:
        with made.connect() as conn:
            first = conn.execute(text("SELECT pg_backend_pid(), set_config('application_name', 'x', false)")).one()[0]
            conn.commit()
        with made.connect() as conn:
            again, name = conn.execute(text("SELECT pg_backend_pid(), current_setting('application_name')")).one()
    finally:
        made.dispose()
    assert (again, name) == (first, APPLICATION_NAME)  # the same backend, its setting gone


@pytest.mark.parametrize("timeout", [0, -1, 0.05, float("nan"), float("inf"), 3e6, "1", True])
def test_a_timeout_out_of_the_servers_range_is_refused_in_one_line(demo_dsn: str, timeout: object) -> None:
    with pytest.raises(GsqaError) as raised:
        engine(demo_dsn, timeout=timeout)
    assert str(raised.value) == (f"timeout={timeout!r}: give seconds from 0.1 to 2,147,483.647, the server-side "
                                 "limit of each statement")


def test_a_missing_database_gets_the_advice_the_cli_gives(server_dsn: str) -> None:
    missing = psycopg.conninfo.make_conninfo(server_dsn, dbname="gsqa_no_such_database")
    with pytest.raises(GsqaError) as raised:
        engine(missing)
    message = str(raised.value)
    assert message.startswith("no engine for baselines: gsqa_model cannot log in: ") and "\n" not in message
    assert 'database "gsqa_no_such_database" does not exist' in message
    assert message.endswith("The server runs but has no such database: create it (createdb NAME), or run `make db`, "
                            "which builds gsqa, or point --dsn / DATABASE_URL at the right database.")


def test_no_engine_for_a_reader_that_may_end_other_backends(demo_dsn: str) -> None:
    grant = "GRANT EXECUTE ON FUNCTION pg_catalog.pg_terminate_backend(integer, bigint) TO PUBLIC"
    with psycopg.connect(demo_dsn, autocommit=True) as conn:  # this database only, to leave concurrent runs alone
        conn.execute(grant)
    try:
        with pytest.raises(GsqaError, match=r"no engine for baselines: gsqa_model is not as declared: it may execute "
                                            r"pg_terminate_backend\(integer, bigint\)"):
            engine(demo_dsn)
    finally:
        with psycopg.connect(demo_dsn, autocommit=True) as conn:
            conn.execute(grant.replace("GRANT", "REVOKE").replace(" TO ", " FROM "))


def test_no_engine_when_the_reader_cannot_log_in(demo_dsn: str) -> None:
    with pytest.raises(GsqaError, match="no engine for baselines: gsqa_model cannot log in: .* Nothing listens there"):
        engine(login=with_user("postgresql://127.0.0.1:1/gsqa_nowhere", MODEL.name, None))


def test_without_the_baseline_extra_the_import_says_what_to_install() -> None:
    script = "import sys; sys.modules['sqlalchemy'] = None; import reproduce.baseline"
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == ("ModuleNotFoundError: reproduce.baseline needs sqlalchemy: "
                                            "pip install 'gsqa-refdb[baseline]'")


def test_the_readme_example_runs_on_the_demo_database(demo_dsn: str) -> None:
    readme = (ROOT / "README.md").read_text()
    example = readme.split("## Run your baseline", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    done = subprocess.run([sys.executable, "-c", example], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "DATABASE_URL": demo_dsn})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["geography(GEOMETRY,4326)", str(admin_count(demo_dsn, "dem_us"))]
