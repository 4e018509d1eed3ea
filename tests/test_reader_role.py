"""gsqa_reader can read the reference tables and nothing else: no writes, no temp tables, no escape."""

from __future__ import annotations

import getpass

import local_server
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from gsqa_core.db import with_user
from gsqa_core.reader import READER_PASSWORD_ENV, kept_password, reader_problem
from gsqa_core.reader import reader_dsn as reader_dsn_of
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


def test_init_gives_the_reader_a_password_it_keeps_where_the_reader_cannot_read_it(
        reader_dsn: str, initialized_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from ingest.initdb import initialize

    monkeypatch.delenv(READER_PASSWORD_ENV, raising=False)
    generated = kept_password(initialized_dsn)
    assert generated and len(generated) >= 20
    initialize(initialized_dsn)
    assert kept_password(initialized_dsn) == generated  # a rerun keeps it
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        run_as_reader(reader_dsn, "SELECT password FROM gsqa.reader_login")
    monkeypatch.setenv(READER_PASSWORD_ENV, "chosen-by-the-admin")
    initialize(initialized_dsn)
    monkeypatch.delenv(READER_PASSWORD_ENV)
    assert kept_password(initialized_dsn) == "chosen-by-the-admin"
    with psycopg.connect(initialized_dsn) as conn:
        assert conn.execute("SELECT rolpassword LIKE 'SCRAM-SHA-256$%%' FROM pg_authid WHERE rolname = %s",
                            [READER_ROLE]).fetchone()[0]


def test_where_the_socket_refuses_the_reader_it_logs_in_over_tcp(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stock Debian server: peer authentication on the socket, scram-sha-256 on 127.0.0.1."""
    from ingest.initdb import initialize

    monkeypatch.delenv(READER_PASSWORD_ENV, raising=False)
    with local_server.stock_debian_cluster() as server:
        admin = server.dsn("postgres", user=getpass.getuser())
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION postgis; CREATE EXTENSION postgis_raster")
        initialize(admin)
        login = reader_dsn_of(admin, None)
        assert conninfo_to_dict(login)["host"] == "127.0.0.1" and reader_problem(login) is None
        monkeypatch.setenv(READER_PASSWORD_ENV, "not-its-password")
        problem = reader_problem(reader_dsn_of(admin, None))
        assert problem.startswith("the reader role cannot log in") and "Peer authentication failed" in problem
        assert f"`ingest init` gives it a password, {READER_PASSWORD_ENV}" in problem
