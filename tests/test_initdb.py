"""`ingest init` builds exactly the schema of docs/REFERENCE-DB.md, once, and refuses conflicting tables."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from conftest import DATA
from load_helpers import end_sessions

from gsqa_core import schema
from gsqa_core.errors import SchemaConflict
from gsqa_core.schema import table_columns
from ingest.initdb import finalize, initialize

SPEC = DATA / "reference-ddl.md"
REFERENCE_TABLE_NAMES = ["pois", "roads", "parks", "lakes", "regions", "dem_us"]

INFO_SCHEMA_COLUMNS = """
    SELECT column_name, data_type, character_maximum_length, udt_name, is_nullable,
           column_default IS NOT NULL AS has_default
    FROM information_schema.columns WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position
"""


def spec_ddl() -> list[str]:
    """The CREATE TABLE statements of docs/REFERENCE-DB.md, as written there."""
    blocks = re.findall(r"```sql\n(.*?)```", SPEC.read_text(), flags=re.S)
    statements = re.findall(r"CREATE TABLE .*?\);", "\n".join(blocks), flags=re.S)
    assert len(statements) == 6, f"expected 6 CREATE TABLE statements in {SPEC}, found {len(statements)}"
    return statements


@pytest.fixture(scope="module")
def spec_schema(initialized_dsn: str) -> str:
    """The spec's DDL executed verbatim in a schema of its own, next to what `ingest init` made."""
    with psycopg.connect(initialized_dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA spec; SET search_path = spec, public")
        for statement in spec_ddl():
            conn.execute(statement.replace("public.dem_us", "dem_us"))
    return "spec"


@pytest.mark.parametrize("table", REFERENCE_TABLE_NAMES)
def test_columns_match_the_spec(initialized_dsn: str, spec_schema: str, table: str) -> None:
    with psycopg.connect(initialized_dsn) as conn:
        ours = conn.execute(INFO_SCHEMA_COLUMNS, ["public", table]).fetchall()
        spec = conn.execute(INFO_SCHEMA_COLUMNS, [spec_schema, table]).fetchall()
        assert ours == spec
        # information_schema hides typmods: geography(Geometry,4326) must match too.
        assert table_columns(conn, f"public.{table}") == table_columns(conn, f"{spec_schema}.{table}")


def test_public_holds_exactly_the_reference_tables(initialized_dsn: str) -> None:
    with psycopg.connect(initialized_dsn) as conn:
        public = {name for (name,) in conn.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = 'public' AND table_type = 'BASE TABLE'"
        )}
        bookkeeping = {name for (name,) in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'gsqa'"
        )}
    assert public == set(REFERENCE_TABLE_NAMES) | {"spatial_ref_sys"}
    assert bookkeeping == {"load_log", "pois_stage", "role_login", "stage_log"}


def test_primary_keys_and_no_spatial_index_before_the_load(initialized_dsn: str) -> None:
    with psycopg.connect(initialized_dsn) as conn:
        indexes = {name for (name,) in conn.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = 'public' AND tablename <> 'spatial_ref_sys'"
        )}
    assert indexes == {f"{name}_pkey" for name in REFERENCE_TABLE_NAMES}


def test_second_run_changes_nothing(initialized_dsn: str) -> None:
    report = initialize(initialized_dsn)
    assert not report.changed
    assert report.created == []


def test_first_run_on_a_bare_database_creates_everything(fresh_dsn: str) -> None:
    report = initialize(fresh_dsn)
    expected = {f"table {table.fullname}" for table in schema.ALL_TABLES}
    expected |= {"extension postgis", "extension postgis_raster", "schema gsqa"}
    assert expected <= set(report.created)
    assert initialize(fresh_dsn).created == []


def test_conflicting_table_is_refused_and_nothing_is_created(fresh_dsn: str) -> None:
    with psycopg.connect(fresh_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.pois (id serial PRIMARY KEY, name text)")
    with pytest.raises(SchemaConflict, match=r"public\.pois .*column 2 is name text, expected geometry"):
        initialize(fresh_dsn)
    with psycopg.connect(fresh_dsn) as conn:
        assert conn.execute("SELECT to_regclass('public.roads')").fetchone()[0] is None
        assert conn.execute("SELECT count(*) FROM pg_extension WHERE extname = 'postgis'").fetchone()[0] == 0


GIX = {f"{table}_geometry_gix" for table in ["pois", "roads", "parks", "lakes", "regions"]}
PAUSE_ROADS_INDEX = [
    "CREATE FUNCTION public.test_pause() RETURNS event_trigger LANGUAGE plpgsql AS $$ BEGIN IF EXISTS (SELECT FROM "
    "pg_event_trigger_ddl_commands() WHERE object_identity LIKE '%roads_geometry_gix') THEN PERFORM pg_sleep(600); "
    "END IF; END $$",
    "CREATE EVENT TRIGGER test_pause ON ddl_command_end WHEN TAG IN ('CREATE INDEX') "
    "EXECUTE FUNCTION public.test_pause()",
]


def _indexes(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        return {row[0] for row in conn.execute("SELECT indexname FROM pg_indexes WHERE indexname LIKE '%_gix'")}


def test_finalize_builds_the_other_tables_while_one_is_slow(initialized_dsn: str) -> None:
    """One table per connection at a time: while the roads index hangs, the other four are built and
    analyzed; the failure of the one stops finalize, and a rerun adds what is missing."""
    with psycopg.connect(initialized_dsn, autocommit=True) as conn:
        for statement in PAUSE_ROADS_INDEX:
            conn.execute(statement)
    with ThreadPoolExecutor(1) as runner:
        finalizing = runner.submit(finalize, initialized_dsn, 2)
        deadline = time.monotonic() + 60
        while _indexes(initialized_dsn) != GIX - {"roads_geometry_gix"} and time.monotonic() < deadline:
            time.sleep(0.05)
        built_meanwhile = _indexes(initialized_dsn)
        end_sessions(initialized_dsn)  # the hanging roads build
        with pytest.raises(psycopg.OperationalError):
            finalizing.result(timeout=60)
    assert built_meanwhile == GIX - {"roads_geometry_gix"}
    with psycopg.connect(initialized_dsn, autocommit=True) as conn:
        conn.execute("DROP EVENT TRIGGER test_pause")
        conn.execute("DROP FUNCTION public.test_pause()")
        assert conn.execute("SELECT count(*) FROM pg_stat_user_tables WHERE relname = 'lakes' "
                            "AND last_analyze IS NOT NULL").fetchone()[0] == 1
    finalize(initialized_dsn)
    assert _indexes(initialized_dsn) == GIX
