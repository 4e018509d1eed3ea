"""gsqa_reader can read the reference tables and nothing else: no writes, no temp tables, no escape."""

from __future__ import annotations

import psycopg
import pytest

from gsqa_core.db import with_user
from gsqa_core.schema import READER_ROLE


@pytest.fixture(scope="module")
def reader_dsn(initialized_dsn: str) -> str:
    with psycopg.connect(initialized_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pois (geometry, poi_name) VALUES ('POINT(1 2)', 'seed')")
    return with_user(initialized_dsn, READER_ROLE, None)


def run_as_reader(dsn: str, *statements: str) -> None:
    """Each argument is sent as one query string (which may hold several statements), in order."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def seed_count(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM pois").fetchone()[0]


def test_reader_reads_tables_and_postgis_metadata(reader_dsn: str) -> None:
    with psycopg.connect(reader_dsn) as conn:
        assert conn.execute("SELECT current_user").fetchone()[0] == READER_ROLE
        name, = conn.execute(
            "SELECT poi_name FROM pois WHERE ST_DWithin(geometry, 'POINT(1 2)'::geography, 10)"
        ).fetchone()
        assert name == "seed"
        assert conn.execute("SELECT count(*) FROM dem_us").fetchone()[0] == 0
        # ST_Transform reads spatial_ref_sys.
        x, = conn.execute("SELECT ST_X(ST_Transform('SRID=4326;POINT(1 2)'::geometry, 3857))").fetchone()
        assert x == pytest.approx(111319.49, abs=0.01)


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO pois (poi_name) VALUES ('x')",
        "DELETE FROM pois",
        "DROP TABLE pois",
        "CREATE TABLE public.intruder (x int)",
        "CREATE TEMP TABLE scratch (x int)",
        "SELECT 1 INTO TEMP scratch2",
        "SET TRANSACTION READ WRITE; DELETE FROM pois",
        "RESET ROLE; DELETE FROM pois",
        "SET ROLE postgres; DELETE FROM pois",
        "SET SESSION AUTHORIZATION postgres; DELETE FROM pois",
        "WITH gone AS (DELETE FROM pois RETURNING 1) SELECT count(*) FROM gone",
        "SELECT * FROM gsqa.load_log",
        "SELECT nextval('pois_id_seq')",
        # Read-only mode is only the first wall: the SQL can switch it off, privileges still hold.
        ("SET default_transaction_read_only = off", "DELETE FROM pois"),
        ("SET default_transaction_read_only = off", "CREATE TEMP TABLE scratch3 (x int)"),
        ("SET default_transaction_read_only = off", "CREATE TABLE public.intruder (x int)"),
    ],
)
def test_reader_cannot_write_or_escape(
    reader_dsn: str, initialized_dsn: str, statement: str | tuple[str, str]
) -> None:
    statements = (statement,) if isinstance(statement, str) else statement
    expected = psycopg.errors.InsufficientPrivilege if len(statements) > 1 else psycopg.Error
    with pytest.raises(expected):
        run_as_reader(reader_dsn, *statements)
    assert seed_count(initialized_dsn) == 1
    with psycopg.connect(initialized_dsn) as conn:
        assert conn.execute("SELECT to_regclass('public.intruder')").fetchone()[0] is None


def test_reader_has_role_level_timeout_and_read_only_default(reader_dsn: str) -> None:
    with psycopg.connect(reader_dsn) as conn:
        timeout, read_only = conn.execute(
            "SELECT current_setting('statement_timeout'), current_setting('default_transaction_read_only')"
        ).fetchone()
    assert (timeout, read_only) == ("2min", "on")


def test_rerunning_init_keeps_the_reader_locked_down(reader_dsn: str, initialized_dsn: str) -> None:
    from ingest.initdb import initialize

    initialize(initialized_dsn)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        run_as_reader(reader_dsn, "SET default_transaction_read_only = off", "CREATE TEMP TABLE again (x int)")
